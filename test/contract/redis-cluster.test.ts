/**
 * The backend contract on the real Redis Cluster of `scripts/services.sh up cluster` (three
 * primaries): the keys of one lock (lease, fencing counter, release channel) share a hash slot,
 * so each script runs on the node that owns the key. Every run uses its own key prefix.
 */
import { randomBytes } from 'node:crypto';
import { Cluster } from 'ioredis';
import { afterAll } from 'vitest';
import { createRedisBackend } from '../../packages/fencelock/src/backends/redis/index.js';
import { CLUSTER_PORT_BASE, CLUSTER_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const prefix = `fencelock-contract-${randomBytes(4).toString('hex')}`;

/** Test-only cluster client for the engine hooks (never used by a backend). */
let admin: Cluster | undefined;
function adminClient(): Cluster {
  admin ??= new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }]);
  return admin;
}

afterAll(async () => {
  if (admin === undefined) return;
  for (const node of admin.nodes('master')) {
    const keys = await node.keys(`${prefix}:*`);
    for (const key of keys) await admin.del(key);
  }
  admin.disconnect();
});

describeBackend('redis-cluster', () => {
  const backend = createRedisBackend({ url: CLUSTER_URL, prefix });
  return {
    backend,
    storeUrl: `${CLUSTER_URL}?prefix=${prefix}`,
    // As single-node Redis: millisecond TTLs and a per-key fence counter in the key's slot,
    // tokens from the server clock in µs (not consecutive), the counter outliving the lock key.
    ttlGranularityMs: 1,
    minTtlMs: 1,
    consecutiveTokens: false,
    lastTokenOutlivesHolder: true,
    deleteKey: async (key) => {
      await adminClient().del(backend.keysOf(key).lock);
    },
  };
});
