/**
 * What released lock names leave on Redis (issue 18): no key without a TTL at once, and no key at
 * all once the documented bound has passed: the fence counter's `FENCE_GRACE_MS` after the lease's
 * TTL (fence-counter.ts), which is longer than a waiter line's `QUEUE_ENTRY_TTL_MS`. On a single
 * node, on Redis Cluster (the same scripts) and on Redlock (its own grant script, with counters
 * raised by settle-token.lua), all of `scripts/services.sh`. Tokens granted after the counters
 * expired are above those granted before (the server clock decides then).
 *
 * 2,000 distinct keys by default; `FENCELOCK_IDLE_KEYS=10000` for the larger count.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/redis/backend.js';
import { FENCE_GRACE_MS } from '../../../packages/fencelock/src/backends/redis/fence-counter.js';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import {
  CLUSTER_PORT_BASE,
  CLUSTER_URL,
  REDIS_URL,
  REDLOCK_NODE_URLS,
} from '../../helpers/engines.js';

const KEY_COUNT = Number(process.env.FENCELOCK_IDLE_KEYS || 2_000);
/** Lease TTL of every grant here, ms: short, so that the bound is short. */
const TTL_MS = 300;
/** The documented bound after the last grant of a key: nothing of it is left after this. */
const BOUND_MS = Math.max(TTL_MS + FENCE_GRACE_MS, QUEUE_ENTRY_TTL_MS);
/** Keys locked at once. */
const CONCURRENCY = 50;
/** Keys that also get a waiter (a line on Redis). */
const CONTENDED = 20;

const admins: Redis[] = [];
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  for (const admin of admins) admin.disconnect();
});

interface Engine {
  readonly name: string;
  /** A fresh locker on the engine with key prefix `prefix`. */
  locker(prefix: string): Locker;
  /** Test-only connections to every server that can hold a key of the engine. */
  readonly servers: () => Redis[];
}

const servers = (urls: readonly string[]) => () => {
  const opened = urls.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
  admins.push(...opened);
  return opened;
};

const ENGINES: readonly Engine[] = [
  {
    name: 'single Redis',
    locker: (prefix) => createLocker(createRedisBackend({ url: REDIS_URL, prefix })),
    servers: servers([REDIS_URL]),
  },
  {
    name: 'Redis Cluster',
    locker: (prefix) => createLocker(createRedisBackend({ url: CLUSTER_URL, prefix })),
    servers: servers([1, 2, 3].map((n) => `redis://127.0.0.1:${CLUSTER_PORT_BASE + n}`)),
  },
  {
    name: 'Redlock',
    locker: (prefix) => createLocker(createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix })),
    servers: servers(REDLOCK_NODE_URLS),
  },
];

/** Every key under `prefix` on `nodes` (SCAN leaves out keys already expired). */
async function keysUnder(nodes: readonly Redis[], prefix: string): Promise<string[]> {
  const found: string[] = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1_000);
      found.push(...batch);
      cursor = next;
    } while (cursor !== '0');
  }
  return found;
}

/** Keys under `prefix` that never expire (PTTL −1), on any of `nodes`. */
async function keysWithoutTtl(nodes: readonly Redis[], prefix: string): Promise<string[]> {
  const immortal: string[] = [];
  for (const node of nodes) {
    const keys = await keysUnder([node], prefix);
    const pipeline = node.pipeline();
    for (const key of keys) pipeline.pttl(key);
    const ttls = (await pipeline.exec()) ?? [];
    keys.forEach((key, i) => {
      if (ttls[i]?.[1] === -1) immortal.push(key);
    });
  }
  return immortal;
}

describe.each(ENGINES)('idle keys on $name', (engine) => {
  it(`${KEY_COUNT} distinct keys locked and released leave no key without a TTL, and nothing after the bound`, async () => {
    const prefix = `fencelock-idle-${randomBytes(4).toString('hex')}`;
    const nodes = engine.servers();
    const locker = engine.locker(prefix);
    const rival = engine.locker(prefix);
    lockers.push(locker, rival);
    const names = Array.from({ length: KEY_COUNT }, (_, i) => `order:${i}`);

    /** The last token granted for each key. */
    const tokens = new Map<string, bigint>();
    for (let i = 0; i < names.length; i += CONCURRENCY) {
      await Promise.all(
        names.slice(i, i + CONCURRENCY).map(async (name, j) => {
          const lease = await locker.acquire(name, { ttlMs: TTL_MS });
          if (i + j >= CONTENDED) {
            tokens.set(name, lease.fencingToken);
            expect(await lease.release()).toBe('released');
            return;
          }
          // A waiter joins the key's line (on Redis) and is granted after the release.
          const waiting = rival.acquire(name, { ttlMs: TTL_MS, waitMs: 10_000 });
          await delay(20);
          expect(await lease.release()).toBe('released');
          const next = await waiting;
          expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
          tokens.set(name, next.fencingToken);
          expect(await next.release()).toBe('released');
        }),
      );
    }
    const lastGrantAt = performance.now();

    // At once: keys are left (the fence counters), every one with a TTL within the bound.
    const left = await keysUnder(nodes, prefix);
    expect(left.length).toBeGreaterThanOrEqual(KEY_COUNT);
    expect(await keysWithoutTtl(nodes, prefix)).toEqual([]);
    const newest = names.at(-1)!;
    const inspected = await locker.inspect(newest);
    expect(inspected.holder).toBeNull();
    expect(inspected.lastFencingToken).toBe(tokens.get(newest));

    // After the bound: nothing at all.
    await delay(Math.max(0, lastGrantAt + BOUND_MS + 300 - performance.now()));
    expect(await keysUnder(nodes, prefix)).toEqual([]);
    // inspect has no record left; the next grants (of the contended keys and of the newest
    // ones) are above the tokens granted before, from the clock alone.
    expect((await locker.inspect(newest)).lastFencingToken).toBe(0n);
    for (const name of [...names.slice(0, CONTENDED), ...names.slice(-CONTENDED)]) {
      const before = tokens.get(name)!;
      const lease = await locker.acquire(name, { ttlMs: TTL_MS });
      expect(lease.fencingToken).toBeGreaterThan(before);
      expect(await lease.release()).toBe('released');
    }
  }, 120_000);
});
