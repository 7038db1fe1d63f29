/**
 * The backend contract on Redlock over the 5 independent Redis nodes of `scripts/services.sh`.
 * Every run uses its own key prefix.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll } from 'vitest';
import { createRedlockBackend } from '../../packages/fencelock/src/backends/redlock/index.js';
import { REDLOCK_NODE_URLS } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const prefix = `fencelock-contract-${randomBytes(4).toString('hex')}`;

/** Test-only connections to every node for the engine hooks (never used by a backend). */
let admins: Redis[] | undefined;
function adminClients(): Redis[] {
  admins ??= REDLOCK_NODE_URLS.map((url) => new Redis(url));
  return admins;
}

afterAll(async () => {
  if (admins === undefined) return;
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
});

describeBackend('redlock', () => {
  const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
  return {
    backend,
    // Every node takes the TTL in milliseconds; tokens are the highest node clock in µs (or a
    // counter + 1), so not consecutive, and each node's counter outlives its lock key.
    ttlGranularityMs: 1,
    minTtlMs: 1,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: true,
    // The engine loses the lock: the key is deleted on every node.
    deleteKey: async (key) => {
      await Promise.all(adminClients().map((admin) => admin.del(backend.keysOf(key).lock)));
    },
  };
});
