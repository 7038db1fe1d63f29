/**
 * The multi-key part of the backend contract (`locker.acquireAll`, `tryAcquireAll`,
 * `withLocks`), registered by `describeBackend` for every backend: all or nothing, a token per
 * key, nothing held while waiting, no deadlock for overlapping key sets taken in opposite
 * orders, one signal for the loss of any key.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import {
  InvalidArgumentError,
  type Locker,
  type LockerOptions,
  LockLostError,
  LockTimeoutError,
  MAX_MULTI_KEYS,
} from '../../packages/fencelock/src/index.js';

/** What the multi-key cases need from the suite. */
export interface MultiLockSuite {
  newClient(options?: LockerOptions): Promise<{
    locker: Locker;
    deleteKey(key: string): Promise<void>;
    traits: { readonly lossReason?: 'not-held' | 'session-lost' };
  }>;
  uniqueKey(label: string): string;
}

/** Register the multi-key cases (inside `describeBackend`'s describe). */
export function describeMultiLockContract(suite: MultiLockSuite): void {
  const { newClient, uniqueKey } = suite;

  it('acquireAll: every key or none, deduplicated and sorted, a token per key', async () => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    const [x, y, z] = ['c', 'a', 'b'].map((s) => uniqueKey(`all-${s}`)) as [string, string, string];
    const all = await a.locker.acquireAll([x, y, z, y], { ttlMs: 10_000 });
    expect(all.keys).toEqual([x, y, z].sort());
    expect(all.leases.map((l) => l.key)).toEqual([x, y, z].sort());
    expect(new Set(all.leases.map((l) => l.owner)).size).toBe(3);
    for (const lease of all.leases) expect(lease.fencingToken).toBeTypeOf('bigint');
    expect(all.lease(y)?.key).toBe(y);
    expect(all.isHeld).toBe(true);
    // Another client finds the set busy and keeps none of it.
    expect(await b.locker.tryAcquireAll([z, uniqueKey('free')], { ttlMs: 10_000 })).toBeNull();
    expect(await all.release()).toEqual(['released', 'released', 'released']);
    expect(all.isHeld).toBe(false);
    const again = await b.locker.tryAcquireAll([x, y, z], { ttlMs: 10_000 });
    expect(again).not.toBeNull();
    for (const [i, lease] of again!.leases.entries()) {
      expect(lease.fencingToken).toBeGreaterThan(all.leases[i]!.fencingToken);
    }
    expect(await again!.release()).toEqual(['released', 'released', 'released']);
  });

  it('tryAcquireAll: one busy key leaves every other key free', async () => {
    const [a, b, c] = await Promise.all([newClient(), newClient(), newClient()]);
    const busy = uniqueKey('busy');
    const free = [uniqueKey('free-1'), uniqueKey('free-2')];
    const holder = await a.locker.acquire(busy, { ttlMs: 10_000 });
    expect(await b.locker.tryAcquireAll([...free, busy], { ttlMs: 10_000 })).toBeNull();
    const others = await c.locker.tryAcquireAll(free, { ttlMs: 10_000 });
    expect(others).not.toBeNull();
    expect(await others!.release()).toEqual(['released', 'released']);
    expect(await holder.release()).toBe('released');
  });

  it('acquireAll waits in key order: holding only the keys below the busy one', async () => {
    const [a, b, c] = await Promise.all([newClient(), newClient(), newClient()]);
    const base = uniqueKey('order');
    const [below, busy, above] = [`${base}:a`, `${base}:b`, `${base}:c`];
    const holder = await a.locker.acquire(busy, { ttlMs: 10_000 });
    const waiting = b.locker.acquireAll([above, busy, below], { ttlMs: 10_000, waitMs: 20_000 });
    await delay(500);
    // While it waits for `busy`, the waiter holds the key below it, and nothing above it.
    expect(await c.locker.tryAcquire(below, { ttlMs: 10_000 })).toBeNull();
    const meanwhile = await c.locker.tryAcquire(above, { ttlMs: 10_000 });
    expect(meanwhile).not.toBeNull();
    expect(await meanwhile!.release()).toBe('released');
    expect(await holder.release()).toBe('released');
    const all = await waiting;
    expect(all.keys).toEqual([below, busy, above]);
    expect(all.lease(busy)!.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await all.release()).toEqual(['released', 'released', 'released']);
  });

  it('acquireAll times out holding nothing', async () => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    const busy = uniqueKey('timeout-busy');
    const other = uniqueKey('timeout-other');
    const holder = await a.locker.acquire(busy, { ttlMs: 10_000 });
    const refused = await b.locker
      .acquireAll([other, busy], { ttlMs: 10_000, waitMs: 400 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(LockTimeoutError);
    expect((refused as LockTimeoutError).key).toBe(busy);
    const free = await a.locker.tryAcquire(other, { ttlMs: 10_000 });
    expect(free).not.toBeNull();
    expect(await free!.release()).toBe('released');
    expect(await holder.release()).toBe('released');
  });

  it('two clients locking overlapping sets in opposite orders never deadlock', async () => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    const [x, y, z] = ['x', 'y', 'z'].map((s) => uniqueKey(`order-${s}`)) as [
      string,
      string,
      string,
    ];
    const inside = new Set<string>();
    let overlaps = 0;
    const run = async (locker: Locker, keys: string[], rounds: number) => {
      for (let i = 0; i < rounds; i++) {
        const all = await locker.acquireAll(keys, { ttlMs: 10_000, waitMs: 30_000 });
        for (const key of all.keys) {
          if (inside.has(key)) overlaps += 1;
          inside.add(key);
        }
        await Promise.resolve();
        for (const key of all.keys) inside.delete(key);
        await all.release();
      }
    };
    // 1,000 multi-key acquires in all.
    await Promise.all([run(a.locker, [x, y, z], 500), run(b.locker, [z, y, x], 500)]);
    expect(overlaps).toBe(0);
    // Contended multi-key acquires take up to 40 ms each on the consensus engines and Redlock
    // here: the bound is for a loaded CI machine, not a figure (the bench measures speed).
  }, 180_000);

  it('withLocks: one signal aborts when any key is lost; it rejects with LockLostError', async () => {
    const client = await newClient();
    const keys = [uniqueKey('lost-1'), uniqueKey('lost-2')];
    let seen: AbortSignal | undefined;
    const outcome = await client.locker
      .withLocks(
        keys,
        async (all) => {
          seen = all.signal;
          await client.deleteKey(keys[1]!);
          // A renewal finds the key gone: ask for one now instead of waiting for the watchdog.
          await all
            .lease(keys[1]!)!
            .extend(10_000)
            .catch(() => undefined);
          await delay(10_000, undefined, { signal: all.signal }).catch(() => undefined);
          return 'finished';
        },
        { ttlMs: 10_000 },
      )
      .catch((e: unknown) => e);
    expect(outcome).toBeInstanceOf(LockLostError);
    // Where the engine can only drop the connection both keys live in (PostgreSQL advisory
    // locks), either loss may be seen first.
    const lostKeys = client.traits.lossReason === 'session-lost' ? keys : [keys[1]];
    expect(lostKeys).toContain((outcome as LockLostError).key);
    expect(seen?.aborted).toBe(true);
    // The other key is released (in the background, once the loss was reported): it comes free.
    const free = await client.locker.acquire(keys[0]!, { ttlMs: 10_000, waitMs: 5_000 });
    expect(await free.release()).toBe('released');
  });

  it('withLocks returns what fn returns and releases every key', async () => {
    const { locker } = await newClient();
    const keys = [uniqueKey('with-1'), uniqueKey('with-2')];
    expect(await locker.withLocks(keys, (all) => all.leases.length, { ttlMs: 10_000 })).toBe(2);
    const again = await locker.tryAcquireAll(keys, { ttlMs: 10_000 });
    expect(again).not.toBeNull();
    expect(await again!.release()).toEqual(['released', 'released']);
  });

  it('bad keys and options are InvalidArgumentError before any engine call', async () => {
    const { locker } = await newClient();
    const cases: [unknown, string][] = [
      ['abc', 'keys'],
      [[], 'keys'],
      [Array.from({ length: MAX_MULTI_KEYS + 1 }, (_, i) => `k${i}`), 'keys'],
      [['ok', ''], 'keys[1]'],
      [['ok', 7], 'keys[1]'],
      [null, 'keys'],
    ];
    for (const [keys, argument] of cases) {
      const refused = await locker.acquireAll(keys as never).catch((e: unknown) => e);
      expect(refused, String(keys)).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe(argument);
    }
    for (const options of [{ reentrant: true }, { session: {} }, { ttlMs: -1 }]) {
      await expect(locker.tryAcquireAll(['a'], options as never)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    await expect(locker.withLocks(['a'], 'fn' as never)).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
  });
}
