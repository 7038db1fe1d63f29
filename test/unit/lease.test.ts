import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  CHANNELS,
  createLocker,
  type Locker,
  LockLostError,
  LockTimeoutError,
  NotLockOwnerError,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

let backend: MemoryBackend;
let locker: Locker;

beforeEach(() => {
  vi.useFakeTimers();
  backend = new MemoryBackend();
  locker = createLocker(backend, { ttlMs: 3000 });
});

afterEach(async () => {
  await locker.close();
  vi.useRealTimers();
});

describe('watchdog renewal', () => {
  it('bunches renewals due within ttl/12 only where the backend batches them', async () => {
    // ttl 3000: renewals at 1000 after each grant; the second lease is granted 200 ms later.
    const renewTimes = async (batches: boolean): Promise<number> => {
      const local = new MemoryBackend();
      local.capabilities = { ...local.capabilities, batchRenew: batches };
      const l = createLocker(local, { ttlMs: 3000 });
      await l.acquire('a');
      await vi.advanceTimersByTimeAsync(200);
      await l.acquire('b');
      await vi.advanceTimersByTimeAsync(801); // t = 1001: the first lease's renewal is due
      const renewed = local.calls.renew ?? 0;
      await l.close();
      return renewed;
    };
    // Batching backend: the second lease (due at 1200, within 250 ms) goes with the first.
    expect(await renewTimes(true)).toBe(2);
    // Others keep each renewal at its own time.
    expect(await renewTimes(false)).toBe(1);
  });

  it('renews every ttlMs / 3 and keeps the lease past its TTL', async () => {
    const lease = await locker.acquire('k');
    await vi.advanceTimersByTimeAsync(999);
    expect(backend.calls.renew ?? 0).toBe(0);
    await vi.advanceTimersByTimeAsync(2);
    expect(backend.calls.renew).toBe(1);
    await vi.advanceTimersByTimeAsync(9_000);
    expect(backend.calls.renew).toBe(10);
    expect(lease.isHeld).toBe(true);
    expect(lease.signal.aborted).toBe(false);
    expect(await lease.release()).toBe('released');
    await vi.advanceTimersByTimeAsync(10_000);
    expect(backend.calls.renew).toBe(10);
  });

  it('does not renew with autoRenew off, and reports the loss at expiry', async () => {
    const lease = await locker.acquire('k', { autoRenew: false, ttlMs: 1000 });
    // Validity ends at ttl − drift (1000 × 0.01 + 2 = 12 ms).
    await vi.advanceTimersByTimeAsync(987);
    expect(lease.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(2);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect((lease.signal.reason as LockLostError).reason).toBe('expired');
    expect(backend.calls.renew ?? 0).toBe(0);
  });

  it('a signal first read after the loss is already aborted with the LockLostError', async () => {
    // The lease makes its AbortController on first use of `signal`: a loss before that must
    // still show on it, with the same error as the lost event.
    const lost: unknown[] = [];
    const onLost = (event: unknown) => lost.push((event as { error: unknown }).error);
    diagnostics_channel.subscribe(CHANNELS.lost, onLost);
    try {
      const lease = await locker.acquire('k', { autoRenew: false, ttlMs: 1000 });
      await vi.advanceTimersByTimeAsync(1000);
      expect(lease.isHeld).toBe(false);
      const { signal } = lease;
      expect(signal.aborted).toBe(true);
      expect(signal.reason).toBeInstanceOf(LockLostError);
      expect((signal.reason as LockLostError).reason).toBe('expired');
      expect(lost).toEqual([signal.reason]);
      expect(lease.signal).toBe(signal);
    } finally {
      diagnostics_channel.unsubscribe(CHANNELS.lost, onLost);
    }
  });

  it('loses the lease at once when the engine says another owner holds it', async () => {
    const lease = await locker.acquire('k');
    backend.entries.get('k')!.owner = 'someone-else';
    await vi.advanceTimersByTimeAsync(1001);
    expect(lease.signal.aborted).toBe(true);
    expect((lease.signal.reason as LockLostError).reason).toBe('not-owner');
    expect(lease.isHeld).toBe(false);
    await vi.advanceTimersByTimeAsync(10_000);
    expect(backend.calls.renew).toBe(1);
  });

  it('retries failed renewals and declares the loss when validity runs out', async () => {
    const lease = await locker.acquire('k');
    backend.renewMode = 'fail';
    await vi.advanceTimersByTimeAsync(2500);
    expect(lease.signal.aborted).toBe(false);
    expect(backend.calls.renew).toBeGreaterThan(2);
    await vi.advanceTimersByTimeAsync(500);
    expect(lease.signal.aborted).toBe(true);
    expect((lease.signal.reason as LockLostError).reason).toBe('expired');
    const renewsAtLoss = backend.calls.renew;
    await vi.advanceTimersByTimeAsync(10_000);
    expect(backend.calls.renew).toBe(renewsAtLoss);
  });

  it('declares the loss at validity end while a renewal hangs', async () => {
    const lease = await locker.acquire('k');
    backend.renewMode = 'hang';
    await vi.advanceTimersByTimeAsync(2900);
    expect(lease.signal.aborted).toBe(false);
    await vi.advanceTimersByTimeAsync(100);
    expect(lease.signal.aborted).toBe(true);
    expect(backend.calls.renew).toBe(1);
  });

  it('keeps renewing under maxHoldMs and stops at the cap', async () => {
    const lease = await locker.acquire('k', { maxHoldMs: 5000 });
    await vi.advanceTimersByTimeAsync(4000);
    // Renewals at 1 s and 2 s; the second already reaches the cap, so none after it.
    expect(backend.calls.renew).toBe(2);
    expect(lease.signal.aborted).toBe(false);
    // The engine TTL never reaches past the cap.
    expect(backend.entries.get('k')!.expiresAt).toBeLessThanOrEqual(performance.now() + 1001);
    await vi.advanceTimersByTimeAsync(1001);
    expect(lease.signal.aborted).toBe(true);
    expect((lease.signal.reason as LockLostError).reason).toBe('max-hold');
    // The cap also ends the lease on the engine (a session could otherwise keep the key alive).
    expect(backend.calls.release).toBe(1);
  });
});

describe('extend', () => {
  it('extends to a new TTL and fails with LockLostError once the key is gone', async () => {
    const lease = await locker.acquire('k', { autoRenew: false, ttlMs: 1000 });
    await vi.advanceTimersByTimeAsync(800);
    await lease.extend(5000);
    expect(lease.ttlMs).toBe(5000);
    await vi.advanceTimersByTimeAsync(4000);
    expect(lease.isHeld).toBe(true);
    backend.entries.delete('k');
    await expect(lease.extend(1000)).rejects.toBeInstanceOf(LockLostError);
    expect(lease.signal.aborted).toBe(true);
    expect(backend.entries.has('k')).toBe(false);
    await expect(lease.extend(1000)).rejects.toBeInstanceOf(LockLostError);
  });

  it('refuses extend after release with NotLockOwnerError', async () => {
    const lease = await locker.acquire('k');
    await lease.release();
    await expect(lease.extend(1000)).rejects.toBeInstanceOf(NotLockOwnerError);
  });
});

describe('acquire loop', () => {
  it('waits with backoff bounded by the holder TTL and times out with LockTimeoutError', async () => {
    const other = createLocker(backend);
    await other.acquire('k', { ttlMs: 60_000 });
    const pending = locker.acquire('k', { waitMs: 2000 });
    const outcome = expect(pending).rejects.toBeInstanceOf(LockTimeoutError);
    await vi.advanceTimersByTimeAsync(2100);
    await outcome;
    // Full jitter, at most 500 ms apart: at least 4 attempts in 2 s.
    expect(backend.calls.attempt).toBeGreaterThanOrEqual(5);
    await other.close();
  });

  it('is granted right after the holder TTL runs out', async () => {
    const other = createLocker(backend, { autoRenew: false });
    const first = await other.acquire('k', { ttlMs: 10_000 });
    const pending = locker.acquire('k', { retry: { initialDelayMs: 1000, maxDelayMs: 60_000 } });
    // The wait is bounded by the holder's TTL plus at most initialDelayMs of jitter.
    await vi.advanceTimersByTimeAsync(11_100);
    const lease = await pending;
    expect(lease.fencingToken).toBe(first.fencingToken + 1n);
    await other.close();
  });

  it('keeps waiting on a slow engine when a signal is given and waitMs is infinite', async () => {
    const other = createLocker(backend, { autoRenew: false });
    await other.acquire('k', { ttlMs: 500 });
    backend.attemptDelayMs = 50;
    const pending = locker.acquire('k', { signal: new AbortController().signal });
    await vi.advanceTimersByTimeAsync(2000);
    const lease = await pending;
    expect(lease.fencingToken).toBe(2n);
    await other.close();
  });

  it('rejects with LockTimeoutError carrying the reason when the signal aborts', async () => {
    const other = createLocker(backend);
    await other.acquire('k');
    const controller = new AbortController();
    const pending = locker.acquire('k', { signal: controller.signal });
    const outcome = expect(pending).rejects.toMatchObject({
      code: 'ERR_LOCK_TIMEOUT',
      cause: 'stop',
    });
    await vi.advanceTimersByTimeAsync(100);
    controller.abort('stop');
    await vi.advanceTimersByTimeAsync(1);
    await outcome;
    await other.close();
  });
});

describe('reentrancy', () => {
  it('counts holds in a withLock context and releases on the engine at zero', async () => {
    await locker.withLock(
      'k',
      async (outer) => {
        const inner = await locker.acquire('k', { reentrant: true });
        expect(inner).toBe(outer);
        expect(inner.fencingToken).toBe(outer.fencingToken);
        expect(outer.holdCount).toBe(2);
        expect(await inner.release()).toBe('released');
        expect(outer.holdCount).toBe(1);
        expect(backend.entries.has('k')).toBe(true);
      },
      { reentrant: true },
    );
    expect(backend.entries.has('k')).toBe(false);
    expect(backend.calls.attempt).toBe(1);
  });

  it('counts holds on one Lock handle; over-release answers not-held and never goes negative', async () => {
    const lock = locker.lock('k', { reentrant: true });
    const a = await lock.acquire();
    const b = await lock.acquire();
    expect(b).toBe(a);
    expect(a.holdCount).toBe(2);
    expect(await a.release()).toBe('released');
    expect(await a.release()).toBe('released');
    expect(await a.release()).toBe('not-held');
    expect(a.holdCount).toBe(0);
    expect(backend.calls.release).toBe(1);
  });

  it('a release whose engine call failed is asked of the engine again by the next release', async () => {
    const lease = await locker.acquire('k');
    backend.failReleases = 1;
    await expect(lease.release()).rejects.toMatchObject({ code: 'ERR_BACKEND' });
    expect(backend.entries.has('k')).toBe(true);
    expect(await lease.release()).toBe('released');
    expect(backend.entries.has('k')).toBe(false);
    expect(backend.calls.release).toBe(2);
    // Settled by the engine: over-release answers locally again.
    expect(await lease.release()).toBe('not-held');
    expect(backend.calls.release).toBe(2);
  });

  it('does not share a lease between handles without reentrant', async () => {
    const h1 = locker.lock('k');
    const h2 = locker.lock('k');
    await h1.acquire();
    expect(await h2.tryAcquire()).toBeNull();
    await h1.lease!.release();
    expect(await h2.tryAcquire()).not.toBeNull();
  });

  it('does not reenter from a sibling context', async () => {
    let releaseB!: () => void;
    const holdingB = new Promise<void>((resolve) => {
      releaseB = resolve;
    });
    let bHeld!: () => void;
    const bIsHeld = new Promise<void>((resolve) => {
      bHeld = resolve;
    });
    const sibling = locker.withLock(
      'b',
      async () => {
        bHeld();
        await holdingB;
      },
      { reentrant: true },
    );
    await bIsHeld;
    const fromOtherContext = await locker.withLock('a', () =>
      locker.tryAcquire('b', { reentrant: true }),
    );
    expect(fromOtherContext).toBeNull();
    releaseB();
    await sibling;
  });
});

describe('withLock', () => {
  it('rethrows the callback error after releasing', async () => {
    await expect(
      locker.withLock('k', () => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(backend.entries.has('k')).toBe(false);
  });

  it('rejects with LockLostError as soon as the lease is lost', async () => {
    let seen: AbortSignal | undefined;
    const pending = locker.withLock('k', async (lease) => {
      seen = lease.signal;
      await new Promise(() => {});
    });
    const outcome = expect(pending).rejects.toBeInstanceOf(LockLostError);
    await vi.advanceTimersByTimeAsync(10);
    backend.entries.delete('k');
    await vi.advanceTimersByTimeAsync(1001);
    await outcome;
    expect(seen?.aborted).toBe(true);
  });
});

describe('events', () => {
  it('publishes acquire, renew, release and lost on diagnostics_channel', async () => {
    const seen: { channel: string; message: Record<string, unknown> }[] = [];
    const listeners = Object.values(CHANNELS).map((channel) => {
      const fn = (message: unknown) =>
        seen.push({ channel, message: message as Record<string, unknown> });
      diagnostics_channel.subscribe(channel, fn);
      return () => diagnostics_channel.unsubscribe(channel, fn);
    });
    try {
      const lease = await locker.acquire('k');
      await vi.advanceTimersByTimeAsync(1001);
      await lease.release();
      const lost = await locker.acquire('k2', { autoRenew: false, ttlMs: 100 });
      await vi.advanceTimersByTimeAsync(200);
      expect(lost.signal.aborted).toBe(true);
      expect(seen.map((e) => `${e.channel}:${e.message.key}`)).toEqual([
        'fencelock:acquire:k',
        'fencelock:renew:k',
        'fencelock:release:k',
        'fencelock:acquire:k2',
        'fencelock:lost:k2',
      ]);
      expect(seen[0]!.message).toMatchObject({ outcome: 'granted', fencingToken: 1n, attempts: 1 });
      expect(seen[1]!.message).toMatchObject({ ok: true });
      expect(seen[2]!.message).toMatchObject({ outcome: 'released' });
      expect(seen[2]!.message.holdMs).toBeGreaterThanOrEqual(1000);
      expect(seen[4]!.message).toMatchObject({ reason: 'expired' });
    } finally {
      for (const off of listeners) off();
    }
  });
});

describe('close', () => {
  it('releases held leases, stops the watchdog and closes the backend', async () => {
    const lease = await locker.acquire('k');
    await locker.close();
    expect(backend.entries.has('k')).toBe(false);
    expect(lease.holdCount).toBe(0);
    expect(backend.closed).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
  });
});
