/**
 * Lock-delay in the core (options.ts, core/lock-delay.ts, the attempt request of core/lock.ts)
 * over the in-memory backend built from the contract: the option's checks before any engine
 * call, which grants carry it (exclusive ones, not read grants or permits), the refusal on a
 * store without it, and what the request tells the engine.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { AttemptRequest } from '../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  type LockerOptions,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const lockers: Locker[] = [];
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

/** A locker on a memory backend that honours lock-delays (and grants reads, permits, elections). */
function delayingLocker(options?: LockerOptions, lockDelay = true) {
  const backend = new MemoryBackend();
  backend.capabilities = Object.freeze({
    ...backend.capabilities,
    modes: Object.freeze(['write', 'read'] as const),
    permits: true,
    election: true,
    lockDelay,
  });
  const requests: AttemptRequest[] = [];
  const attempt = backend.attempt.bind(backend);
  backend.attempt = (request) => {
    requests.push(request);
    return attempt(request);
  };
  const locker = createLocker(backend, options);
  lockers.push(locker);
  return { locker, backend, requests };
}

describe('lockDelayMs', () => {
  it('is an integer number of ms from 0 to 60,000, checked before any engine call', async () => {
    const { locker, requests } = delayingLocker();
    for (const lockDelayMs of [-1, 1.5, 60_001, '1000', Number.NaN]) {
      const refused = await locker.acquire('k', { lockDelayMs } as never).catch((e: unknown) => e);
      expect((refused as InvalidArgumentError).argument).toBe('lockDelayMs');
    }
    expect(() => createLocker(new MemoryBackend(), { lockDelayMs: 60_001 })).toThrow(
      InvalidArgumentError,
    );
    // Only exclusive grants carry it: asked for with a read lock or a permit, it is refused.
    await expect(locker.acquire('k', { mode: 'read', lockDelayMs: 1_000 })).rejects.toMatchObject({
      argument: 'lockDelayMs',
    });
    await expect(
      locker.semaphore('s', { permits: 2 }).acquire({ lockDelayMs: 1_000 } as never),
    ).rejects.toMatchObject({ argument: 'options.lockDelayMs' });
    await expect(
      locker.acquireForOwner('k', 'a'.repeat(32), { ttlMs: 1_000, permits: 2, lockDelayMs: 1 }),
    ).rejects.toMatchObject({ argument: 'lockDelayMs' });
    expect(requests).toHaveLength(0);
  });

  it('is refused on a store without lock-delay, before any attempt; 0 is not refused', async () => {
    const { locker, requests } = delayingLocker(undefined, false);
    await expect(locker.acquire('k', { lockDelayMs: 500 })).rejects.toMatchObject({
      argument: 'lockDelayMs',
    });
    expect(requests).toHaveLength(0);
    const lease = await locker.acquire('k', { lockDelayMs: 0 });
    expect(requests[0]).not.toHaveProperty('lockDelayMs');
    await lease.release();
  });

  it('goes with exclusive grants only: a locker default skips read grants and permits', async () => {
    const { locker, requests } = delayingLocker({ lockDelayMs: 2_000 });
    const held = [
      await locker.acquire('w'),
      await locker.acquire('r', { mode: 'read' }),
      await locker.semaphore('s', { permits: 2 }).acquire(),
      await locker.election('e').campaign('v'),
      ...(await locker.acquireAll(['m1', 'm2'])).leases,
    ];
    expect(requests.map((r) => [r.key, r.lockDelayMs])).toEqual([
      ['w', 2_000],
      ['r', undefined],
      ['s', undefined],
      ['e', 2_000],
      ['m1', 2_000],
      ['m2', 2_000],
    ]);
    await Promise.all(held.map((lease) => lease.release()));
  });

  it('the memory engine keeps a lapsed grant’s key from everyone for the delay; a release clears it', async () => {
    const { locker, backend } = delayingLocker();
    const owner = 'b'.repeat(32);
    await backend.attempt({
      key: 'k',
      owner,
      ttlMs: 50,
      mode: 'write',
      autoRenew: false,
      lockDelayMs: 300,
    });
    await new Promise((r) => setTimeout(r, 80));
    expect(await locker.tryAcquire('k')).toBeNull();
    const startedAt = performance.now();
    const lease = await locker.acquire('k', { waitMs: 2_000 });
    expect(performance.now() - startedAt).toBeGreaterThan(200);
    expect(await lease.release()).toBe('released');
    const released = await locker.acquire('k', { lockDelayMs: 300 });
    await released.release();
    expect(await locker.tryAcquire('k')).not.toBeNull();
  });
});
