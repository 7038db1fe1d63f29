/**
 * Fair waiting on Redis with `notifications: false`: such a waiter still stands in the line,
 * so one that came first is not starved by notified waiters that keep re-taking the key (before,
 * it never joined the line and could not get a free key while anyone was in it).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';

const prefix = `fencelock-it-queue-${randomBytes(4).toString('hex')}`;
const admin = new Redis(REDIS_URL);
afterAll(async () => {
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

it('a notifications:false waiter that came first is not starved by queued waiters', async () => {
  const key = `starve-${randomBytes(4).toString('hex')}`;
  const polling = createLocker(
    createRedisBackend({ url: REDIS_URL, prefix, notifications: false }),
  );
  const queued: Locker[] = Array.from({ length: 3 }, () =>
    createLocker(createRedisBackend({ url: REDIS_URL, prefix })),
  );
  const holder = await queued[0]!.acquire(key, { ttlMs: 10_000 });
  const first = polling.acquire(key, { waitMs: 6_000 }).then(
    async (l) => {
      await l.release();
      return 'granted';
    },
    (e) => (e as Error).name,
  );
  await delay(200);
  let stop = false;
  const loops = queued.map(async (l) => {
    while (!stop) {
      const lease = await l.acquire(key, { waitMs: 10_000 }).catch(() => null);
      await delay(30);
      await lease?.release();
    }
  });
  await delay(100);
  await holder.release();
  const outcome = await first;
  stop = true;
  await Promise.all(loops);
  await polling.close();
  await Promise.all(queued.map((l) => l.close()));
  expect(outcome).toBe('granted');
});
