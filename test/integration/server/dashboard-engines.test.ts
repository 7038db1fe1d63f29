/**
 * The dashboard's data on every engine: a sidecar process per store (`fencelock serve`), its
 * `/ui/events` stream read as the page reads it. A lock acquired through the API appears in a
 * `locks` snapshot with its owner id, token and TTL, its grant in the `history` events and in
 * `GET /ui/api/history`, the grant in the `health` series of the store; once released it leaves
 * the snapshots. (The page itself is tested in Chromium over SQLite: dashboard.test.ts.)
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLUSTER_URL,
  ETCD_ENDPOINTS,
  PG_URL,
  REDIS_URL,
  REDLOCK_NODE_URLS,
  SENTINEL_URL,
  ZK_HOSTS,
} from '../../helpers/engines.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  lockPath,
  openEvents,
  type ServerProcess,
  serveStore,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);

const namespace = `fencelock-dashboard-${randomBytes(4).toString('hex')}`;
const STORES: readonly { name: string; url: string }[] = [
  { name: 'redis', url: REDIS_URL },
  { name: 'sentinel', url: SENTINEL_URL },
  { name: 'cluster', url: CLUSTER_URL },
  {
    name: 'redlock',
    url: `redlock://${REDLOCK_NODE_URLS.map((u) => u.replace('redis://', '')).join(',')}`,
  },
  {
    name: 'etcd',
    url: `etcd://${ETCD_ENDPOINTS.map((e) => e.replace('http://', '')).join(',')}/${namespace}`,
  },
  { name: 'zookeeper', url: `zk://${ZK_HOSTS}/${namespace}` },
  { name: 'postgres', url: `${PG_URL}?schema=${namespace.replaceAll('-', '_')}` },
  {
    name: 'postgres-advisory',
    url: `${PG_URL}?schema=${namespace.replaceAll('-', '_')}_adv&mode=advisory`,
  },
  { name: 'sqlite', url: `sqlite:${join(mkdtempSync(join(tmpdir(), 'fencelock-dash-')), 'l.db')}` },
];

/** Poll `check` every 25 ms until it returns a value, for at most `timeoutMs`. */
async function until<T>(check: () => T | undefined, timeoutMs: number, what: string): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const found = check();
    if (found !== undefined) return found;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe.each(STORES)('dashboard data on $name', ({ url }) => {
  let server: ServerProcess;

  beforeAll(async () => {
    server = await serveStore(url);
  });
  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
  });

  it('streams the lock live, its history and the store health; the lock leaves on release', async () => {
    const prefix = `${uniqueKey('dash-engines')}:`;
    const key = `${prefix}k`;
    const stream = await openEvents(server.url, `/ui/events?prefix=${encodeURIComponent(prefix)}`);
    try {
      expect(stream.response.status).toBe(200);
      expect(stream.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
      await until(
        () => stream.named.find((e) => e.event === 'locks'),
        10_000,
        'a first locks snapshot',
      );
      const hello = stream.named.find((e) => e.event === 'hello')!.data;
      expect(hello).toMatchObject({ prefix, bucketMs: 5_000, windowMs: 900_000 });

      const acquired = await call(server.url, lockPath(key, 'acquire'), {
        body: { owner: 'dash', ttlMs: 30_000 },
      });
      expect(acquired.status).toBe(200);
      const snapshot = await until(
        () => stream.named.find((e) => e.event === 'locks' && e.data.locks.length > 0)?.data,
        5_000,
        'the lock in a snapshot',
      );
      expect(snapshot.prefix).toBe(prefix);
      expect(snapshot.truncated).toBe(false);
      expect(snapshot.locks).toHaveLength(1);
      const [lock] = snapshot.locks;
      expect(lock).toMatchObject({ key, mode: 'write', waiters: 0 });
      expect(lock.holders).toHaveLength(1);
      expect(lock.holders[0]).toMatchObject({
        owner: acquired.body.ownerId,
        fencingToken: acquired.body.fencingToken,
      });
      expect(lock.holders[0].ttlMs).toBeGreaterThan(0);
      expect(lock.holders[0].ttlMs).toBeLessThanOrEqual(30_000);
      expect(lock.holders[0].heldForMs).toBeGreaterThanOrEqual(0);

      const told = stream.named.filter((e) => e.event === 'history').map((e) => e.data);
      expect(told).toEqual([
        {
          key,
          entry: {
            at: expect.any(Number),
            event: 'granted',
            owner: acquired.body.ownerId,
            fencingToken: acquired.body.fencingToken,
          },
        },
      ]);
      await until(
        () =>
          stream.named.find(
            (e) =>
              e.event === 'health' &&
              e.data.some((s: { points: { grantsPerSecond: number }[] }) =>
                s.points.some((p) => p.grantsPerSecond > 0),
              ),
          ),
        5_000,
        'the grant in the health series',
      );

      const released = await call(server.url, lockPath(key, 'release'), {
        body: { owner: 'dash', fencingToken: acquired.body.fencingToken },
      });
      expect(released.status).toBe(200);
      const seen = stream.named.length;
      await until(
        () =>
          stream.named.slice(seen).find((e) => e.event === 'locks' && e.data.locks.length === 0),
        5_000,
        'the lock gone from a snapshot',
      );
      const history = await call(server.url, `/ui/api/history?key=${encodeURIComponent(key)}`);
      expect(history.status).toBe(200);
      expect(history.body.entries.map((e: { event: string }) => e.event)).toEqual([
        'granted',
        'released',
      ]);
    } finally {
      await stream.close();
    }
  });
});
