/**
 * Renewals of many leases in one turn of the event loop go to Redis as one script call
 * (`renew-many.lua`), and on Redlock as one call per node (`renew-many-on-node.lua`), each lease with its own answer; and a
 * process holding thousands of Redlock leases keeps them (before batching, their renewals went
 * out as one command per lease and node, queued past the per-node timeout, and every lease was
 * lost: found by the 10,000-lease benchmark).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  renewManyScript,
  renewScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { renewManyOnNodeScript } from '../../../packages/fencelock/src/backends/redlock/scripts.js';
import type {
  AttemptRequest,
  Backend,
  LeaseRef,
} from '../../../packages/fencelock/src/core/backend.js';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL, REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const prefix = `fencelock-it-renew-batch-${randomBytes(4).toString('hex')}`;
const owner = (n: number) => randomBytes(15).toString('hex') + String(n).padStart(2, '0');
let admins: Redis[];

beforeAll(() => {
  admins = [REDIS_URL, ...REDLOCK_NODE_URLS].map((url) => new Redis(url));
});

afterAll(async () => {
  for (const admin of admins) {
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== '0');
    admin.disconnect();
  }
});

/** The EVALSHA calls a client makes from now on, by script. */
/** Counts the script calls of `client`: `many`, the batched renewal script of its backend. */
function countScripts(client: Redis, many: { sha1: string } = renewManyScript) {
  const calls: string[] = [];
  const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>;
  vi.spyOn(client, 'evalsha').mockImplementation(((...args: unknown[]) => {
    calls.push(String(args[0]));
    return evalsha(...args);
  }) as never);
  return {
    renewMany: () => calls.filter((sha) => sha === many.sha1).length,
    renewOne: () => calls.filter((sha) => sha === renewScript.sha1).length,
  };
}

/** Grant keys k0 … k<count-1> to owners of their own, straight through the backend. */
async function grantKeys(backend: Backend, count: number): Promise<LeaseRef[]> {
  const leases: LeaseRef[] = [];
  for (let n = 0; n < count; n++) {
    const request = { key: `k${n}`, owner: owner(n), ttlMs: 2_000, mode: 'write', autoRenew: true };
    const result = await backend.attempt(request as AttemptRequest);
    if (!result.granted) throw new Error('not granted');
    leases.push({ key: request.key, owner: request.owner, fencingToken: result.token });
  }
  return leases;
}

describe('renewal batching', () => {
  it('Redis: renewals of one turn are one script call, each lease with its own answer', async () => {
    const client = new Redis(REDIS_URL);
    const backend = createRedisBackend({ client, prefix: `${prefix}-single` });
    const leases = await grantKeys(backend, 5);
    // Lease 3 vanishes; lease 4's key is taken by another owner.
    await client.del(backend.keysOf('k3').lock);
    await client.set(backend.keysOf('k4').lock, `${owner(9)}:1`);
    const counted = countScripts(client);
    const results = await Promise.all(leases.map((lease) => backend.renew(lease, 60_000)));
    expect(results).toEqual([
      { ok: true, ttlMs: 60_000 },
      { ok: true, ttlMs: 60_000 },
      { ok: true, ttlMs: 60_000 },
      { ok: false, reason: 'not-held' },
      { ok: false, reason: 'not-owner' },
    ]);
    expect({ many: counted.renewMany(), one: counted.renewOne() }).toEqual({ many: 1, one: 0 });
    for (const n of [0, 1, 2]) {
      expect(await client.pttl(backend.keysOf(`k${n}`).lock)).toBeGreaterThan(50_000);
    }
    // A renewal alone in its turn is the single-lease script.
    expect(await backend.renew(leases[0]!, 30_000)).toEqual({ ok: true, ttlMs: 30_000 });
    expect(counted.renewOne()).toBe(1);
    await backend.close();
    client.disconnect();
  });

  it('Redlock: renewals of one turn are one script call per node, voted lease by lease', async () => {
    const clients = REDLOCK_NODE_URLS.map((url) => new Redis(url));
    const backend = createRedlockBackend({ nodes: clients, prefix: `${prefix}-redlock` });
    const leases = await grantKeys(backend, 4);
    // Lease 2 is gone from 3 of 5 nodes (no majority left); lease 3 only from 2 (still renewed).
    for (const client of clients.slice(0, 3)) await client.del(backend.keysOf('k2').lock);
    for (const client of clients.slice(0, 2)) await client.del(backend.keysOf('k3').lock);
    const counted = clients.map((client) => countScripts(client, renewManyOnNodeScript));
    const results = await Promise.all(leases.map((lease) => backend.renew(lease, 60_000)));
    expect(results).toEqual([
      { ok: true, ttlMs: 60_000 },
      { ok: true, ttlMs: 60_000 },
      { ok: false, reason: 'not-held' },
      { ok: true, ttlMs: 60_000 },
    ]);
    expect(counted.map((c) => [c.renewMany(), c.renewOne()])).toEqual(clients.map(() => [1, 0]));
    await backend.close();
    for (const client of clients) client.disconnect();
  });

  it('Redlock: 2,000 leases held by one process stay held through their renewals', async () => {
    const locker = createLocker(
      createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix: `${prefix}-many` }),
      { ttlMs: 3_000 },
    );
    const leases: Lease[] = [];
    for (let start = 0; start < 2_000; start += 200) {
      const chunk = Array.from({ length: 200 }, (_, i) => locker.acquire(`many:${start + i}`));
      leases.push(...(await Promise.all(chunk)));
    }
    // Two TTLs: every lease has been renewed at least twice (every ttl/3, bunched).
    await delay(6_000);
    expect(leases.filter((lease) => lease.signal.aborted).map((l) => l.signal.reason)).toEqual([]);
    const outcomes = await Promise.all(leases.map((lease) => lease.release()));
    expect(outcomes.filter((o) => o !== 'released')).toEqual([]);
    await locker.close();
  }, 60_000);
});
