/**
 * The backend contract on the single-node Redis driven through node-redis clients (the `redis`
 * package) instead of ioredis: each simulated client gets its own connected node-redis client,
 * which the backend uses and leaves open; they are closed after the suite.
 */
import { randomBytes } from 'node:crypto';
import { createClient } from 'redis';
import { afterAll } from 'vitest';
import { createRedisBackend } from '../../packages/fencelock/src/backends/redis/index.js';
import { REDIS_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const prefix = `fencelock-contract-${randomBytes(4).toString('hex')}`;
const clients: { isOpen: boolean; close(): Promise<void> }[] = [];

async function connected() {
  const client = createClient({ url: REDIS_URL });
  client.on('error', () => undefined);
  await client.connect();
  clients.push(client);
  return client;
}

afterAll(async () => {
  const admin = await connected();
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(keys);
  await Promise.all(clients.map((c) => (c.isOpen ? c.close() : undefined)));
});

describeBackend('redis via node-redis', async () => {
  const client = await connected();
  const backend = createRedisBackend({ client, prefix });
  return {
    backend,
    // Other processes open the same keys through ioredis (a store URL names no client).
    storeUrl: `${REDIS_URL}?prefix=${prefix}`,
    ttlGranularityMs: 1,
    minTtlMs: 1,
    // Tokens from the server clock in µs (not consecutive), as with ioredis.
    consecutiveTokens: false,
    lastTokenOutlivesHolder: true,
    deleteKey: async (key) => {
      await client.del(backend.keysOf(key).lock);
    },
    closeClient: async () => {
      if (client.isOpen) await client.close();
    },
  };
});
