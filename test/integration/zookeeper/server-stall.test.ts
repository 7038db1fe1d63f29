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
import { useZookeeper } from './fault-support.js';

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
});
