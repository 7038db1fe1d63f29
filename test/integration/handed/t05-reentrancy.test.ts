/**
 * Scenario T05: reentrancy hold counts, over-release, and no accidental sharing between
 * independent handles of one locker. Runs on every store of `stores.ts`: Redis, SQLite and
 * PostgreSQL (lease mode, whose locks are rows, not session state), directly and through
 * PgBouncer in transaction mode. Step 5 on a shared PG
 * session — two handles on the one connection of advisory mode, and `pg_locks` empty at the end
 * — is in `test/integration/postgres/advisory.test.ts`.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Lease, Locker } from '../../../packages/fencelock/src/index.js';
import { ALL_STORES, type StoreHarness, uniqueKey } from './stores.js';

describe.each(ALL_STORES)('T05 reentrancy ($name)', ({ make }) => {
  let store: StoreHarness;
  let o: Locker;
  let b: Locker;

  beforeEach(() => {
    store = make();
    o = store.locker({ ttlMs: 5000 });
    b = store.locker({ ttlMs: 5000 });
  });

  afterEach(async () => {
    await store.close();
  });

  /** Steps 2–4 once O holds `k` twice through `outer` (and `inner`, the same lease). */
  async function releaseStepByStep(k: string, outer: Lease, inner: Lease): Promise<Lease> {
    // Step 2: one release; B cannot get in, O still holds k with hold count 1.
    await expect(inner.release()).resolves.toBe('released');
    expect(outer.holdCount).toBe(1);
    expect(outer.isHeld).toBe(true);
    await expect(b.tryAcquire(k)).resolves.toBeNull();
    const held = await store.rawLease(k);
    expect(held?.owner).toBe(outer.owner);
    expect(held?.token).toBe(outer.fencingToken);

    // Step 3: the second release frees k; B gets it.
    await expect(outer.release()).resolves.toBe('released');
    expect(outer.holdCount).toBe(0);
    expect(outer.isHeld).toBe(false);
    const leaseB = await b.tryAcquire(k);
    expect(leaseB).not.toBeNull();
    expect(leaseB!.fencingToken).toBeGreaterThan(outer.fencingToken);
    return leaseB!;
  }

  /** Step 4: over-release answers not-held/not-owner, count stays 0, B's lease untouched. */
  async function overRelease(k: string, lease: Lease, leaseB: Lease): Promise<void> {
    const outcome = await lease.release();
    expect(['not-held', 'not-owner']).toContain(outcome);
    expect(lease.holdCount).toBe(0);
    const again = await lease.release();
    expect(['not-held', 'not-owner']).toContain(again);
    expect(lease.holdCount).toBe(0);

    expect(leaseB.isHeld).toBe(true);
    const raw = await store.rawLease(k);
    expect(raw?.owner).toBe(leaseB.owner);
    expect(raw?.token).toBe(leaseB.fencingToken);
    expect(raw!.ttlMs).toBeGreaterThan(0);
    const info = await b.inspect(k);
    expect(info.holder?.owner).toBe(leaseB.owner);
    await expect(leaseB.release()).resolves.toBe('released');
  }

  it('steps 1-4 with a reentrant Lock handle acquired twice', async () => {
    const k = uniqueKey('t05-handle');
    const handle = o.lock(k, { reentrant: true });

    // Step 1: two acquires, one lease, hold count 2, same token.
    const first = await handle.acquire();
    const second = await handle.acquire();
    expect(second).toBe(first);
    expect(second.fencingToken).toBe(first.fencingToken);
    expect(first.holdCount).toBe(2);
    expect(o.activeLeases).toBe(1);
    const info = await o.inspect(k);
    expect(info.holder?.owner).toBe(first.owner);
    expect(info.lastFencingToken).toBe(first.fencingToken);

    const leaseB = await releaseStepByStep(k, first, second);
    await overRelease(k, first, leaseB);
  });

  it('steps 1-4 with withLock and a nested reentrant acquire in the same async context', async () => {
    const k = uniqueKey('t05-withlock');
    let outer: Lease | undefined;
    let inner: Lease | undefined;
    const result = await o.withLock(
      k,
      async (lease) => {
        outer = lease;
        // Step 1: nested acquire in the same async context reuses the lease.
        inner = await o.acquire(k, { reentrant: true });
        expect(inner).toBe(lease);
        expect(inner.fencingToken).toBe(lease.fencingToken);
        expect(lease.holdCount).toBe(2);
        // Step 2: one release; B cannot get in; O still holds k.
        await expect(inner.release()).resolves.toBe('released');
        expect(lease.holdCount).toBe(1);
        await expect(b.tryAcquire(k)).resolves.toBeNull();
        const held = await store.rawLease(k);
        expect(held?.owner).toBe(lease.owner);
        expect(held?.token).toBe(lease.fencingToken);
        return 'done';
      },
      { reentrant: true },
    );
    expect(result).toBe('done');

    // Step 3: withLock released the last hold; B gets k.
    expect(outer!.holdCount).toBe(0);
    const leaseB = await b.tryAcquire(k);
    expect(leaseB).not.toBeNull();
    expect(leaseB!.fencingToken).toBeGreaterThan(outer!.fencingToken);

    // Step 4: over-release through either reference.
    await overRelease(k, inner!, leaseB!);
  });

  it('a reentrant acquire outside the holding context or handle does not share the lease', async () => {
    const k = uniqueKey('t05-scope');
    const h1 = o.lock(k, { reentrant: true });
    const h2 = o.lock(k, { reentrant: true });
    const lease = await h1.acquire();
    expect((await store.rawLease(k))?.owner).toBe(lease.owner);
    await expect(h2.tryAcquire()).resolves.toBeNull();
    await expect(o.tryAcquire(k, { reentrant: true })).resolves.toBeNull();
    expect(lease.holdCount).toBe(1);
    await expect(lease.release()).resolves.toBe('released');
  });

  it('step 5: two default (non-reentrant) handles of one locker exclude each other', async () => {
    const k = uniqueKey('t05-handles');
    const h1 = o.lock(k);
    const h2 = o.lock(k);
    expect(h1.options.reentrant).toBe(false);

    const lease1 = await h1.acquire();
    await expect(h2.tryAcquire()).resolves.toBeNull();
    expect(h2.isHeld).toBe(false);
    // The same handle again, non-reentrant: not granted either.
    await expect(h1.tryAcquire()).resolves.toBeNull();
    expect(lease1.holdCount).toBe(1);

    await expect(lease1.release()).resolves.toBe('released');
    const lease2 = await h2.tryAcquire();
    expect(lease2).not.toBeNull();
    expect(lease2!.fencingToken).toBeGreaterThan(lease1.fencingToken);
    const raw = await store.rawLease(k);
    expect(raw?.owner).toBe(lease2!.owner);
    await expect(lease2!.release()).resolves.toBe('released');
    expect(await store.rawLease(k)).toBeNull();
  });
});
