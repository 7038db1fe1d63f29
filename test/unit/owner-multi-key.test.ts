/**
 * Owner-addressed all-or-nothing acquires (`acquireAllForOwner`, `tryAcquireAllForOwner`) and
 * the owner-addressed read mode's checks: one grant per key (sorted, deduplicated, each with its
 * token), nothing held when a key is busy, the sorted wait once it is released, and input refused
 * before the backend is asked anything. Real timers, the in-memory backend built from the
 * contract (write locks only, as PostgreSQL's advisory mode).
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  LockTimeoutError,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const lockers: Locker[] = [];
function lockerOn(backend: MemoryBackend): Locker {
  const locker = createLocker(backend);
  lockers.push(locker);
  return locker;
}
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

/** A distinct 32-hex-digit owner id per (name, key), as the sidecar derives them. */
function ownerOf(name: string): (key: string) => string {
  return (key) =>
    Buffer.from(`${name}:${key}`).toString('hex').padEnd(32, '0').slice(0, 32).toLowerCase();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('acquireAllForOwner / tryAcquireAllForOwner', () => {
  it('grants every key, deduplicated and sorted, each to its own owner id and token', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const grants = await locker.acquireAllForOwner(['c', 'a', 'b', 'a'], ownerOf('A'), {
      ttlMs: 5000,
    });
    expect(grants.map((g) => g.key)).toEqual(['a', 'b', 'c']);
    for (const grant of grants) {
      expect(grant.owner).toBe(ownerOf('A')(grant.key));
      expect(backend.entries.get(grant.key)?.owner).toBe(grant.owner);
      expect(backend.entries.get(grant.key)?.token).toBe(grant.fencingToken);
      expect(grant.ttlMs).toBe(5000);
      expect(grant.mode).toBeUndefined();
    }
    // Nothing is tracked in the process.
    expect(locker.activeLeases).toBe(0);
  });

  it('holds nothing when one key is busy, and gets all of them once it is released', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const b = await locker.acquireForOwner('b', ownerOf('B')('b'), { ttlMs: 5000 });
    expect(await locker.tryAcquireAllForOwner(['a', 'b'], ownerOf('A'), { ttlMs: 5000 })).toBe(
      null,
    );
    expect(backend.entries.has('a')).toBe(false);
    const waiting = locker.acquireAllForOwner(['b', 'a'], ownerOf('A'), {
      ttlMs: 5000,
      waitMs: 5000,
    });
    await sleep(150);
    // While it waits for b it holds only a, the smaller key.
    expect(backend.entries.get('a')?.owner).toBe(ownerOf('A')('a'));
    expect(await locker.releaseForOwner(b)).toBe('released');
    const grants = await waiting;
    expect(grants.map((g) => [g.key, g.owner])).toEqual([
      ['a', ownerOf('A')('a')],
      ['b', ownerOf('A')('b')],
    ]);
    expect(grants[1]!.fencingToken).toBeGreaterThan(b.fencingToken);
  });

  it('times out naming the key it waited for, releasing what it took', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await locker.acquireForOwner('b', ownerOf('B')('b'), { ttlMs: 5000 });
    const error = await locker
      .acquireAllForOwner(['a', 'b'], ownerOf('A'), { ttlMs: 5000, waitMs: 200 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).key).toBe('b');
    expect(backend.entries.has('a')).toBe(false);
  });

  it('refuses bad input before the backend is asked anything', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const cases: [() => Promise<unknown>, string][] = [
      [() => locker.acquireAllForOwner('ab' as never, ownerOf('A'), { ttlMs: 5000 }), 'keys'],
      [() => locker.acquireAllForOwner([], ownerOf('A'), { ttlMs: 5000 }), 'keys'],
      [() => locker.acquireAllForOwner(['a', ''], ownerOf('A'), { ttlMs: 5000 }), 'keys[1]'],
      // A hole of a sparse array is a key too (undefined), not skipped.
      // biome-ignore lint/suspicious/noSparseArray: the input under test.
      [() => locker.acquireAllForOwner([, 'a'] as never, ownerOf('A'), { ttlMs: 5000 }), 'keys[0]'],
      // biome-ignore lint/suspicious/noSparseArray: the input under test.
      [() => locker.acquireAll(['b', , 'a'] as never), 'keys[1]'],
      // biome-ignore lint/suspicious/noSparseArray: the input under test.
      [() => locker.tryAcquireAll(['b', , 'a'] as never), 'keys[1]'],
      [() => locker.acquireAllForOwner(['a'], 'a'.repeat(32) as never, { ttlMs: 5000 }), 'owner'],
      [() => locker.acquireAllForOwner(['a', 'b'], () => 'a'.repeat(32), { ttlMs: 5000 }), 'owner'],
      [() => locker.acquireAllForOwner(['a'], () => 'nothex', { ttlMs: 5000 }), 'owner("a")'],
      [() => locker.acquireAllForOwner(['a'], ownerOf('A'), {} as never), 'ttlMs'],
      [
        () => locker.acquireAllForOwner(['a'], ownerOf('A'), { ttlMs: 5000, permits: 2 } as never),
        'options.permits',
      ],
      [
        () => locker.tryAcquireAllForOwner(['a'], ownerOf('A'), { ttlMs: 5000, mode: 'read' }),
        'mode',
      ],
    ];
    for (const [run, argument] of cases) {
      const error = await run().catch((e: unknown) => e);
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, argument).toBe(argument);
    }
    expect(backend.calls.attempt).toBeUndefined();
  });
});

describe('owner-addressed read mode: checks', () => {
  it('refuses read on a store without read locks, and read with permits, before any attempt', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    for (const run of [
      () => locker.tryAcquireForOwner('k', 'a'.repeat(32), { ttlMs: 5000, mode: 'read' }),
      () =>
        locker.tryAcquireForOwner('k', 'a'.repeat(32), { ttlMs: 5000, mode: 'read', permits: 2 }),
      () =>
        locker.tryAcquireForOwner('k', 'a'.repeat(32), { ttlMs: 5000, mode: 'shared' as never }),
    ]) {
      const error = await run().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('mode');
    }
    expect(backend.calls.attempt).toBeUndefined();
  });

  it('asks for the token to release a read grant', async () => {
    const locker = lockerOn(new MemoryBackend());
    const error = await locker
      .releaseForOwner({ key: 'k', owner: 'a'.repeat(32), mode: 'read' })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('fencingToken');
  });
});
