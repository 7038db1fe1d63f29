/**
 * Fencing tokens across a restart of a Redis without persistence (issue 18): the single node of
 * `scripts/services.sh` is killed and started again empty (`services.sh redis-server
 * restart-empty`); the next grant of a key is above every token granted before, because the
 * token is never below the server's clock in µs. The lease held across the restart is lost (the
 * key went with the data), and its late renewal says so.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';

const SERVICES_SH = fileURLToPath(new URL('../../../scripts/services.sh', import.meta.url));
const prefix = `fencelock-it-restart-${randomBytes(3).toString('hex')}`;
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
});

function newLocker(): Locker {
  const locker = createLocker(createRedisBackend({ url: REDIS_URL, prefix }));
  lockers.push(locker);
  return locker;
}

describe('single Redis restarted empty', () => {
  it('grants tokens above every token granted before the restart', async () => {
    const before = newLocker();
    const held = await before.acquire('restart:held', { ttlMs: 30_000, autoRenew: false });
    const released = await before.acquire('restart:released', { ttlMs: 30_000 });
    expect(await released.release()).toBe('released');

    execFileSync(SERVICES_SH, ['redis-server', 'restart-empty'], { stdio: 'ignore' });
    const admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
    try {
      expect(await admin.dbsize()).toBe(0);
    } finally {
      admin.disconnect();
    }

    const after = newLocker();
    // The held key went with the data: another owner is granted at once, above the old holder.
    const next = await after.acquire('restart:held', { ttlMs: 30_000, waitMs: 0 });
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    const again = await after.acquire('restart:released', { ttlMs: 30_000, waitMs: 0 });
    expect(again.fencingToken).toBeGreaterThan(released.fencingToken);
    expect((await after.inspect('restart:held')).lastFencingToken).toBe(next.fencingToken);
    expect(await next.release()).toBe('released');
    expect(await again.release()).toBe('released');
  }, 30_000);
});
