/**
 * The lock-delay part of the backend contract (`lockDelayMs`, Chubby's lock-delay), registered
 * by `describeBackend` for every backend: where `capabilities.lockDelay` is false, the refusal
 * before any engine call; elsewhere a grant that ends without a release (its holder "killed":
 * granted through the backend, then never renewed or released) keeps the key from everyone for
 * the delay after its end, renewals move that end, a release clears it, a late release does not,
 * a lease the library ends itself does not clear it (engines without sessions), and an
 * election's leadership carries it too.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import type { AttemptRequest } from '../../packages/fencelock/src/core/backend.js';
import { newOwnerId } from '../../packages/fencelock/src/core/lock.js';
import {
  type Backend,
  InvalidArgumentError,
  type Locker,
  type LockerOptions,
} from '../../packages/fencelock/src/index.js';

/** What the lock-delay cases need from the suite. */
export interface LockDelaySuite {
  newClient(options?: LockerOptions): Promise<{
    locker: Locker;
    backend: Backend;
    traits: { readonly minTtlMs: number; readonly ttlGranularityMs: number };
  }>;
  uniqueKey(label: string): string;
}

/** The lock-delay of every case, ms: long beside a loopback round trip and the engines' ticks. */
const DELAY_MS = 1_500;

/** A holder that is "killed" after its grant: granted through the backend, never renewed. */
function killedHolder(key: string, ttlMs: number, extra: Partial<AttemptRequest> = {}) {
  const request: AttemptRequest = {
    key,
    owner: newOwnerId(),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    lockDelayMs: DELAY_MS,
    ...extra,
  };
  return request;
}

/** Register the lock-delay cases (inside `describeBackend`'s describe). */
export function describeLockDelayContract(suite: LockDelaySuite): void {
  const { newClient, uniqueKey } = suite;

  it('lock-delay: refused before any engine call where capabilities.lockDelay is false', async () => {
    const { locker, backend } = await newClient();
    if (backend.capabilities.lockDelay) return;
    const refused = await locker
      .acquire(uniqueKey('no-delay'), { lockDelayMs: 1_000 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as InvalidArgumentError).argument).toBe('lockDelayMs');
    // A read grant carries none: the locker's default lock-delay does not refuse it.
    if (backend.capabilities.modes.includes('read')) {
      const { locker: delaying } = await newClient({ lockDelayMs: 1_000 });
      const reader = await delaying.acquire(uniqueKey('no-delay-read'), { mode: 'read' });
      await reader.release();
    }
  });

  it('lock-delay: a killed holder’s key is granted to nobody until the delay after its TTL', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.lockDelay) return t.skip();
    const key = uniqueKey('delay');
    const ttlMs = Math.max(a.traits.minTtlMs, 500);
    const startedAt = performance.now();
    const granted = await a.backend.attempt(killedHolder(key, ttlMs));
    expect(granted.granted).toBe(true);
    const appliedTtlMs = (granted as { ttlMs: number }).ttlMs;
    // The engine's end of the grant is no earlier than this (its TTL counts from the grant).
    const endedBy = startedAt + appliedTtlMs;
    await delay(appliedTtlMs + 100);
    // Past the TTL, inside the delay: nobody is granted, not even a contender without a delay.
    expect(await b.locker.tryAcquire(key, { ttlMs: 10_000 })).toBeNull();
    const waited = await b.locker.acquire(key, { ttlMs: 10_000, waitMs: DELAY_MS + 10_000 });
    // Not before the delay after the holder's end (a monotonic lower bound of it).
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + appliedTtlMs + DELAY_MS - 5);
    expect(performance.now() - (endedBy + DELAY_MS)).toBeLessThan(5_000);
    await waited.release();
  });

  it('lock-delay: a renewal moves the end the delay counts from', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.lockDelay || a.backend.capabilities.sessions) return t.skip();
    const key = uniqueKey('delay-renew');
    const ttlMs = Math.max(a.traits.minTtlMs, 600);
    const request = killedHolder(key, ttlMs);
    const granted = await a.backend.attempt(request);
    expect(granted.granted).toBe(true);
    await delay(ttlMs / 2);
    const renewedAt = performance.now();
    const renewed = await a.backend.renew(
      { key, owner: request.owner, fencingToken: (granted as { token: bigint }).token },
      ttlMs,
    );
    expect(renewed.ok).toBe(true);
    // Past the first TTL's end plus the delay, but not past the renewed end plus the delay.
    await delay(Math.max(0, renewedAt + ttlMs + DELAY_MS / 2 - performance.now()));
    expect(await b.locker.tryAcquire(key, { ttlMs: 10_000 })).toBeNull();
    const waited = await b.locker.acquire(key, { ttlMs: 10_000, waitMs: DELAY_MS + 10_000 });
    expect(performance.now()).toBeGreaterThanOrEqual(renewedAt + ttlMs + DELAY_MS - 5);
    await waited.release();
  });

  it('lock-delay: a release clears it; a release after the grant ran out does not', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.lockDelay) return t.skip();
    const key = uniqueKey('delay-release');
    const lease = await a.locker.acquire(key, { ttlMs: 10_000, lockDelayMs: DELAY_MS });
    expect(await lease.release()).toBe('released');
    const next = await b.locker.tryAcquire(key, { ttlMs: 10_000 });
    expect(next).not.toBeNull();
    await next!.release();

    const late = uniqueKey('delay-late-release');
    const ttlMs = Math.max(a.traits.minTtlMs, 500);
    const request = killedHolder(late, ttlMs);
    const granted = await a.backend.attempt(request);
    expect(granted.granted).toBe(true);
    await delay((granted as { ttlMs: number }).ttlMs + 100);
    // The holder comes back (resumed after a pause) and releases a grant already gone.
    const outcome = await a.backend.release({
      key: late,
      owner: request.owner,
      fencingToken: (granted as { token: bigint }).token,
    });
    expect(outcome).not.toBe('released');
    expect(await b.locker.tryAcquire(late, { ttlMs: 10_000 })).toBeNull();
  });

  it('lock-delay: a lease the library ends itself (TTL out, no renewal) keeps its delay where grants have their own TTL', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.lockDelay || a.backend.capabilities.sessions) return t.skip();
    const key = uniqueKey('delay-lost');
    const ttlMs = Math.max(a.traits.minTtlMs, 500);
    const startedAt = performance.now();
    const lease = await a.locker.acquire(key, { ttlMs, autoRenew: false, lockDelayMs: DELAY_MS });
    // The lease's own timer ends it (a little before the engine's TTL, by the drift allowance);
    // the work it guarded may still be running, so the grant is left to run out, delay and all.
    await delay(ttlMs + 200);
    expect(lease.signal.aborted).toBe(true);
    expect(await b.locker.tryAcquire(key, { ttlMs: 10_000 })).toBeNull();
    const waited = await b.locker.acquire(key, { ttlMs: 10_000, waitMs: DELAY_MS + 10_000 });
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + ttlMs + DELAY_MS - 5);
    await waited.release();
  });

  it('lock-delay: a leadership that ran out keeps the election from the next candidate', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    const { capabilities } = a.backend;
    if (!capabilities.lockDelay || !capabilities.election) return t.skip();
    const name = uniqueKey('delay-election');
    const ttlMs = Math.max(a.traits.minTtlMs, 500);
    const startedAt = performance.now();
    const granted = await a.backend.attempt(
      killedHolder(name, ttlMs, { election: { value: 'killed' } }),
    );
    expect(granted.granted).toBe(true);
    const appliedTtlMs = (granted as { ttlMs: number }).ttlMs;
    const next = await b.locker
      .election(name)
      .campaign('next', { ttlMs: 10_000, waitMs: appliedTtlMs + DELAY_MS + 10_000 });
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + appliedTtlMs + DELAY_MS - 5);
    await next.resign();
  });
}
