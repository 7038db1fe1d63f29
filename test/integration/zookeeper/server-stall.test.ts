/**
 * A server that sits on a request until its next request arrives: ZooKeeper 3.6.0–3.8.0 can
 * (ZOOKEEPER-4537; Debian 12's 3.8.0 did so in the contract test's 1,000-grant loop, about once
 * in 5,000 grants, failing it with "no answer within 5000 ms"). A TCP proxy in front of one
 * server plays that server here (`holdNextRequest()`): it holds the client's next request until
 * the client sends another. The session then sends one cheap read after NUDGE_AFTER_MS without an
 * answer, which frees the held request; before, nothing did until the session's heartbeat (a
 * third of the 30 s timeout), so the request failed at its 5 s bound.
 */
import { describe, expect, it } from 'vitest';
import { NUDGE_AFTER_MS } from '../../../packages/fencelock/src/backends/zookeeper/nudge.js';
import { BackendError } from '../../../packages/fencelock/src/index.js';
import { sleep, useZookeeper, waitUntil } from './fault-support.js';

const zk = useZookeeper('server-stall');

/** Far below the 5 s request bound and the 10 s heartbeat of a 30 s session. */
const WELL_BEFORE_ANY_TIMER_MS = 2_000;

async function timed<T>(run: () => Promise<T>): Promise<{ value: T; tookMs: number }> {
  const startedAt = performance.now();
  const value = await run();
  return { value, tookMs: performance.now() - startedAt };
}

describe('zookeeper: a server that sits on a request until the next one (ZOOKEEPER-4537)', () => {
  it('acquire and release each finish after one nudge, not at the request bound', async () => {
    const proxy = await zk.proxy(1);
    const locker = zk.locker(zk.url(`127.0.0.1:${proxy.port}`), { ttlMs: 30_000 });
    // The session is open and has answered once: what follows is a request on a live connection.
    const warmup = await locker.acquire('stall:warmup');
    expect(await warmup.release()).toBe('released');

    proxy.holdNextRequest();
    const acquired = await timed(() => locker.tryAcquire('stall:key'));
    const lease = acquired.value;
    expect(lease).not.toBeNull();
    // Held (so at least one nudge interval), then freed by the nudge.
    expect(acquired.tookMs).toBeGreaterThanOrEqual(NUDGE_AFTER_MS - 5);
    expect(acquired.tookMs).toBeLessThan(WELL_BEFORE_ANY_TIMER_MS);

    proxy.holdNextRequest();
    const released = await timed(() => lease!.release());
    expect(released.value).toBe('released');
    expect(released.tookMs).toBeGreaterThanOrEqual(NUDGE_AFTER_MS - 5);
    expect(released.tookMs).toBeLessThan(WELL_BEFORE_ANY_TIMER_MS);
  });

  it('a nudge that is the first send to meet a reset connection hands the session to a new client', async () => {
    // The nudge goes out when the server has gone quiet, so it can be the first send to find the
    // connection reset. The C client then closes its socket behind the binding's back, and the
    // session must move to a new client at once, as after any request's send (`socketDropped`,
    // native.ts). Before, the nudge did not check: the session went on nudging a dead client, the
    // held acquire failed only at its 5 s bound ("no answer"), and a later client given the
    // dropped socket's number crashed the process (seen 3 times of 3).
    const proxy = await zk.proxy(1);
    const locker = zk.locker(zk.url(`127.0.0.1:${proxy.port}`), { ttlMs: 30_000 });
    const warmup = await locker.acquire('stall:reset-warmup');
    expect(await warmup.release()).toBe('released');
    // The nudge timer that the warm-up armed runs out with nothing outstanding.
    await sleep(NUDGE_AFTER_MS * 2.5);

    proxy.holdNextRequest();
    const startedAt = performance.now();
    const attempt = locker.tryAcquire('stall:reset').then(
      (lease) => lease,
      (error: unknown) => error,
    );
    // Just before the nudge is due: reset the connection, then keep the event loop busy past the
    // nudge's time, so that the client polls the reset only after the nudge's send met it.
    await sleep(NUDGE_AFTER_MS - 15);
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        proxy.cut();
        while (performance.now() < startedAt + NUDGE_AFTER_MS + 8) {
          // busy: no poll phase until the nudge's timer has run
        }
        resolve();
      }),
    );
    const outcome = await attempt;
    const tookMs = performance.now() - startedAt;
    expect(outcome).toBeInstanceOf(BackendError);
    expect((outcome as BackendError).message).toMatch(/connection (refused|closed)/);
    expect(tookMs).toBeLessThan(WELL_BEFORE_ANY_TIMER_MS);

    // New clients of the process work: before, one given the dropped socket's number could
    // crash it. And once the proxy is back, the locker's session (in its new client) grants again.
    for (let i = 0; i < 3; i++) {
      const other = zk.locker(zk.url(), { ttlMs: 30_000 });
      const lease = await other.acquire(`stall:reset-other-${i}`);
      expect(await lease.release()).toBe('released');
    }
    await proxy.restore();
    await waitUntil('the locker grants again through its session', async () => {
      const lease = await locker.tryAcquire('stall:reset-after').catch(() => null);
      return lease !== null && (await lease.release()) === 'released';
    });
  });
});
