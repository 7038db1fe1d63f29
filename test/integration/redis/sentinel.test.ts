/**
 * The Redis backend on a Sentinel deployment (`scripts/services.sh up sentinel`: a primary, one
 * replica, three Sentinels watching "fencelock"): the client finds the primary through the
 * Sentinels, and `minReplicas` makes a grant wait for replicas (`WAIT`) and fail, released,
 * when too few acknowledge it.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { counterOf } from '../../../packages/fencelock/src/backends/redis/failover-epoch.js';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { BackendError, createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { SENTINEL_DATA_PORT_BASE, SENTINEL_URL } from '../../helpers/engines.js';

const prefix = `fencelock-it-sentinel-${randomBytes(4).toString('hex')}`;
const primary = new Redis(SENTINEL_DATA_PORT_BASE + 1, '127.0.0.1', { lazyConnect: true });
const replica = new Redis(SENTINEL_DATA_PORT_BASE + 2, '127.0.0.1', { lazyConnect: true });
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  const keys = await primary.keys(`${prefix}:*`);
  if (keys.length > 0) await primary.del(...keys);
  primary.disconnect();
  replica.disconnect();
});

function locker(query = ''): Locker {
  const l = createLocker(`${SENTINEL_URL}?prefix=${prefix}${query}`, { ttlMs: 5000 });
  lockers.push(l);
  return l;
}

describe('Redis through Sentinel', () => {
  it('finds the primary through the Sentinels; the grant reaches the replica', async () => {
    const l = locker('&minReplicas=1');
    const lease = await l.acquire('sentinel:basic');
    const lockKey = createRedisBackend({ url: 'redis://127.0.0.1:1', prefix }).keysOf(
      'sentinel:basic',
    ).lock;
    const expected = `${lease.owner}:${lease.fencingToken}`;
    expect(await primary.get(lockKey)).toBe(expected);
    // minReplicas=1: the grant was acknowledged by the replica before acquire returned.
    expect(await replica.get(lockKey)).toBe(expected);
    expect(await lease.release()).toBe('released');
    expect(await primary.get(lockKey)).toBeNull();
  });

  it('minReplicas above the replicas that acknowledge: acquire fails and the grant is released', async () => {
    const l = locker('&minReplicas=2&replicaTimeoutMs=100');
    const error = await l.acquire('sentinel:wait').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect(String((error as Error).message)).toMatch(/only 1 of 2 replicas acknowledged/);
    const keys = createRedisBackend({ url: 'redis://127.0.0.1:1', prefix }).keysOf('sentinel:wait');
    expect(await primary.get(keys.lock)).toBeNull();
    // The token was spent (the counter moved) but nobody holds the key: the next grant works,
    // with a counter above the spent one (the token is `epoch × 2^53 + counter`).
    const spent = BigInt((await primary.get(keys.fence)) ?? '0');
    expect(spent).toBeGreaterThan(0n);
    const ok = await locker().acquire('sentinel:wait');
    expect(counterOf(ok.fencingToken)).toBeGreaterThan(spent);
    expect(await ok.release()).toBe('released');
  });

  it('rejects a malformed Sentinel URL before any connection', () => {
    expect(() => createLocker('redis+sentinel://127.0.0.1:26411')).toThrow(/primaryName/);
    expect(() => createLocker('redis+sentinel://127.0.0.1/fencelock')).toThrow(/host:port/);
    expect(() => createLocker(`${SENTINEL_URL}?minReplicas=-1`)).toThrow(/minReplicas/);
  });
});
