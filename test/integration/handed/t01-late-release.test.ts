/**
 * Scenario T01: a late release after expiry must not touch the new holder, and must say why.
 * Runs on every backend that exists (Redis, SQLite). Variant c (sidecar HTTP API) is not here:
 * the sidecar does not exist yet.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LockLostError } from '../../../packages/fencelock/src/index.js';
import { ALL_STORES, redisHarness, type StoreHarness, sleep, uniqueKey } from './stores.js';

describe.each(ALL_STORES)('T01 late release after expiry ($name)', ({ make }) => {
  let store: StoreHarness;

  beforeEach(() => {
    store = make();
  });

  afterEach(async () => {
    await store.close();
  });

  it('returns not-owner, leaves the new holder untouched, and B can still release', async () => {
    const k = uniqueKey('t01');
    const a = store.locker();
    const b = store.locker();
    const c = store.locker();

    // 1. A acquires k with ttlMs 200, no watchdog, and sleeps 600 ms.
    const leaseA = await a.acquire(k, { ttlMs: 200, autoRenew: false });
    await sleep(600);
    // A's own bookkeeping saw the expiry; the error names the key.
    expect(leaseA.isHeld).toBe(false);
    expect(leaseA.signal.aborted).toBe(true);
    const lost = leaseA.signal.reason as LockLostError;
    expect(lost).toBeInstanceOf(LockLostError);
    expect(lost.code).toBe('ERR_LOCK_LOST');
    expect(lost.reason).toBe('expired');
    expect(lost.message).toContain(`"${k}"`);

    // 2. B acquires k with ttlMs 10000.
    const leaseB = await b.acquire(k, { ttlMs: 10_000 });
    expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);

    // 3. A releases late: never `released`, nothing of B's deleted.
    await expect(leaseA.release()).resolves.toBe('not-owner');

    const raw = await store.rawLease(k);
    expect(raw).not.toBeNull();
    expect(raw!.owner).toBe(leaseB.owner);
    expect(raw!.token).toBe(leaseB.fencingToken);
    expect(raw!.ttlMs).toBeGreaterThan(8000);
    expect(raw!.ttlMs).toBeLessThanOrEqual(10_000);

    const info = await c.inspect(k);
    expect(info.holder?.owner).toBe(leaseB.owner);
    expect(info.holder?.fencingToken).toBe(leaseB.fencingToken);
    expect(info.holder!.ttlMs).toBeGreaterThan(8000);
    expect(info.lastFencingToken).toBe(leaseB.fencingToken);

    // A third client cannot get in.
    await expect(c.tryAcquire(k)).resolves.toBeNull();

    // B's own release still works.
    expect(leaseB.isHeld).toBe(true);
    await expect(leaseB.release()).resolves.toBe('released');
    expect(await store.rawLease(k)).toBeNull();
  });

  it('variant b: a late release with no new holder returns not-held and creates no key', async () => {
    const k = uniqueKey('t01b');
    const a = store.locker();

    const leaseA = await a.acquire(k, { ttlMs: 200, autoRenew: false });
    expect(await store.rawLease(k)).not.toBeNull();
    await sleep(600);

    const outcome = await leaseA.release();
    expect(outcome).toBe('not-held');
    expect(outcome).not.toBe('not-owner');

    // No lease record exists (none re-created by the release), and the engine reports no holder.
    expect(await store.rawLease(k)).toBeNull();
    const info = await a.inspect(k);
    expect(info.holder).toBeNull();
    expect(info.lastFencingToken).toBe(store.lastTokenOutlivesHolder ? leaseA.fencingToken : 0n);
  });
});

describe('T01 variant b on Redis: the release creates no key at all', () => {
  it('EXISTS is 0 for the lock key after a late release', async () => {
    const store = redisHarness();
    try {
      const k = uniqueKey('t01b-exists');
      const { lock } = store.keysOf(k);
      const leaseA = await store.locker().acquire(k, { ttlMs: 200, autoRenew: false });
      expect(await store.raw.exists(lock)).toBe(1);
      await sleep(600);
      expect(await store.raw.exists(lock)).toBe(0);
      await expect(leaseA.release()).resolves.toBe('not-held');
      expect(await store.raw.exists(lock)).toBe(0);
    } finally {
      await store.close();
    }
  });
});
