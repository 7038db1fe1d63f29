/**
 * A release across a 1 s connection cut (TCP proxy in front of one server): the release that
 * cannot reach the ensemble fails with a BackendError; the library deletes the node itself
 * within about a second of the connection's return (the native binding alone came back only when
 * a timer armed for a third of the session timeout fired: 5.5 s after the restore, seen); another
 * client's acquire started at the restore is granted within its 5 s wait; and a second
 * `release()` asks the engine again (before, it answered `not-held` from local state, the node
 * still in place).
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { BackendError } from '../../../packages/fencelock/src/index.js';
import { backendOf, nodesOf, sleep, useZookeeper, waitUntil } from './fault-support.js';

const zk = useZookeeper('release-cut');

/** `fencelock:release` events (one per engine call of a `release()`), by owner. */
const releases: { owner: string; outcome: string }[] = [];
const onRelease = (message: unknown) => {
  const { owner, outcome } = message as { owner: string; outcome: string };
  releases.push({ owner, outcome });
};
subscribe('fencelock:release', onRelease);
afterEach(() => {
  releases.length = 0;
});

describe('zookeeper: release across a 1 s connection cut', () => {
  it('fails, the node is gone within about 1 s of the return, the waiter is granted, a second release asks the engine', async () => {
    try {
      const proxy = await zk.proxy(1);
      const holder = zk.locker(zk.url(`127.0.0.1:${proxy.port}`), { ttlMs: 4000 });
      const other = zk.locker(zk.url(), { ttlMs: 4000 });
      const key = 'release-cut';
      const dir = (await backendOf(other)).dirOf(key);
      const lease = await holder.acquire(key);
      expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([lease.fencingToken]);
      await sleep(50);

      proxy.cut();
      const first = await lease.release().then(
        (outcome) => outcome,
        (error: unknown) => error,
      );
      expect(first).toBeInstanceOf(BackendError);
      // The cut lasts 1 s; the node stays meanwhile (the holder cannot reach the ensemble).
      await sleep(1000);
      expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([lease.fencingToken]);

      await proxy.restore();
      const restoredAt = performance.now();
      let grantedAt: number | undefined;
      const waiting = other.acquire(key, { waitMs: 5000 }).then((granted) => {
        grantedAt = performance.now();
        return granted;
      });
      waiting.catch(() => undefined);
      await waitUntil(
        "the holder's node deleted",
        async () => (await nodesOf(zk.admin, dir)).every((n) => n.czxid !== lease.fencingToken),
        5000,
      );
      const goneMs = performance.now() - restoredAt;
      const next = await waiting;
      const grantMs = grantedAt! - restoredAt;
      console.info(
        `zk release across a 1 s cut: node gone ${Math.round(goneMs)} ms, waiter granted ` +
          `${Math.round(grantMs)} ms after the restore`,
      );
      expect(goneMs).toBeLessThan(1500);
      expect(grantMs).toBeLessThan(1500);
      expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);

      // The second release goes to the engine (a release event), which no longer has the node.
      const second = await lease.release();
      expect(second).toBe('not-owner');
      expect(releases.filter((r) => r.owner === lease.owner)).toEqual([
        { owner: lease.owner, outcome: 'error' },
        { owner: lease.owner, outcome: 'not-owner' },
      ]);
      // Settled: a third release answers locally.
      expect(await lease.release()).toBe('not-held');
      expect(releases.filter((r) => r.owner === lease.owner)).toHaveLength(2);
      expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([next.fencingToken]);
      expect(await next.release()).toBe('released');
    } finally {
      unsubscribe('fencelock:release', onRelease);
    }
  }, 30_000);
});
