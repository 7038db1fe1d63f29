/**
 * A fresh Redlock backend opens its node connections on its first vote; votes that start while
 * those connections are still being made wait for them. Found with multi-key acquires, which
 * attempt every key at once: only the first vote waited (the client's status leaves `wait` as
 * soon as `connect()` is called), and the others were sent to nodes not yet ready, which refuse
 * commands (no offline queue), so they failed with a QuorumError naming every node.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, expect, it } from 'vitest';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const prefix = `fencelock-redlock-first-${randomBytes(4).toString('hex')}`;

afterAll(async () => {
  for (const url of REDLOCK_NODE_URLS) {
    const admin = new Redis(url);
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  }
});

it('attempts made at once on a fresh backend all wait for its first connections', async () => {
  // A generous per-node timeout (it bounds the first connection too): the bug failed at once,
  // with the nodes' refusals, not by a timeout.
  const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix, nodeTimeoutMs: 2_000 });
  const locker = createLocker(backend);
  try {
    const keys = ['a', 'b', 'c', 'd'];
    const leases = await Promise.all(keys.map((key) => locker.tryAcquire(key, { ttlMs: 30_000 })));
    expect(leases.map((lease) => lease?.key)).toEqual(keys);
    const released = await Promise.all(leases.map((lease) => lease!.release()));
    expect(released).toEqual(['released', 'released', 'released', 'released']);
  } finally {
    await locker.close();
  }
});
