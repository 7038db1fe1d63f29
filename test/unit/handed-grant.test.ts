/**
 * Grants handed over with a wait's notification (`Granted.handedAt`, Redis's one-hop handoff):
 * the acquire answers with them without another attempt, a lease counts its validity from the
 * receipt with the short first TTL and confirms to the requested TTL at once (with or without the
 * watchdog), a failed confirmation loses the lease, and an owner-addressed grant is confirmed
 * before it is answered. Fake timers, the in-memory backend.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLocker, type Locker, LockLostError } from '../../packages/fencelock/src/index.js';
import { HANDOFF_FIRST_TTL_MS, MemoryBackend } from './memory-backend.js';

let backend: MemoryBackend;
let locker: Locker;

beforeEach(() => {
  vi.useFakeTimers();
  backend = new MemoryBackend();
  backend.handOffAfterMs = 100;
  locker = createLocker(backend, { ttlMs: 9_000 });
});

afterEach(async () => {
  await locker.close();
  vi.useRealTimers();
});

/** Hold `key` as another owner for `ms`, straight in the backend. */
function heldByOther(key: string, ms = 60_000): void {
  backend.entries.set(key, { owner: 'f'.repeat(32), token: 1n, expiresAt: performance.now() + ms });
  backend.fences.set(key, 1n);
}

describe('a handed grant', () => {
  it('is the acquire answer, with no second attempt, then confirmed to ttlMs at once', async () => {
    heldByOther('k');
    const acquiring = locker.acquire('k', { waitMs: 5_000 });
    await vi.advanceTimersByTimeAsync(100);
    const lease = await acquiring;
    await vi.advanceTimersByTimeAsync(0);
    expect(backend.calls.attempt).toBe(1);
    expect(lease.fencingToken).toBe(2n);
    // The confirmation went out with the grant (an engine that answers at once).
    expect(backend.calls.renew).toBe(1);
    expect(lease.ttlMs).toBe(9_000);
    expect(backend.entries.get('k')?.expiresAt).toBe(performance.now() + 9_000);
    // Then the watchdog as usual: the next renewal at ttl/3.
    await vi.advanceTimersByTimeAsync(2_990);
    expect(backend.calls.renew).toBe(1);
    await vi.advanceTimersByTimeAsync(20);
    expect(backend.calls.renew).toBe(2);
    expect(await lease.release()).toBe('released');
  });

  it('counts from the receipt with the short first TTL until the confirmation answers', async () => {
    heldByOther('k');
    backend.renewMode = 'hang';
    const acquiring = locker.acquire('k', { waitMs: 5_000 });
    await vi.advanceTimersByTimeAsync(100);
    const receivedAt = performance.now();
    const lease = await acquiring;
    expect(lease.ttlMs).toBe(HANDOFF_FIRST_TTL_MS);
    // drift: 2000 × 0.01 + 2 ms.
    expect(lease.expiresAt).toBeCloseTo(receivedAt + HANDOFF_FIRST_TTL_MS - 22, 5);
    await vi.advanceTimersByTimeAsync(HANDOFF_FIRST_TTL_MS);
    expect(lease.isHeld).toBe(false);
    expect((lease.signal.reason as LockLostError).reason).toBe('expired');
  });

  it('is confirmed once to ttlMs with autoRenew: false, and not renewed after that', async () => {
    heldByOther('k');
    const acquiring = locker.acquire('k', { waitMs: 5_000, autoRenew: false, ttlMs: 6_000 });
    await vi.advanceTimersByTimeAsync(100);
    const lease = await acquiring;
    await vi.advanceTimersByTimeAsync(0);
    expect(backend.calls.renew).toBe(1);
    expect(lease.ttlMs).toBe(6_000);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(backend.calls.renew).toBe(1);
    expect(lease.isHeld).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(lease.isHeld).toBe(false);
  });

  it('is lost (its signal aborts) when the confirmation finds the key gone', async () => {
    heldByOther('k');
    const acquiring = locker.acquire('k', { waitMs: 5_000 });
    await vi.advanceTimersByTimeAsync(99);
    // The handed key vanishes before the confirmation reaches the engine.
    const renew = backend.renew.bind(backend);
    backend.renew = async (lease, ttlMs) => {
      backend.entries.delete(lease.key);
      return renew(lease, ttlMs);
    };
    await vi.advanceTimersByTimeAsync(1);
    const lease = await acquiring;
    await vi.advanceTimersByTimeAsync(0);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect((lease.signal.reason as LockLostError).reason).toBe('not-held');
    expect(lease.isHeld).toBe(false);
  });

  it('of an owner-addressed acquire is confirmed to its ttlMs before it is answered', async () => {
    heldByOther('k');
    const owner = 'a'.repeat(32);
    const acquiring = locker.acquireForOwner('k', owner, { ttlMs: 7_000, waitMs: 5_000 });
    await vi.advanceTimersByTimeAsync(100);
    const grant = await acquiring;
    expect(backend.calls.attempt).toBe(1);
    expect(backend.calls.renew).toBe(1);
    expect(grant).toMatchObject({ owner, fencingToken: 2n, ttlMs: 7_000 });
    expect(backend.entries.get('k')?.expiresAt).toBe(performance.now() + 7_000);
  });

  it('of an owner-addressed acquire that the confirmation finds gone is attempted again', async () => {
    heldByOther('k');
    const owner = 'b'.repeat(32);
    const renew = backend.renew.bind(backend);
    let dropped = false;
    backend.renew = async (lease, ttlMs) => {
      if (!dropped) {
        dropped = true;
        backend.entries.delete(lease.key);
        backend.handOffAfterMs = undefined;
      }
      return renew(lease, ttlMs);
    };
    const acquiring = locker.acquireForOwner('k', owner, { ttlMs: 7_000, waitMs: 5_000 });
    await vi.advanceTimersByTimeAsync(200);
    const grant = await acquiring;
    // The second attempt found the key free: a grant of its own, with the next token.
    expect(backend.calls.attempt).toBe(2);
    expect(grant).toMatchObject({ owner, fencingToken: 3n, ttlMs: 7_000 });
  });
});
