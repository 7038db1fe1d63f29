/**
 * Giving up and closing: a caller's deadline or abort is kept even when the engine does not
 * answer; close() cancels pending acquires and grants nothing afterwards; a lease that ran out
 * while its callback ran is reported lost. Real timers, an in-memory backend.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  LockLostError,
  LockTimeoutError,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const lockers: Locker[] = [];
function lockerOn(backend: MemoryBackend, options = {}): Locker {
  const locker = createLocker(backend, options);
  lockers.push(locker);
  return locker;
}
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

describe('a silent engine does not hold the caller past its deadline', () => {
  it('rejects at waitMs although neither the attempt nor the withdrawal answers', async () => {
    const backend = new MemoryBackend();
    backend.attemptMode = 'hang';
    backend.abandonMode = 'hang';
    const started = performance.now();
    const error = await lockerOn(backend)
      .acquire('k', { waitMs: 100 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(performance.now() - started).toBeLessThan(1000);
    // Never seen held: the timeout says the engine did not answer, not that the lock is busy.
    expect((error as LockTimeoutError).engineAnswered).toBe(false);
    expect((error as LockTimeoutError).sawHolder).toBe(false);
    expect((error as LockTimeoutError).message).toMatch(/got no answer from the engine after/);
  });

  it('starts no attempt past the deadline: a wait that slept up to it ends at waitMs, busy', async () => {
    // Found by trying to break it: an attempt started at the deadline had no timer, and waited
    // for the engine's command timeout. Fake timers put the wake-up exactly on the deadline.
    vi.useFakeTimers();
    try {
      const backend = new MemoryBackend();
      const locker = lockerOn(backend);
      await locker.acquire('k', { ttlMs: 60_000 });
      // The backoff (10 s) outlasts the wait: after its first answer the waiter sleeps to the
      // deadline. From then on the engine answers nothing.
      let outcome: unknown;
      void locker
        .acquire('k', { waitMs: 300, retry: { initialDelayMs: 10_000, maxDelayMs: 10_000 } })
        .then(
          (lease) => {
            outcome = lease;
          },
          (error: unknown) => {
            outcome = error;
          },
        );
      await vi.advanceTimersByTimeAsync(0);
      backend.attemptMode = 'hang';
      await vi.advanceTimersByTimeAsync(300);
      await vi.advanceTimersByTimeAsync(0);
      expect(outcome).toBeInstanceOf(LockTimeoutError);
      expect((outcome as LockTimeoutError).sawHolder).toBe(true);
      expect((outcome as LockTimeoutError).engineAnswered).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a grant that came too late to be of use is a timeout that never saw a holder', async () => {
    const backend = new MemoryBackend();
    backend.attemptDelayMs = 300; // longer than the lease itself
    const error = await lockerOn(backend)
      .acquire('k', { ttlMs: 200, waitMs: 0 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).message).toMatch(/granted with no validity left/);
    // Nobody held the key: the CLI and the sidecar must not say "held by another owner".
    expect((error as LockTimeoutError).sawHolder).toBe(false);
    expect((error as LockTimeoutError).engineAnswered).toBe(true);
  });

  it('a wait that saw the key held ends with engineAnswered, also when its last attempt hangs', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await locker.acquire('k', { ttlMs: 60_000 });
    const waiting = locker.acquire('k', { waitMs: 300 }).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 50));
    backend.attemptMode = 'hang';
    const error = await waiting;
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).engineAnswered).toBe(true);
    expect((error as LockTimeoutError).message).toMatch(/timed out after/);
  });

  it('rejects on abort although neither the attempt nor the withdrawal answers', async () => {
    const backend = new MemoryBackend();
    backend.attemptMode = 'hang';
    backend.abandonMode = 'hang';
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const error = await lockerOn(backend)
      .acquire('k', { signal: controller.signal })
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'ERR_LOCK_TIMEOUT' });
  });

  it('an abort of a wait that found the key held says so (sawHolder), as a timeout does', async () => {
    const backend = new MemoryBackend();
    const holder = lockerOn(backend);
    await holder.acquire('k', { ttlMs: 60_000 });
    const waiter = lockerOn(backend);
    for (const run of [
      (signal: AbortSignal) => waiter.acquire('k', { signal }),
      (signal: AbortSignal) => waiter.acquireAll(['j', 'k'], { signal }),
    ]) {
      const error = await run(AbortSignal.timeout(150)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).message).toMatch(/was aborted/);
      expect((error as LockTimeoutError).sawHolder).toBe(true);
    }
    expect(backend.entries.has('j')).toBe(false);
  });
});

describe('a failed first attempt', () => {
  it('is withdrawn, so a grant whose reply was lost does not block the key', async () => {
    const backend = new MemoryBackend();
    backend.attemptMode = 'apply-then-fail';
    const locker = lockerOn(backend);
    await expect(locker.acquire('k')).rejects.toMatchObject({ code: 'ERR_BACKEND' });
    await locker.close();
    expect(backend.calls.abandon).toBe(1);
    expect(backend.entries.has('k')).toBe(false);
  });
});

describe('an attempt still in flight when the caller gives up', () => {
  it('is withdrawn when it lands, also when its reply is an error (the grant applied, the reply lost)', async () => {
    const backend = new MemoryBackend();
    backend.attemptDelayMs = 80;
    backend.attemptMode = 'apply-then-fail';
    const locker = lockerOn(backend);
    const error = await locker.acquire('k', { waitMs: 20 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    // The withdrawal at the deadline found nothing; the attempt applied later and failed.
    await locker.close();
    expect(backend.entries.has('k')).toBe(false);
    expect(backend.calls.abandon).toBe(2);
  });
});

describe('close()', () => {
  it('cancels an acquire whose attempt is in flight and leaves nothing held', async () => {
    const backend = new MemoryBackend();
    backend.attemptDelayMs = 50;
    const locker = lockerOn(backend);
    const pending = locker.acquire('k').catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 10));
    await locker.close();
    const outcome = await pending;
    expect(outcome).toBeInstanceOf(LockTimeoutError);
    expect((outcome as LockTimeoutError).message).toContain('locker was closed');
    expect(locker.activeLeases).toBe(0);
    // close() waited for the withdrawal of the late grant.
    expect(backend.entries.has('k')).toBe(false);
  });

  it('wakes an acquire waiting for a held key', async () => {
    const backend = new MemoryBackend();
    await lockerOn(backend).acquire('k');
    const locker = lockerOn(backend);
    const pending = locker.acquire('k').catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 30));
    const started = performance.now();
    await locker.close();
    expect(await pending).toBeInstanceOf(LockTimeoutError);
    expect(performance.now() - started).toBeLessThan(500);
  });
});

describe('withLock and a lease that ran out while fn ran', () => {
  it('rejects with LockLostError and aborts the signal when fn blocked past the TTL', async () => {
    const backend = new MemoryBackend();
    let signal: AbortSignal | undefined;
    const outcome = await lockerOn(backend)
      .withLock(
        'k',
        (lease) => {
          signal = lease.signal;
          const until = performance.now() + 300;
          while (performance.now() < until) {
            // A synchronous block: no timer, no watchdog can run.
          }
          return 'done';
        },
        { ttlMs: 100 },
      )
      .catch((e: unknown) => e);
    expect(outcome).toBeInstanceOf(LockLostError);
    expect((outcome as LockLostError).reason).toBe('expired');
    expect(signal?.aborted).toBe(true);
  });

  it('rejects with LockLostError when the engine no longer had the key at release', async () => {
    const backend = new MemoryBackend();
    const outcome = await lockerOn(backend)
      .withLock('k', () => {
        backend.entries.delete('k');
        return 'done';
      })
      .catch((e: unknown) => e);
    expect(outcome).toBeInstanceOf(LockLostError);
    expect((outcome as LockLostError).reason).toBe('not-held');
  });
});

describe('extend', () => {
  it('rejects a TTL within the drift allowance before any engine call', async () => {
    const backend = new MemoryBackend();
    const lease = await lockerOn(backend).acquire('k');
    await expect(lease.extend(2)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(backend.calls.renew ?? 0).toBe(0);
    expect(lease.isHeld).toBe(true);
  });
});
