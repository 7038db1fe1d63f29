/**
 * The backend contract on Redlock over the 5 independent Redis nodes of `scripts/services.sh`.
 * Every run uses its own key prefix.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll } from 'vitest';
import { createRedlockBackend } from '../../packages/fencelock/src/backends/redlock/index.js';
import { DEFAULT_NODE_TIMEOUT_MS } from '../../packages/fencelock/src/backends/redlock/url.js';
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
    storeUrl: `redlock://${REDLOCK_NODE_URLS.map((u) => u.replace('redis://', '')).join(',')}?prefix=${prefix}`,
    // Every node takes the TTL in milliseconds; tokens are the highest node clock in µs (or a
    // counter + 1), so not consecutive, and each node's counter outlives its lock key.
    ttlGranularityMs: 1,
    minTtlMs: 1,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: true,
    // The engine loses the lock: the key is deleted on every node, twice. A node that answered
    // the grant after its vote was decided may still set the key (with its own token, until the
    // background settle) up to the per-node timeout later, which would make a renewal there
    // answer "not owner" instead of "not held".
    deleteKey: async (key) => {
      const remove = () =>
        Promise.all(adminClients().map((admin) => admin.del(backend.keysOf(key).lock)));
      await remove();
      await delay(DEFAULT_NODE_TIMEOUT_MS);
      await remove();
    },
  };
});
