/**
 * Scenario T03 — losing the engine mid-hold is reported through the API, never as a crash.
 *
 * A holds `k` inside `withLock` (ttlMs 1000, watchdog on) and waits on `lease.signal`. The
 * private engine becomes unreachable for 3000 ms (SIGSTOP of the server; or a proxy cut), then
 * comes back. The lease must be declared lost through `signal` and `withLock`'s rejection, with
 * no process-level error, the watchdog must stop, and B must get `k` with a larger token.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  CHANNELS,
  type LostEvent,
  type RenewEvent,
} from '../../../packages/fencelock/src/core/events.js';
import type { Lease } from '../../../packages/fencelock/src/core/lease.js';
import type { Locker } from '../../../packages/fencelock/src/core/locker.js';
import { createLocker } from '../../../packages/fencelock/src/create-locker.js';
import { LockLostError } from '../../../packages/fencelock/src/errors.js';
import { type PrivateRedis, startRedis } from '../../helpers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const TTL_MS = 1000;
const RENEW_INTERVAL_MS = TTL_MS / 3;
const OUTAGE_MS = 3000;
/** The bound: abort within ttlMs + one renewal interval + 1000 ms of the outage start. */
const LOSS_BOUND_MS = TTL_MS + RENEW_INTERVAL_MS + 1000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

type Recorded =
  | { readonly kind: 'renew'; readonly at: number; readonly event: RenewEvent }
  | { readonly kind: 'lost'; readonly at: number; readonly event: LostEvent };

describe('T03 engine lost mid-hold (Redis)', () => {
  let redis: PrivateRedis;
  let admin: Redis;
  const processErrors: { kind: string; error: unknown }[] = [];
  const onUnhandledRejection = (error: unknown) =>
    processErrors.push({ kind: 'unhandledRejection', error });
  const onUncaughtException = (error: unknown) =>
    processErrors.push({ kind: 'uncaughtException', error });

  const recorded: Recorded[] = [];
  const onRenew = (message: unknown) =>
    recorded.push({ kind: 'renew', at: performance.now(), event: message as RenewEvent });
  const onLost = (message: unknown) =>
    recorded.push({ kind: 'lost', at: performance.now(), event: message as LostEvent });

  const lockers: Locker[] = [];
  let proxy: TcpProxy | undefined;

  beforeAll(async () => {
    process.on('unhandledRejection', onUnhandledRejection);
    process.on('uncaughtException', onUncaughtException);
    subscribe(CHANNELS.renew, onRenew);
    subscribe(CHANNELS.lost, onLost);
    redis = await startRedis();
    admin = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    admin.on('error', () => undefined);
    await admin.connect();
  });

  afterEach(async () => {
    // A failing test may leave the server frozen: thaw it before closing clients.
    try {
      redis.resume();
    } catch {
      // already exited
    }
    await proxy?.close();
    proxy = undefined;
    await Promise.allSettled(lockers.splice(0).map((locker) => locker.close()));
  });

  afterAll(async () => {
    unsubscribe(CHANNELS.renew, onRenew);
    unsubscribe(CHANNELS.lost, onLost);
    admin?.disconnect();
    await proxy?.close();
    await redis?.stop();
    // Nothing surfaced as a process-level error late either (after the tests, while closing).
    await sleep(100);
    process.off('unhandledRejection', onUnhandledRejection);
    process.off('uncaughtException', onUncaughtException);
    expect(processErrors).toEqual([]);
  });

  async function scenario(variant: 'sigstop' | 'proxy-cut'): Promise<void> {
    const key = `t03:${variant}:${randomUUID()}`;
    const errorsBefore = processErrors.length;
    if (variant === 'proxy-cut') proxy = await startTcpProxy({ targetPort: redis.port });
    const backendA = createRedisBackend({ url: variant === 'proxy-cut' ? proxy!.url : redis.url });
    // Count every renewal the lease makes (instrumentation only; the real engine answers).
    const renewCalls: { owner: string; at: number }[] = [];
    const realRenew = backendA.renew.bind(backendA);
    backendA.renew = (lease, ttlMs) => {
      renewCalls.push({ owner: lease.owner, at: performance.now() });
      return realRenew(lease, ttlMs);
    };
    const lockerA = createLocker(backendA);
    lockers.push(lockerA);

    let resolveHeld!: (lease: Lease) => void;
    const held = new Promise<Lease>((resolve) => {
      resolveHeld = resolve;
    });
    let abortedAt: number | undefined;
    let abortReason: unknown;
    let fnFinished = false;
    const withLock = lockerA.withLock(
      key,
      async (lease) => {
        lease.signal.addEventListener(
          'abort',
          () => {
            abortedAt = performance.now();
            abortReason = lease.signal.reason;
          },
          { once: true },
        );
        resolveHeld(lease);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, 20_000);
          lease.signal.addEventListener(
            'abort',
            () => {
              clearTimeout(timer);
              resolve();
            },
            { once: true },
          );
        });
        fnFinished = true;
        return 'fn returned';
      },
      { ttlMs: TTL_MS },
    );
    const outcome = withLock.then(
      (value) => ({ settled: 'resolved' as const, value, at: performance.now() }),
      (error: unknown) => ({ settled: 'rejected' as const, error, at: performance.now() }),
    );

    const leaseA = await held;
    const owner = leaseA.owner;
    const ofA = (r: Recorded) => r.event.owner === owner;
    // Healthy first: at least one renewal succeeded before the outage.
    await waitFor(
      'a successful renewal before the outage',
      () => recorded.some((r) => ofA(r) && r.kind === 'renew' && r.event.ok),
      5_000,
    );
    expect(leaseA.signal.aborted).toBe(false);

    const outageStart = performance.now();
    if (variant === 'sigstop') redis.pause();
    else proxy!.cut();
    try {
      await waitFor('the lease to be declared lost', () => abortedAt !== undefined, OUTAGE_MS);
    } catch {
      // Asserted below with the measured time.
    }
    const remaining = OUTAGE_MS - (performance.now() - outageStart);
    if (remaining > 0) await sleep(remaining);
    if (variant === 'sigstop') redis.resume();
    else await proxy!.restore();
    const outageEnd = performance.now();

    // The signal aborted with LockLostError, soon enough.
    expect(abortedAt, 'lease.signal never aborted during the outage').toBeDefined();
    expect(abortedAt! - outageStart).toBeLessThanOrEqual(LOSS_BOUND_MS);
    expect(abortReason).toBeInstanceOf(LockLostError);
    expect((abortReason as LockLostError).key).toBe(key);
    expect((abortReason as LockLostError).fencingToken).toBe(leaseA.fencingToken);
    expect(leaseA.isHeld).toBe(false);

    // withLock rejects with LockLostError; it does not resolve with fn's value. It says so as
    // soon as the lease is lost (its documented contract), not once the engine is back.
    const settled = await Promise.race([
      outcome,
      sleep(15_000).then(() => ({ settled: 'pending' as const, at: performance.now() })),
    ]);
    expect(settled.settled).toBe('rejected');
    if (settled.settled === 'rejected') {
      expect(settled.error).toBeInstanceOf(LockLostError);
      expect((settled.error as LockLostError).fencingToken).toBe(leaseA.fencingToken);
    }
    expect(settled.at - abortedAt!, 'withLock settled long after the loss').toBeLessThanOrEqual(
      1000,
    );
    expect(fnFinished).toBe(true);

    // Let anything still in flight (a renewal answered after the thaw, a reconnect) land.
    await sleep(Math.max(0, outageEnd + 1500 - performance.now()));

    // Watchdog: one lost event; no renewal attempted or reported after it; at most one failure
    // report per attempt.
    const mine = recorded.filter(ofA);
    const lostIndex = mine.findIndex((r) => r.kind === 'lost');
    expect(mine.filter((r) => r.kind === 'lost')).toHaveLength(1);
    const lost = mine[lostIndex]!;
    expect((lost.event as LostEvent).error).toBeInstanceOf(LockLostError);
    const renewEvents = mine.filter((r) => r.kind === 'renew');
    const failedRenews = renewEvents.filter((r) => !r.event.ok);
    const attempts = renewCalls.filter((c) => c.owner === owner);
    expect(renewEvents.length).toBeLessThanOrEqual(attempts.length);
    expect(failedRenews.length).toBeLessThanOrEqual(attempts.length);
    expect(
      mine.slice(lostIndex + 1).filter((r) => r.kind === 'renew'),
      'renew events published after the lease was declared lost',
    ).toEqual([]);
    expect(
      attempts.filter((c) => c.at > lost.at),
      'renewals attempted after the lease was declared lost',
    ).toEqual([]);

    // After recovery B acquires k, with a larger fencing token.
    const lockerB = createLocker(createRedisBackend({ url: redis.url }));
    lockers.push(lockerB);
    const leaseB = await lockerB.acquire(key, { ttlMs: 5_000, waitMs: 10_000 });
    expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);
    const { lock } = backendA.keysOf(key);
    expect(await admin.get(lock)).toBe(`${leaseB.owner}:${leaseB.fencingToken}`);
    expect(await leaseB.release()).toBe('released');

    // A's own locker works again once the engine is back (reconnect, no wedged client).
    const again = await lockerA.acquire(`${key}:again`, { ttlMs: 2_000, waitMs: 15_000 });
    expect(again.fencingToken).toBeGreaterThan(0n);
    expect(await again.release()).toBe('released');

    expect(processErrors.slice(errorsBefore)).toEqual([]);
  }

  it('SIGSTOP of the engine for 3 s: lost through the signal and withLock, no crash', async () => {
    await scenario('sigstop');
  });

  it('proxy cut for 3 s: lost through the signal and withLock, no crash', async () => {
    await scenario('proxy-cut');
  });
});
