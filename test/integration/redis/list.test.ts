/**
 * `list` on Redis (listing.ts, list.lua), beyond the contract: paging over many more held objects
 * than a page, each page one `SCAN` with `COUNT` = `pageSize` and one script call (counted on the
 * client), never more entries than `pageSize`; a prefix with glob characters and user keys holding
 * `{`, `}` and `:` taken literally; a cursor from elsewhere refused before any command; only live
 * holders and line entries by Redis `TIME` (expired ones still in the sorted sets and the line are
 * left out); a Cluster scanned primary by primary (ioredis and node-redis clients); Sentinel
 * tokens carrying the failover epoch.
 */
import { randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import { semaphoreKeys } from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import type { ListedLock, ListPage } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  InvalidArgumentError,
  type Lease,
  type Locker,
} from '../../../packages/fencelock/src/index.js';
import {
  CLUSTER_PORT_BASE,
  CLUSTER_URL,
  REDIS_URL,
  SENTINEL_DATA_PORT_BASE,
  SENTINEL_URL,
} from '../../helpers/engines.js';

const prefix = `fencelock-it-list-${randomBytes(4).toString('hex')}`;
const admin = new Redis(REDIS_URL, { lazyConnect: true });
const cleanups: (() => Promise<unknown>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

/** The commands an ioredis client sends, by name and arguments. */
interface Sent {
  readonly name: string;
  readonly args: readonly unknown[];
}

/** An ioredis client whose commands are recorded in `sent`. */
function recordedClient(): { client: Redis; sent: Sent[] } {
  const client = new Redis(REDIS_URL);
  const sent: Sent[] = [];
  const original = client.sendCommand.bind(client);
  client.sendCommand = ((command: Sent) => {
    sent.push({ name: command.name, args: [...command.args] });
    return original(command as never);
  }) as typeof client.sendCommand;
  cleanups.push(async () => client.quit());
  return { client, sent };
}

function newLocker(backend: RedisBackend): Locker {
  const locker = createLocker(backend);
  cleanups.push(() => locker.close());
  return locker;
}

/** Every page of a listing, through `Backend.list` itself. */
async function pages(
  backend: RedisBackend,
  listPrefix: string,
  pageSize: number,
  onPage?: (page: ListPage) => void,
): Promise<ListedLock[]> {
  const entries: ListedLock[] = [];
  let cursor: string | null = null;
  do {
    const page: ListPage = await backend.list({ prefix: listPrefix, cursor, pageSize });
    onPage?.(page);
    entries.push(...page.entries);
    cursor = page.cursor;
  } while (cursor !== null);
  return entries;
}

const idOf = (e: { key: string; mode: string }) => `${e.mode} ${e.key}`;

describe('Redis list: one node', () => {
  it('pages over many more objects than a page: each once, one SCAN (COUNT pageSize) and one script per page', async () => {
    const { client, sent } = recordedClient();
    const backend = createRedisBackend({ client, prefix });
    const locker = newLocker(backend);
    const reader = newLocker(createRedisBackend({ url: REDIS_URL, prefix }));
    const u = 'paging:';
    const leases: Lease[] = [];
    const expected: string[] = [];
    for (let i = 0; i < 90; i++) {
      leases.push(await locker.acquire(`${u}w${i}`, { ttlMs: 30_000 }));
      expected.push(`write ${u}w${i}`);
    }
    for (let i = 0; i < 20; i++) {
      leases.push(await locker.semaphore(`${u}w${i}`, { permits: 2 }).acquire({ ttlMs: 30_000 }));
      expected.push(`permits ${u}w${i}`);
    }
    for (let i = 0; i < 15; i++) {
      leases.push(await locker.acquire(`${u}r${i}`, { ttlMs: 30_000, mode: 'read' }));
      leases.push(await reader.acquire(`${u}r${i}`, { ttlMs: 30_000, mode: 'read' }));
      expected.push(`read ${u}r${i}`);
    }
    // A held key outside the prefix.
    leases.push(await locker.acquire('paging-outside', { ttlMs: 30_000 }));

    for (const pageSize of [7, 1]) {
      const perPage: Sent[][] = [];
      let overflowCursors = 0;
      const entries = await pages(backend, u, pageSize, (page) => {
        expect(page.entries.length).toBeLessThanOrEqual(pageSize);
        if (page.cursor !== null && /^r:\d+:/.test(page.cursor)) overflowCursors += 1;
      });
      // Group what was sent by page: each page starts with its SCAN.
      for (const command of sent.splice(0)) {
        if (command.name === 'scan') perPage.push([]);
        perPage.at(-1)?.push(command);
      }
      expect(entries.map(idOf).sort()).toEqual([...expected].sort());
      for (const page of perPage) {
        const [scan, ...rest] = page;
        expect(scan!.args.map(String)).toEqual([
          expect.any(String),
          'MATCH',
          `${prefix}:{paging:*`,
          'COUNT',
          String(pageSize),
        ]);
        // At most one script call, over at most pageSize objects (five keys each).
        expect(rest.every((c) => c.name === 'evalsha' || c.name === 'eval')).toBe(true);
        expect(rest.filter((c) => c.name === 'evalsha').length).toBeLessThanOrEqual(1);
        for (const c of rest) expect(Number(c.args[1])).toBeLessThanOrEqual(5 * pageSize);
      }
      // With pageSize 1, SCAN replies holding more than one object are split (`r:<scan>:<after>`).
      if (pageSize === 1) expect(overflowCursors).toBeGreaterThan(0);
    }
    await Promise.all(leases.map((l) => l.release()));
    expect(await pages(backend, u, 50)).toEqual([]);
  });

  it('a prefix with glob characters, and user keys holding `{`, `}` and `:`, are taken literally', async () => {
    const { client, sent } = recordedClient();
    const backend = createRedisBackend({ client, prefix });
    const locker = newLocker(backend);
    const other = newLocker(createRedisBackend({ url: REDIS_URL, prefix }));
    const u = 'glob:';
    const writes = [
      'a*',
      'a*b',
      'aXb',
      'a?',
      'ab',
      '[ab]',
      'a',
      '\\x',
      'k}:lock',
      'k}:semaphore:holders',
      '{x}',
      'k}:readers}:lock',
    ].map((k) => u + k);
    const leases = await Promise.all(writes.map((k) => locker.acquire(k, { ttlMs: 30_000 })));
    leases.push(await locker.acquire(`${u}k}:readers`, { ttlMs: 30_000, mode: 'read' }));
    leases.push(await other.acquire(`${u}k}:readers`, { ttlMs: 30_000, mode: 'read' }));
    leases.push(await locker.semaphore(`${u}k`, { permits: 2 }).acquire({ ttlMs: 30_000 }));
    leases.push(await locker.semaphore(`${u}k}`, { permits: 2 }).acquire({ ttlMs: 30_000 }));

    const listed = async (p: string) => (await pages(backend, u + p, 3)).map(idOf).sort();
    sent.splice(0);
    expect(await listed('a*')).toEqual([`write ${u}a*`, `write ${u}a*b`]);
    // SCAN itself matches the prefix literally (its glob characters escaped).
    expect(sent.find((c) => c.name === 'scan')!.args[2]).toBe(`${prefix}:{glob:a\\**`);
    await listed('[ab]\\?');
    expect(sent.filter((c) => c.name === 'scan').at(-1)!.args[2]).toBe(
      `${prefix}:{glob:\\[ab\\]\\\\\\?*`,
    );
    expect(await listed('a?')).toEqual([`write ${u}a?`]);
    expect(await listed('[ab]')).toEqual([`write ${u}[ab]`]);
    expect(await listed('\\')).toEqual([`write ${u}\\x`]);
    expect(await listed('k}')).toEqual(
      [
        `permits ${u}k}`,
        `read ${u}k}:readers`,
        `write ${u}k}:lock`,
        `write ${u}k}:readers}:lock`,
        `write ${u}k}:semaphore:holders`,
      ].sort(),
    );
    const all = await pages(backend, u, 4);
    expect(all.map(idOf).sort()).toEqual(
      [
        ...writes.map((k) => `write ${k}`),
        `read ${u}k}:readers`,
        `permits ${u}k`,
        `permits ${u}k}`,
      ].sort(),
    );
    const readers = all.find((e) => e.mode === 'read')!;
    expect(readers.holders.map((h) => h.fencingToken)).toEqual(
      leases.slice(-4, -2).map((l) => l.fencingToken),
    );
    await Promise.all(leases.map((l) => l.release()));
  });

  it('a cursor from elsewhere is an InvalidArgumentError before any command', async () => {
    const { client, sent } = recordedClient();
    const backend = createRedisBackend({ client, prefix });
    for (const cursor of [
      'x',
      'l',
      'l:key',
      'p:key',
      'r:0',
      'r:-1',
      'r:1:',
      'r:12:not-a-listed-name',
      `r:12:other:{k}:lock`,
      `r:12:${prefix}:{k}:fence`,
      'rc:0:12',
      `rc:1:0:${prefix}:{k}:lock`,
    ]) {
      const refused = await backend
        .list({ prefix: '', cursor, pageSize: 10 })
        .catch((e: unknown) => e);
      expect(refused, cursor).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe('cursor');
    }
    expect(sent).toEqual([]);
    // A cursor it made, with the `after` part, is taken.
    await expect(
      backend.list({ prefix: '', cursor: `r:0:${prefix}:{k}:lock`, pageSize: 10 }),
    ).resolves.toMatchObject({ entries: expect.any(Array) });
  });

  it('only live holders and waiters by Redis TIME; a writer and its own reader (downgrade) once, as the writer', async () => {
    const backend = createRedisBackend({ url: REDIS_URL, prefix });
    const [a, b] = [newLocker(backend), newLocker(createRedisBackend({ url: REDIS_URL, prefix }))];
    const u = 'live:';
    const readers = [
      await a.acquire(`${u}r`, { ttlMs: 30_000, mode: 'read' }),
      await b.acquire(`${u}r`, { ttlMs: 30_000, mode: 'read' }),
    ];
    const permits = [
      await a.semaphore(`${u}p`, { permits: 3 }).acquire({ ttlMs: 30_000 }),
      await b.semaphore(`${u}p`, { permits: 3 }).acquire({ ttlMs: 30_000 }),
    ];
    const writer = await a.acquire(`${u}w`, { ttlMs: 30_000 });
    const now = Date.now();
    const k = backend.keysOf(`${u}r`);
    const s = semaphoreKeys(prefix, `${u}p`);
    const w = backend.keysOf(`${u}w`);
    // b's reader and permit ran out (not yet swept); a vanished waiter's line entry too.
    await admin.zadd(k.readers, now - 1_000, readers[1]!.owner);
    await admin.zadd(s.holders, now - 1_000, permits[1]!.owner);
    await admin.rpush(w.queue, 'gone');
    await admin.hset(w.waiters, 'gone', now - 1_000);
    await admin.zadd(s.queue, 1, 'gone');
    await admin.hset(s.waiters, 'gone', now - 1_000);
    // The writer of `w` reads it too (a downgrade's state).
    await admin.zadd(w.readers, now + 30_000, writer.owner);
    await admin.hset(w.readerTokens, writer.owner, '1');

    const entries = await pages(backend, u, 10);
    expect(entries.map(idOf).sort()).toEqual([`permits ${u}p`, `read ${u}r`, `write ${u}w`]);
    const byMode = (mode: string) => entries.find((e) => e.mode === mode)!;
    expect(byMode('read').holders).toEqual([
      {
        owner: readers[0]!.owner,
        fencingToken: readers[0]!.fencingToken,
        ttlMs: expect.any(Number),
      },
    ]);
    expect(byMode('permits')).toMatchObject({ permits: 3, waiters: 0 });
    expect(byMode('permits').holders.map((h) => h.owner)).toEqual([permits[0]!.owner]);
    expect(byMode('write')).toMatchObject({ waiters: 0 });
    expect(byMode('write').holders.map((h) => h.owner)).toEqual([writer.owner]);
    for (const e of entries) {
      for (const h of e.holders) {
        expect(h.ttlMs).toBeGreaterThan(25_000);
        expect(h.ttlMs).toBeLessThanOrEqual(30_000);
      }
    }
    await admin.del(w.readers, w.readerTokens);
    await Promise.all([...readers, ...permits, writer].map((l) => l.release().catch(() => 'gone')));
  });
});

describe('Redis list: Cluster', () => {
  it('scans each primary in turn; one script per hash slot of a page; each key once', async () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }]);
    cleanups.push(async () => cluster.quit());
    const sent: Sent[] = [];
    const original = cluster.sendCommand.bind(cluster);
    cluster.sendCommand = ((command: Sent) => {
      sent.push({ name: command.name, args: [...command.args] });
      return original(command as never);
    }) as typeof cluster.sendCommand;
    const backend = createRedisBackend({ client: cluster, prefix });
    const locker = newLocker(backend);
    const u = 'cluster:';
    const keys = Array.from({ length: 40 }, (_, i) => `${u}${i}`);
    const leases = await Promise.all(keys.map((k) => locker.acquire(k, { ttlMs: 30_000 })));
    leases.push(await locker.semaphore(`${u}0`, { permits: 2 }).acquire({ ttlMs: 30_000 }));
    sent.splice(0);

    const nodes = new Set<string>();
    const entries = await pages(backend, u, 5, (page) => {
      expect(page.entries.length).toBeLessThanOrEqual(5);
      const scripts = sent.splice(0).filter((c) => c.name === 'evalsha' || c.name === 'eval');
      expect(scripts.filter((c) => c.name === 'evalsha').length).toBeLessThanOrEqual(5);
      if (page.cursor !== null) nodes.add(/^rc:(\d+):/.exec(page.cursor)![1]!);
    });
    expect(entries.map(idOf).sort()).toEqual(
      [...keys.map((k) => `write ${k}`), `permits ${u}0`].sort(),
    );
    expect([...nodes].sort()).toEqual(['0', '1', '2']);
    // A single node's cursor is not this store's.
    await expect(backend.list({ prefix: u, cursor: 'r:12', pageSize: 5 })).rejects.toThrow(
      InvalidArgumentError,
    );
    await Promise.all(leases.map((l) => l.release()));
    expect(await pages(backend, u, 5)).toEqual([]);
  });

  it('through a node-redis Cluster client', async () => {
    const cluster = createCluster({
      rootNodes: [{ url: `redis://127.0.0.1:${CLUSTER_PORT_BASE + 1}` }],
    });
    cluster.on('error', () => undefined);
    await cluster.connect();
    cleanups.push(() => cluster.close());
    const backend = createRedisBackend({ client: cluster as never, prefix });
    const locker = newLocker(backend);
    const keys = Array.from({ length: 12 }, (_, i) => `nrc:${i}`);
    const leases = await Promise.all(keys.map((k) => locker.acquire(k, { ttlMs: 30_000 })));
    const entries = await pages(backend, 'nrc:', 4);
    expect(entries.map((e) => e.key).sort()).toEqual([...keys].sort());
    for (const e of entries) {
      const lease = leases.find((l) => l.key === e.key)!;
      expect(e.holders).toEqual([
        { owner: lease.owner, fencingToken: lease.fencingToken, ttlMs: expect.any(Number) },
      ]);
    }
    await Promise.all(leases.map((l) => l.release()));
  });

  it('a Cluster URL store lists through locker.list', async () => {
    const locker = createLocker(`${CLUSTER_URL}?prefix=${prefix}`);
    cleanups.push(() => locker.close());
    const lease = await locker.acquire('url:1', { ttlMs: 30_000 });
    const listed: ListedLock[] = [];
    for await (const e of locker.list({ prefix: 'url:' })) listed.push(e);
    expect(listed.map((e) => e.holders[0]!.fencingToken)).toEqual([lease.fencingToken]);
    await lease.release();
  });
});

describe('Redis list: Sentinel', () => {
  it('tokens carry the failover epoch, as granted', async () => {
    const primary = new Redis(SENTINEL_DATA_PORT_BASE + 1, '127.0.0.1');
    cleanups.push(async () => {
      const left = await primary.keys(`${prefix}:*`);
      if (left.length > 0) await primary.del(...left);
      primary.disconnect();
    });
    const [a, b] = [1, 2].map(() => {
      const l = createLocker(`${SENTINEL_URL}?prefix=${prefix}`);
      cleanups.push(() => l.close());
      return l;
    }) as [Locker, Locker];
    const leases = [
      await a.acquire('sentinel:w', { ttlMs: 30_000 }),
      await a.acquire('sentinel:r', { ttlMs: 30_000, mode: 'read' }),
      await b.acquire('sentinel:r', { ttlMs: 30_000, mode: 'read' }),
      await a.semaphore('sentinel:w', { permits: 2 }).acquire({ ttlMs: 30_000 }),
    ];
    const listed: ListedLock[] = [];
    for await (const e of a.list({ prefix: 'sentinel:', pageSize: 2 })) listed.push(e);
    const tokens = (mode: string) =>
      listed.find((e) => e.mode === mode)!.holders.map((h) => [h.owner, h.fencingToken]);
    expect(tokens('write')).toEqual([[leases[0]!.owner, leases[0]!.fencingToken]]);
    expect(tokens('read')).toEqual(leases.slice(1, 3).map((l) => [l.owner, l.fencingToken]));
    expect(tokens('permits')).toEqual([[leases[3]!.owner, leases[3]!.fencingToken]]);
    await Promise.all(leases.map((l) => l.release()));
  });
});
