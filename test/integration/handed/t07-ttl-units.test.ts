/**
 * Scenario T07 step 1 (Redis): `ttlMs` is milliseconds on the engine (PTTL) and in the lease,
 * and an unrenewed key is gone after its TTL. The etcd, ZooKeeper and sidecar steps do not
 * apply yet (no such backends).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LockLostError } from '../../../packages/fencelock/src/index.js';
import { redisHarness, sleep, uniqueKey } from './stores.js';

describe('T07 TTL units (redis)', () => {
  let store: ReturnType<typeof redisHarness>;

  beforeEach(() => {
    store = redisHarness();
  });

  afterEach(async () => {
    await store.close();
  });

  it('acquire with ttlMs 1500: PTTL in (1000, 1500], lease consistent, key gone at 2500 ms', async () => {
    const k = uniqueKey('t07');
    const { lock } = store.keysOf(k);
    const locker = store.locker();

    const startedAt = performance.now();
    const lease = await locker.acquire(k, { ttlMs: 1500, autoRenew: false });
    const grantedAt = performance.now();
    const pttl = await store.raw.pttl(lock);
    expect(pttl).toBeGreaterThan(1000);
    expect(pttl).toBeLessThanOrEqual(1500);
    expect(await store.raw.get(lock)).toBe(`${lease.owner}:${lease.fencingToken}`);

    expect(lease.ttlMs).toBe(1500);
    const remaining = lease.expiresAt - performance.now();
    expect(remaining).toBeGreaterThan(0);
    expect(remaining).toBeLessThanOrEqual(1500);
    // Measured from the start of the winning attempt, minus drift: within 1500 of the call.
    expect(lease.expiresAt).toBeLessThanOrEqual(startedAt + 1500);
    expect(lease.expiresAt).toBeGreaterThan(grantedAt);

    // Not renewed: at ~2500 ms the engine has dropped the key, and A knows it lost the lease.
    await sleep(2500 - (performance.now() - startedAt));
    expect(await store.raw.exists(lock)).toBe(0);
    expect(lease.isHeld).toBe(false);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    await expect(lease.release()).resolves.toBe('not-held');
  });
});
