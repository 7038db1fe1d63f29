/**
 * A dashboard listing reaches every held key under its prefix however many other keys the store
 * holds: a private Redis with 40,000 unrelated keys (SCAN returns few or no matches per page),
 * 20 held locks under the prefix, all of them in the first snapshot, which is not cut short.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { type PrivateRedis, startRedis } from '../../helpers/redis-server.js';
import { openEvents, startInProcess } from './support.js';

const UNRELATED_KEYS = 40_000;

describe('dashboard listing over a large keyspace (Redis)', () => {
  let redis: PrivateRedis;

  beforeAll(async () => {
    redis = await startRedis();
    const client = new Redis(redis.url);
    for (let start = 0; start < UNRELATED_KEYS; start += 5_000) {
      const pairs = Array.from({ length: 5_000 }, (_, i) => [`other:${start + i}`, 'x']).flat();
      await client.mset(...pairs);
    }
    expect(await client.dbsize()).toBe(UNRELATED_KEYS);
    client.disconnect();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('lists every held key under the prefix in one snapshot', async () => {
    const locker = createLocker(redis.url);
    const { sidecar, url } = await startInProcess({ store: redis.url });
    const leases: Lease[] = [];
    try {
      for (let i = 0; i < 20; i++)
        leases.push(await locker.acquire(`scan:${i}`, { ttlMs: 60_000 }));
      const stream = await openEvents(url, '/ui/events?prefix=scan:');
      try {
        await expect
          .poll(() => stream.named.find((e) => e.event === 'locks'), { timeout: 10_000 })
          .toBeDefined();
        const snapshot = stream.named.find((e) => e.event === 'locks')!.data;
        expect(snapshot.truncated).toBe(false);
        expect(snapshot.error).toBeUndefined();
        expect(snapshot.locks.map((l: { key: string }) => l.key).sort()).toEqual(
          leases.map((l) => l.key).sort(),
        );
      } finally {
        await stream.close();
      }
    } finally {
      for (const lease of leases) await lease.release();
      await sidecar.close();
      await locker.close();
    }
  });
});
