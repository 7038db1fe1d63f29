/**
 * Waiting on Redis: release notifications are not missed, many waiters raise no warnings, and a
 * locker with waiters closes promptly even when the server is frozen.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createLocker,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { type PrivateRedis, startRedis } from '../../helpers/redis-server.js';

const unique = () => `waiting-${process.pid}-${Math.random().toString(36).slice(2)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('release notifications', () => {
  it('wakes a waiter whose subscription was not live yet when the release came', async () => {
    const gaps: number[] = [];
    for (let i = 0; i < 24; i++) {
      const key = unique();
      const a = createLocker(REDIS_URL);
      const b = createLocker(REDIS_URL);
      await b.inspect(key); // b's command connection is up; its subscriber is not.
      const lease = await a.acquire(key);
      const waiting = b.acquire(key);
      await sleep(3);
      const releasedAt = performance.now();
      await lease.release();
      const granted = await waiting;
      gaps.push(performance.now() - releasedAt);
      await granted.release();
      await a.close();
      await b.close();
    }
    // Without the fix some of these took the ~2 s poll; a notification takes milliseconds.
    expect(Math.max(...gaps)).toBeLessThan(1000);
  });

  it('hands the key over to 20 local waiters in turn with no listener-leak warning', async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    const key = unique();
    const locker = createLocker(REDIS_URL);
    try {
      const first = await locker.acquire(key);
      let order = 0;
      const done = Array.from({ length: 20 }, () =>
        locker.withLock(key, async () => {
          order += 1;
          await sleep(2);
        }),
      );
      await sleep(100);
      await first.release();
      await Promise.all(done);
      expect(order).toBe(20);
      await sleep(50);
      expect(warnings.map((w) => w.name)).not.toContain('MaxListenersExceededWarning');
    } finally {
      process.off('warning', onWarning);
      await locker.close();
    }
  });
});

describe('close() with a frozen server', () => {
  let redis: PrivateRedis;
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('returns within seconds although the subscriber connection gets no answer', async () => {
    const key = unique();
    const a: Locker = createLocker(`${redis.url}?commandTimeoutMs=1000`, { ttlMs: 5000 });
    const b: Locker = createLocker(`${redis.url}?commandTimeoutMs=1000`, { ttlMs: 5000 });
    const held = await a.acquire(key);
    const waiting = b.acquire(key).catch((e: unknown) => e);
    await sleep(200); // b waits on the release channel: its subscriber exists.
    redis.pause();
    try {
      const started = performance.now();
      await b.close();
      expect(performance.now() - started).toBeLessThan(5000);
      expect(await waiting).toBeInstanceOf(LockTimeoutError);
    } finally {
      redis.resume();
    }
    await held.release();
    await a.close();
  });
});
