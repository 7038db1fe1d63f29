/**
 * The parts of the backend contract that queue- and session-based engines use: lock modes,
 * a grant's `lost` signal (session loss) and `recheckAfterMs` (a reliable watch).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  LockLostError,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

let backend: MemoryBackend;
let locker: Locker;

beforeEach(() => {
  vi.useFakeTimers();
  backend = new MemoryBackend();
  locker = createLocker(backend);
});

afterEach(async () => {
  await locker.close();
  vi.useRealTimers();
});

describe('modes', () => {
  it('rejects a read lock on a store without read-write locks, before any engine call', async () => {
    const error = await locker.acquire('k', { mode: 'read' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('mode');
    expect((error as InvalidArgumentError).message).toContain('memory store has no read locks');
    expect(backend.totalCalls).toBe(0);
  });

  it('rejects an unknown mode when the lock is made', () => {
    expect(() => locker.lock('k', { mode: 'exclusive' as never })).toThrow(InvalidArgumentError);
  });
});

describe('session loss', () => {
  it('loses every lease of the session at once, with the reason as cause', async () => {
    backend.session = new AbortController();
    const a = await locker.acquire('a');
    const b = await locker.acquire('b');
    const cause = new Error('lease revoked');
    backend.session.abort(cause);
    for (const lease of [a, b]) {
      expect(lease.signal.aborted).toBe(true);
      const reason = lease.signal.reason as LockLostError;
      expect(reason).toBeInstanceOf(LockLostError);
      expect(reason.reason).toBe('session-lost');
      expect(reason.cause).toBe(cause);
    }
    expect(locker.activeLeases).toBe(0);
  });

  it('stops listening to the session after release', async () => {
    backend.session = new AbortController();
    const lease = await locker.acquire('a');
    await lease.release();
    backend.session.abort(new Error('late'));
    expect(lease.signal.aborted).toBe(false);
  });
});

describe('recheckAfterMs', () => {
  it('keeps a waiter quiet for as long as the backend says its watch is reliable', async () => {
    await createLocker(backend).acquire('k');
    backend.recheckAfterMs = 60_000;
    const pending = locker.acquire('k', { waitMs: 30_000 }).catch(() => undefined);
    await vi.advanceTimersByTimeAsync(29_000);
    expect(backend.calls.attempt).toBe(2);
    await vi.advanceTimersByTimeAsync(2_000);
    await pending;
  });
});

describe('validUntil', () => {
  it('never lets a lease believe itself valid past the session bound the backend gives', async () => {
    const bounded = new MemoryBackend();
    const originalAttempt = bounded.attempt.bind(bounded);
    bounded.attempt = async (request) => {
      const result = await originalAttempt(request);
      return result.granted ? { ...result, validUntil: performance.now() + 1_000 } : result;
    };
    const l = createLocker(bounded, { ttlMs: 30_000, autoRenew: false });
    const lease = await l.acquire('k');
    expect(lease.remainingMs).toBeLessThanOrEqual(1_000);
    await vi.advanceTimersByTimeAsync(1_001);
    expect(lease.isHeld).toBe(false);
    expect(lease.signal.aborted).toBe(true);
    await l.close();
  });
});

describe('validUntil of a kept-alive session', () => {
  it('renews before a session bound that comes before ttl/3, so a session kept alive meanwhile carries the lease on', async () => {
    // A session whose keepalive ran late: 4 s of validity left when the lease is granted, then
    // kept alive again at 2 s (30 s more). etcd and ZooKeeper grants carry such a bound.
    let sessionBound = performance.now() + 4_000;
    const keptAlive = setTimeout(() => {
      sessionBound = performance.now() + 30_000;
    }, 2_000);
    const bounded = new MemoryBackend();
    const attempt = bounded.attempt.bind(bounded);
    const renew = bounded.renew.bind(bounded);
    bounded.attempt = async (request) => {
      const result = await attempt(request);
      return result.granted ? { ...result, validUntil: sessionBound } : result;
    };
    bounded.renew = async (lease, ttlMs) => {
      const result = await renew(lease, ttlMs);
      return result.ok ? { ...result, validUntil: sessionBound } : result;
    };
    const l = createLocker(bounded, { ttlMs: 30_000 });
    const lease = await l.acquire('k');
    expect(lease.remainingMs).toBeLessThanOrEqual(4_000);
    await vi.advanceTimersByTimeAsync(4_001);
    // Renewed once the session had moved on: valid to the session's new bound, not lost.
    expect(lease.signal.aborted).toBe(false);
    expect(lease.isHeld).toBe(true);
    expect(lease.remainingMs).toBeGreaterThan(20_000);
    await vi.advanceTimersByTimeAsync(30_000);
    // The session no longer kept alive: the lease ends at its bound.
    expect(lease.signal.aborted).toBe(true);
    expect((lease.signal.reason as LockLostError).reason).toBe('expired');
    clearTimeout(keptAlive);
    await l.close();
  });
});
