/**
 * Which clients the Redis and Redlock backends take: ioredis (Redis, Cluster), node-redis (the
 * `redis` package, connected by its owner), or URLs. Anything else is refused at construction
 * with an error that names what was passed, not a quorum failure later.
 */
import { createClient } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker, InvalidArgumentError } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const clients: { isOpen: boolean; close(): Promise<void> }[] = [];
afterAll(async () => {
  await Promise.all(clients.map((c) => (c.isOpen ? c.close() : undefined)));
});

describe('clients of the Redis backends', () => {
  it('Redlock over three node-redis clients grants, releases, and leaves the clients open', async () => {
    const nodes = await Promise.all(
      REDLOCK_NODE_URLS.slice(0, 3).map(async (url) => {
        const client = createClient({ url });
        client.on('error', () => undefined);
        await client.connect();
        clients.push(client);
        return client;
      }),
    );
    const backend = createRedlockBackend({
      nodes,
      prefix: `fencelock-it-node-redis-${process.pid}-${Date.now()}`,
    });
    const locker = createLocker(backend, { ttlMs: 5000 });
    const lease = await locker.acquire('node-redis:redlock');
    const info = await locker.inspect('node-redis:redlock');
    expect(info.holder?.owner).toBe(lease.owner);
    expect(info.holder?.fencingToken).toBe(lease.fencingToken);
    expect(await lease.release()).toBe('released');
    await locker.close();
    expect(nodes.every((n) => n.isOpen)).toBe(true);
  });

  it('anything else is refused at construction, naming what was passed', () => {
    const single = (client: unknown) => () => createRedisBackend({ client: client as never });
    expect(single(new Map())).toThrow(/a Map instance/);
    expect(single({ get: () => 1 })).toThrow(/a plain object/);
    expect(single({})).toThrow(InvalidArgumentError);
    const redlock = () =>
      createRedlockBackend({ nodes: [REDLOCK_NODE_URLS[0]!, REDLOCK_NODE_URLS[1]!, 42 as never] });
    expect(redlock).toThrow(/nodes\[2\].*42/);
    expect(() => createRedlockBackend({ nodes: REDLOCK_NODE_URLS.slice(0, 2) })).toThrow(
      /odd number of Redis nodes, at least 3/,
    );
  });
});
