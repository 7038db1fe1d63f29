/**
 * Read-write locks on ZooKeeper: readers share the key; a writer waits for every earlier
 * contender; a reader waits only for earlier writers, so a reader that queued behind a waiting
 * writer waits for that writer even while only readers hold the key (no writer starvation).
 * Fencing tokens (the nodes' czxids) of all grants strictly increase in grant order.
 *
 * Downgrade and upgrade: the rules of test/integration/rwlock-rules.ts.
 */
import { describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import {
  type Lease,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';
import { contenders, countChildren, settledWithin, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('rwlock');

/** A contender on its own locker; records the grant order. */
function contender(
  key: string,
  mode: LockMode,
  name: string,
  grants: { name: string; token: bigint }[],
): Promise<Lease> {
  const locker = fixture.locker({ ttlMs: 10_000 });
  return locker.acquire(key, { mode, waitMs: 30_000 }).then((lease) => {
    grants.push({ name, token: lease.fencingToken });
    return lease;
  });
}

async function dirOf(locker: Locker, key: string): Promise<string> {
  return ((await locker.backend()) as ZookeeperBackend).dirOf(key);
}

describe('ZooKeeper read-write lock', () => {
  it('shares among readers; queues writers and later readers in order; tokens increase', async () => {
    const key = 'rw:resource';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = await dirOf(probe, key);

    // Three readers hold at once.
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'R3']);
    expect([r1, r2, r3].every((r) => r.isHeld)).toBe(true);
    // A writer cannot get in, by tryAcquire (its node is withdrawn).
    expect(await probe.tryAcquire(key, { mode: 'write' })).toBeNull();
    await waitForCount(fixture.admin, dir, 3);
    const readers = await contenders(fixture.admin, dir);
    expect(readers.map((n) => [n.owner, n.mode, n.czxid])).toEqual(
      [r1, r2, r3].map((r) => [r.owner, 'read', r.fencingToken]),
    );

    // W queues behind the readers; R4 and R5 queue behind W.
    const w = contender(key, 'write', 'W', grants);
    await waitForCount(fixture.admin, dir, 4);
    const r4 = contender(key, 'read', 'R4', grants);
    await waitForCount(fixture.admin, dir, 5);
    const r5 = contender(key, 'read', 'R5', grants);
    await waitForCount(fixture.admin, dir, 6);
    expect((await contenders(fixture.admin, dir)).map((n) => n.mode)).toEqual([
      'read',
      'read',
      'read',
      'write',
      'read',
      'read',
    ]);
    // Only readers hold, yet R4 and R5 wait: an earlier writer is queued.
    expect(await settledWithin(Promise.race([w, r4, r5]), 300)).toBe(false);
    // A reader's tryAcquire also yields to the queued writer.
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    await waitForCount(fixture.admin, dir, 6);

    // W waits until every earlier reader has released, whatever the order.
    expect(await r2.release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await r3.release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await r1.release()).toBe('released');
    const writer = await w;
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'R3', 'W']);
    // The readers behind W still wait while it holds.
    expect(await settledWithin(Promise.race([r4, r5]), 300)).toBe(false);

    // W releases: both readers behind it go together.
    expect(await writer.release()).toBe('released');
    const [reader4, reader5] = await Promise.all([r4, r5]);
    expect(grants.map((g) => g.name).slice(0, 4)).toEqual(['R1', 'R2', 'R3', 'W']);
    expect(new Set(grants.slice(4).map((g) => g.name))).toEqual(new Set(['R4', 'R5']));
    expect(reader4.isHeld && reader5.isHeld).toBe(true);

    // A writer queued behind R4 and R5 waits for both.
    const w2 = contender(key, 'write', 'W2', grants);
    await waitForCount(fixture.admin, dir, 3);
    expect(await reader5.release()).toBe('released');
    expect(await settledWithin(w2, 300)).toBe(false);
    expect(await reader4.release()).toBe('released');
    expect(await (await w2).release()).toBe('released');

    // Tokens strictly increase in grant order (R4 and R5, granted together, in queue order).
    const sorted = [...grants.slice(0, 4), ...grants.slice(4, 6).sort(byToken), grants[6]!];
    expect(sorted.map((g) => g.name)).toEqual(['R1', 'R2', 'R3', 'W', 'R4', 'R5', 'W2']);
    for (let i = 1; i < sorted.length; i++) {
      expect(sorted[i]!.token).toBeGreaterThan(sorted[i - 1]!.token);
    }
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('a reader queued behind a writer goes in, beside the earlier reader, once the writer gives up', async () => {
    // The writer times out: its node is deleted and the reader behind it goes in while the
    // earlier reader still holds (it no longer waits for a writer that left).
    const key = 'rw:withdrawn-writer';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = await dirOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    // R2's locker has its session open before the writer's clock starts: opening one on a loaded
    // machine can take longer than the writer waits, and R2 must queue behind the writer.
    const r2Locker = fixture.locker({ ttlMs: 10_000 });
    await (await r2Locker.acquire('rw:warm-up', { mode: 'read' })).release();
    const wLocker = fixture.locker({ ttlMs: 10_000 });
    const w = wLocker.acquire(key, { mode: 'write', waitMs: 3000 });
    w.catch(() => undefined);
    await waitForCount(fixture.admin, dir, 2);
    const r2 = r2Locker.acquire(key, { mode: 'read', waitMs: 30_000 }).then((lease) => {
      grants.push({ name: 'R2', token: lease.fencingToken });
      return lease;
    });
    await waitForCount(fixture.admin, dir, 3);
    expect(await settledWithin(r2, 300)).toBe(false);
    await expect(w).rejects.toBeInstanceOf(LockTimeoutError);
    const reader2 = await r2;
    expect(r1.isHeld).toBe(true);
    expect(reader2.fencingToken).toBeGreaterThan(r1.fencingToken);
    // The writer's node is gone; both readers' nodes remain.
    expect((await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode])).toEqual([
      [r1.owner, 'read'],
      [reader2.owner, 'read'],
    ]);
    expect(await reader2.release()).toBe('released');
    expect(await r1.release()).toBe('released');
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  downgradeAndUpgradeTests({
    engine: 'zookeeper',
    locker: (options) => fixture.locker(options),
    dirOf: (backend, key) => (backend as ZookeeperBackend).dirOf(key),
    line: async (dir) =>
      (await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode, n.czxid]),
    count: (dir) => countChildren(fixture.admin, dir),
    waitForCount: (dir, n) => waitForCount(fixture.admin, dir, n),
  });
});

function byToken(a: { token: bigint }, b: { token: bigint }): number {
  return a.token < b.token ? -1 : a.token > b.token ? 1 : 0;
}
