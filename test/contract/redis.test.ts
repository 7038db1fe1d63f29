/**
 * The backend contract on the real single-node Redis of `scripts/services.sh`. Every run uses its
 * own key prefix, so runs and other test files never share a key.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll } from 'vitest';
import { createRedisBackend } from '../../packages/fencelock/src/backends/redis/index.js';
import { REDIS_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const prefix = `fencelock-contract-${randomBytes(4).toString('hex')}`;

/** Test-only connection for the engine hooks (never used by a backend). */
let admin: Redis | undefined;
function adminClient(): Redis {
  admin ??= new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  return admin;
}

afterAll(async () => {
  if (admin === undefined) return;
  // Leave nothing of this run behind on the shared Redis.
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

describeBackend('redis', () => {
  const backend = createRedisBackend({ url: REDIS_URL, prefix });
  return {
    backend,
    storeUrl: `${REDIS_URL}?prefix=${prefix}`,
    // Millisecond TTLs (PX), and a per-key fence counter that DEL of the lock key leaves alone
    // (it expires FENCE_GRACE_MS after the lease's TTL); tokens are at least the server clock in
    // µs, so not consecutive.
    ttlGranularityMs: 1,
    minTtlMs: 1,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: true,
    deleteKey: async (key) => {
      await adminClient().del(backend.keysOf(key).lock);
    },
  };
});
