/**
 * A node-redis Cluster client (`createCluster` of the `redis` package) given to the Redis
 * backend: its leases live on keys of different slots, so their renewals must not go as one
 * script call (CROSSSLOT). Before the adapter told a node-redis cluster apart, every lease was
 * lost at its first renewal.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { createCluster } from 'redis';
import { expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { CLUSTER_PORT_BASE } from '../../helpers/engines.js';

it('node-redis Cluster client: leases on keys of different slots survive their renewals', async () => {
  const cluster = createCluster({
    rootNodes: [{ url: `redis://127.0.0.1:${CLUSTER_PORT_BASE + 1}` }],
  });
  cluster.on('error', () => undefined);
  await cluster.connect();
  const backend = createRedisBackend({
    client: cluster as never,
    prefix: `fencelock-it-queue-${randomBytes(3).toString('hex')}`,
  });
  const locker = createLocker(backend);
  const lost: unknown[] = [];
  try {
    const leases: Lease[] = [];
    for (let i = 0; i < 10; i++) leases.push(await locker.acquire(`nrc-${i}`, { ttlMs: 900 }));
    for (const l of leases) l.signal.addEventListener('abort', () => lost.push(l.signal.reason));
    await delay(1_500);
    expect(lost).toEqual([]);
    for (const l of leases) await l.release();
  } finally {
    await locker.close();
    await cluster.close();
  }
});
