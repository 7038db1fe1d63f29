/**
 * Scenario T12 — validity is measured from the winning attempt (or, on Redis, from the receipt of
 * the grant a release handed over) on a monotonic clock.
 *
 * Redis runs on a private server (and through a delaying proxy for the slow-acquisition step);
 * the wall-clock jump step also runs on the embedded SQLite store.
 */
import { randomUUID } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import { createSqliteBackend } from '../../../packages/fencelock/src/backends/sqlite/index.js';
import type { Backend } from '../../../packages/fencelock/src/core/backend.js';
import { driftMs } from '../../../packages/fencelock/src/core/clock.js';
import {
  type AcquireEvent,
  CHANNELS,
  type LostEvent,
  type RenewEvent,
} from '../../../packages/fencelock/src/core/events.js';
import type { Lease } from '../../../packages/fencelock/src/core/lease.js';
import type { Locker } from '../../../packages/fencelock/src/core/locker.js';
import { createLocker } from '../../../packages/fencelock/src/create-locker.js';
import { LockTimeoutError } from '../../../packages/fencelock/src/errors.js';
import { DEFAULTS } from '../../../packages/fencelock/src/options.js';
import { PG_URL } from '../../helpers/engines.js';
import { type PrivateRedis, startRedis } from '../../helpers/redis-server.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function waitFor(what: string, check: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Scheduling noise allowed on a shared 2-core machine, ms. */
const SLACK_MS = 150;
const HOUR_MS = 3_600_000;

describe('T12 validity on a monotonic clock', () => {
  let redis: PrivateRedis;
  let admin: Redis;
  let proxy: TcpProxy | undefined;
  let sqliteDir: string;
  const lockers: Locker[] = [];

  const renews: { at: number; event: RenewEvent }[] = [];
  const losts: { at: number; event: LostEvent }[] = [];
  const acquires: AcquireEvent[] = [];
  const onRenew = (m: unknown) => renews.push({ at: performance.now(), event: m as RenewEvent });
  const onLost = (m: unknown) => losts.push({ at: performance.now(), event: m as LostEvent });
  const onAcquire = (m: unknown) => acquires.push(m as AcquireEvent);

  function redisLocker(url: string): { locker: Locker; backend: RedisBackend } {
    const backend = createRedisBackend({ url });
    const locker = createLocker(backend);
    lockers.push(locker);
    return { locker, backend };
  }

  beforeAll(async () => {
    subscribe(CHANNELS.renew, onRenew);
    subscribe(CHANNELS.lost, onLost);
    subscribe(CHANNELS.acquire, onAcquire);
    redis = await startRedis();
    admin = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    admin.on('error', () => undefined);
    await admin.connect();
    sqliteDir = mkdtempSync(join(tmpdir(), 'fencelock-t12-'));
  });

  afterEach(async () => {
    vi.useRealTimers();
    await proxy?.close();
    proxy = undefined;
    await Promise.allSettled(lockers.splice(0).map((locker) => locker.close()));
  });

  afterAll(async () => {
    unsubscribe(CHANNELS.renew, onRenew);
    unsubscribe(CHANNELS.lost, onLost);
    unsubscribe(CHANNELS.acquire, onAcquire);
    admin?.disconnect();
    await redis?.stop();
    if (sqliteDir) rmSync(sqliteDir, { recursive: true, force: true });
  });

  it('steps 1–2 (Redis): validity counts from the grant handed over on release; the watchdog keeps it', async () => {
    const key = `t12:handoff:${randomUUID()}`;
    const TTL = 2000;
    const drift = driftMs(TTL, DEFAULTS.driftFactor); // 2000 × 0.01 + 2
    const { locker: lockerA } = redisLocker(redis.url);
    const { locker: lockerB, backend: backendB } = redisLocker(redis.url);
    // Record when each of B's attempts is handed to the engine (instrumentation only).
    const attemptCalls: number[] = [];
    const realAttempt = backendB.attempt.bind(backendB);
    backendB.attempt = (request) => {
      attemptCalls.push(performance.now());
      return realAttempt(request);
    };

    const leaseA = await lockerA.acquire(key, { ttlMs: 5000 });
    const acquireCalledAt = performance.now();
    const pendingB = lockerB.acquire(key, {
      ttlMs: TTL,
      retry: { initialDelayMs: 200, maxDelayMs: 200 },
      waitMs: 5000,
    });
    let bSettledAt: number | undefined;
    pendingB.then(
      () => {
        bSettledAt = performance.now();
      },
      () => {
        bSettledAt = performance.now();
      },
    );
    await sleep(1200);
    expect(bSettledAt, 'B was granted while A held the key').toBeUndefined();
    const releaseStartedAt = performance.now();
    expect(await leaseA.release()).toBe('released');
    const leaseB = await pendingB;
    const now = performance.now();

    // B waited through A's hold (several attempts) and got a higher token.
    expect(attemptCalls.length).toBeGreaterThanOrEqual(2);
    expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);
    expect(now - acquireCalledAt).toBeGreaterThanOrEqual(1200);

    // Validity: (0, 2000], and close to 2000 − (time since the grant) − drift.
    const remaining = leaseB.expiresAt - now;
    expect(remaining).toBeGreaterThan(0);
    expect(remaining).toBeLessThanOrEqual(TTL);
    expect(remaining).toBeGreaterThanOrEqual(TTL - (now - releaseStartedAt) - drift - SLACK_MS);
    // A's release handed the key to B, the head of the line (one hop: B made no attempt after
    // the release). B's validity counts from the handoff message's receipt with the first TTL
    // (min(TTL, 2 s) = TTL here), never from a later point (the acquire's answer) nor from B's
    // first attempt: the receipt lies between the release's start and B's acquire settling.
    expect(attemptCalls[attemptCalls.length - 1]!).toBeLessThan(releaseStartedAt);
    expect(bSettledAt).toBeDefined();
    expect(leaseB.expiresAt).toBeLessThanOrEqual(bSettledAt! + TTL - drift + 0.5);
    expect(leaseB.expiresAt).toBeGreaterThanOrEqual(releaseStartedAt + TTL - drift - 0.5);

    // The engine keeps the key at least as long as the library believes it holds it.
    const { lock } = backendB.keysOf(key);
    const pttl = await admin.pttl(lock);
    const reported = leaseB.remainingMs;
    expect(reported).toBeGreaterThan(0);
    expect(pttl).toBeGreaterThanOrEqual(reported);
    expect(pttl).toBeLessThanOrEqual(TTL);
    expect(await admin.get(lock)).toBe(`${leaseB.owner}:${leaseB.fencingToken}`);

    // Step 2: the watchdog's first renewal succeeds; nothing is lost.
    const ofB = (e: { owner: string }) => e.owner === leaseB.owner;
    await waitFor('B’s first renewal', () => renews.some((r) => ofB(r.event)), TTL);
    const firstRenew = renews.find((r) => ofB(r.event))!;
    expect(firstRenew.event.ok).toBe(true);
    expect(firstRenew.event.error).toBeUndefined();
    await waitFor('B’s second renewal', () => renews.filter((r) => ofB(r.event)).length >= 2, TTL);
    expect(renews.filter((r) => ofB(r.event) && !r.event.ok)).toEqual([]);
    expect(losts.filter((l) => ofB(l.event))).toEqual([]);
    expect(leaseB.isHeld).toBe(true);
    expect(leaseB.signal.aborted).toBe(false);
    expect(await admin.pttl(lock)).toBeGreaterThan(TTL - TTL / 3 - SLACK_MS * 2);
    expect(await leaseB.release()).toBe('released');
  });

  async function clockJump(locker: Locker, store: string): Promise<void> {
    const key = `t12:clock:${store}:${randomUUID()}`;
    const TTL = 2000;
    const lease: Lease = await locker.acquire(key, { ttlMs: TTL });
    const owner = lease.owner;
    const samples: number[] = [];
    const sampler = setInterval(() => samples.push(lease.remainingMs), 50);
    const renewsBefore = renews.length;
    const realWallBefore = Date.now();
    const monoBefore = performance.now();
    vi.useFakeTimers({ toFake: ['Date'] });
    let jumpedBy = 0;
    try {
      vi.setSystemTime(realWallBefore + HOUR_MS);
      jumpedBy = Date.now() - realWallBefore;
      await sleep(3000); // real time: only Date is faked
      vi.setSystemTime(Date.now() - HOUR_MS);
      await sleep(3000);
    } finally {
      vi.useRealTimers();
      clearInterval(sampler);
    }
    const monoElapsed = performance.now() - monoBefore;

    // The jump really happened to the wall clock, and not to the monotonic clock.
    expect(jumpedBy).toBeGreaterThanOrEqual(HOUR_MS);
    expect(monoElapsed).toBeGreaterThanOrEqual(6000 - 5);
    expect(monoElapsed).toBeLessThan(HOUR_MS / 2);

    // Held throughout: no lost event, signal not aborted, renewals kept succeeding.
    const mine = renews.slice(renewsBefore).filter((r) => r.event.owner === owner);
    expect(losts.filter((l) => l.event.owner === owner)).toEqual([]);
    expect(lease.signal.aborted).toBe(false);
    expect(lease.isHeld).toBe(true);
    expect(mine.filter((r) => !r.event.ok)).toEqual([]);
    expect(mine.filter((r) => r.event.ok).length).toBeGreaterThanOrEqual(2);
    // Remaining validity stayed in (0, 2000] at every sample.
    expect(samples.length).toBeGreaterThanOrEqual(20);
    expect(samples.filter((ms) => !(ms > 0 && ms <= TTL))).toEqual([]);

    // The engine agrees: it still holds A's lease.
    const info = await locker.inspect(key);
    expect(info.holder?.owner).toBe(owner);
    expect(info.holder?.fencingToken).toBe(lease.fencingToken);
    expect(await lease.release()).toBe('released');
  }

  it('step 3 (Redis): a ±1 h wall-clock jump changes nothing', async () => {
    const { locker } = redisLocker(redis.url);
    await clockJump(locker, 'redis');
  });

  it('step 3 (SQLite): a ±1 h wall-clock jump changes nothing', async () => {
    const backend: Backend = createSqliteBackend({ path: join(sqliteDir, 'locks.db') });
    const locker = createLocker(backend);
    lockers.push(locker);
    await clockJump(locker, 'sqlite');
  });

  it('step 3 (PostgreSQL): a ±1 h wall-clock jump changes nothing', async () => {
    // The lease's expiry is on the server's clock; the client's validity on its monotonic one.
    const schema = `fencelock_t12_${randomUUID().slice(0, 8)}`;
    const locker = createLocker(`${PG_URL}?schema=${schema}`);
    lockers.push(locker);
    await clockJump(locker, 'postgres');
    const admin = new pg.Client({ connectionString: PG_URL });
    await admin.connect();
    await admin.query(`DROP SCHEMA "${schema}" CASCADE`);
    await admin.end();
  });

  it('step 4 (Redis): a grant slower than its TTL is not returned as a lease', async () => {
    const key = `t12:slow:${randomUUID()}`;
    const TTL = 200;
    const WAIT = 2000;
    proxy = await startTcpProxy({ targetPort: redis.port });
    const { locker, backend } = redisLocker(proxy.url);
    // Warm up in pass mode: connection ready, scripts loaded.
    const warm = await locker.acquire(`${key}:warm`, { ttlMs: 1000 });
    expect(await warm.release()).toBe('released');
    const { lock, fence } = backend.keysOf(key);
    const tokenBefore = BigInt((await admin.get(fence)) ?? '0');

    proxy.delayReplies(300);
    const startedAt = performance.now();
    const outcome = await locker.acquire(key, { ttlMs: TTL, waitMs: WAIT }).then(
      (lease) => ({ lease, error: undefined, at: performance.now() }),
      (error: unknown) => ({ lease: undefined, error, at: performance.now() }),
    );
    const event = acquires.find((a) => a.key === key && a.outcome !== 'reentered');
    expect(event, 'no acquire event for the slow acquisition').toBeDefined();
    const owner = event!.owner;

    if (outcome.lease === undefined) {
      expect(outcome.error).toBeInstanceOf(LockTimeoutError);
      expect(locker.activeLeases).toBe(0);
    } else {
      // Only acceptable if it still has validity left when handed over.
      expect(outcome.lease.remainingMs).toBeGreaterThan(0);
      expect(outcome.lease.expiresAt).toBeGreaterThan(outcome.at);
    }
    // It gave up in bounded time (deadline plus the clean-up round trips).
    expect(outcome.at - startedAt).toBeLessThanOrEqual(WAIT + 3000);
    // The engine did grant at least once (the slow grant was exercised, then refused).
    const tokenAfter = BigInt((await admin.get(fence)) ?? '0');
    expect(tokenAfter).toBeGreaterThan(tokenBefore);

    await proxy.restore();
    await sleep(TTL + 200);
    const value = await admin.get(lock);
    expect(value === null || !value.startsWith(`${owner}:`)).toBe(true);
    if (outcome.lease) await outcome.lease.release().catch(() => undefined);
  });
});
