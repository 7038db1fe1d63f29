/**
 * `list` on ZooKeeper, what the contract cases cannot see: paging over more keys than a page
 * (locks, then semaphores, in node-name order), the prefix taken literally through the key
 * encoding, the engine requests per page counted at the native client, a cursor from elsewhere
 * refused before any request, and the layout: nodes fencelock did not write, empty key nodes,
 * a line read again when a holder's node goes between the reads, and where `ttlMs` comes from.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import {
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  type ZkSession,
  ZookeeperBackend,
} from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import { listPage } from '../../../packages/fencelock/src/backends/zookeeper/listing.js';
import type {
  ListedLock,
  ListPage,
  ListRequest,
} from '../../../packages/fencelock/src/core/backend.js';
import { createLocker, InvalidArgumentError } from '../../../packages/fencelock/src/index.js';
import { children, useNamespace, ZK_HOSTS } from './support.js';

const require = createRequire(import.meta.url);
const NativeClient = require('zookeeper') as NativeZooKeeperClass;
const ns = useNamespace('list');

/** Persistent nodes (`CreateMode.PERSISTENT`). */
const PERSISTENT = 0;

/** One request of the native client: its method and path. */
interface Request {
  readonly what: string;
  readonly path: string;
}

/** A backend on a native client class that logs every request (and counts clients made). */
function countingBackend(): {
  backend: ZookeeperBackend;
  requests: Request[];
  clients: () => number;
} {
  const requests: Request[] = [];
  let clients = 0;
  const Client = class extends NativeClient {
    constructor(config: object) {
      super(config);
      clients += 1;
    }
    override a_get_children(...args: Parameters<NativeZooKeeper['a_get_children']>) {
      requests.push({ what: 'getChildren', path: args[0] });
      return super.a_get_children(...args);
    }
    override a_get(...args: Parameters<NativeZooKeeper['a_get']>) {
      requests.push({ what: 'getData', path: args[0] });
      return super.a_get(...args);
    }
    override a_exists(...args: Parameters<NativeZooKeeper['a_exists']>) {
      // The session heartbeat and stall nudge (`exists /`) are no listing traffic.
      if (args[0] !== '/') requests.push({ what: 'exists', path: args[0] });
      return super.a_exists(...args);
    }
    override a_sync(...args: Parameters<NativeZooKeeper['a_sync']>) {
      requests.push({ what: 'sync', path: args[0] });
      return super.a_sync(...args);
    }
  };
  const backend = ns.track(
    new ZookeeperBackend(Client, {
      connect: ZK_HOSTS,
      namespace: ns.namespace,
      connectTimeoutMs: 10_000,
      suspended: 'lose',
    }),
  );
  return { backend, requests, clients: () => clients };
}

/** Every page from the first, with the cursors the backend handed out. */
async function allPages(
  list: (request: ListRequest) => Promise<ListPage>,
  prefix: string,
  pageSize: number,
): Promise<{ entries: ListedLock[]; cursors: (string | null)[] }> {
  const entries: ListedLock[] = [];
  const cursors: (string | null)[] = [];
  let cursor: string | null = null;
  do {
    const page = await list({ prefix, cursor, pageSize });
    entries.push(...page.entries);
    cursor = page.cursor;
    cursors.push(cursor);
  } while (cursor !== null);
  return { entries, cursors };
}

describe('zookeeper: list', () => {
  it('pages over more keys than a page: locks, then semaphores, each once, in node-name order', async () => {
    const locker = ns.locker({ ttlMs: 10_000 });
    const prefix = 'paging:';
    const lockKeys = Array.from(
      { length: 11 },
      (_, i) => `${prefix}k${String(i).padStart(2, '0')}`,
    );
    const semaphoreKeys = lockKeys.slice(0, 6);
    const leases = await Promise.all(lockKeys.map((key) => locker.acquire(key)));
    const permits = await Promise.all(
      semaphoreKeys.map((key) => locker.semaphore(key, { permits: 2 }).acquire()),
    );
    const backend = ns.backend();

    const { entries, cursors } = await allPages((r) => backend.list(r), prefix, 4);
    // 11 locks and 6 semaphores in pages of 4: the fourth page ends the locks and starts the
    // semaphores (3 + 1), the last is short and ends with a null cursor.
    expect(cursors).toEqual([
      'zl:paging%3Ak03',
      'zl:paging%3Ak07',
      'zp:paging%3Ak00',
      'zp:paging%3Ak04',
      null,
    ]);
    expect(entries.map((e) => [e.mode, e.key])).toEqual([
      ...lockKeys.map((key) => ['write', key]),
      ...semaphoreKeys.map((key) => ['permits', key]),
    ]);
    expect(entries.slice(0, 11).map((e) => e.holders[0]!.fencingToken)).toEqual(
      leases.map((l) => l.fencingToken),
    );
    expect(entries.slice(11).map((e) => [e.permits, e.holders[0]!.fencingToken])).toEqual(
      permits.map((p) => [2, p.fencingToken]),
    );

    // A page of exactly the locks left moves on to the semaphores' part by its cursor.
    const rest = await backend.list({ prefix, cursor: 'zl:paging%3Ak07', pageSize: 3 });
    expect(rest.entries.map((e) => e.key)).toEqual(lockKeys.slice(8));
    expect(rest.cursor).toBe('zp');
    await Promise.all([...leases, ...permits].map((l) => l.release()));
  });

  it('takes the prefix literally through the key encoding (glob, LIKE and URI characters)', async () => {
    const locker = ns.locker({ ttlMs: 10_000 });
    const base = 'lit:';
    const inside = [`${base}.%*?[x]_1`, `${base}.%*?[x]_2/é`];
    // `%2E` is how a dot is spelled in node names, `%25` a percent sign: keys that hold those
    // texts must not pass for keys with a dot or a percent sign.
    const outside = [`${base}%2E%25*?[x]_1`, `${base}a%*?[x]_1`, `${base}.%*?x_1`, `${base}.`];
    const leases = await Promise.all([...inside, ...outside].map((key) => locker.acquire(key)));
    const listed: string[] = [];
    for await (const entry of locker.list({ prefix: `${base}.%*?[x]_`, pageSize: 1 })) {
      listed.push(entry.key);
    }
    expect(listed).toEqual(inside);
    const all: string[] = [];
    for await (const entry of locker.list({ prefix: base })) all.push(entry.key);
    expect(all.sort()).toEqual([...inside, ...outside].sort());
    await Promise.all(leases.map((l) => l.release()));
  });

  it('reads at most pageSize key lines per page, one getData per holder, after one sync', async () => {
    const holder = ns.locker({ ttlMs: 10_000 });
    const prefix = 'bound:';
    const keys = Array.from({ length: 12 }, (_, i) => `${prefix}${i}`);
    const leases = await Promise.all(keys.map((key) => holder.acquire(key)));
    // Keys outside the prefix are never read beyond the parent's children.
    const others = await Promise.all(
      Array.from({ length: 12 }, (_, i) => holder.acquire(`other:${i}`)),
    );
    const readers = [
      await holder.acquire(`${prefix}r`, { mode: 'read' }),
      await ns.locker({ ttlMs: 10_000 }).acquire(`${prefix}r`, { mode: 'read' }),
    ];
    const { backend, requests } = countingBackend();
    await backend.session(30_000);

    const pageSize = 5;
    let cursor: string | null = null;
    let pages = 0;
    let listed = 0;
    do {
      requests.length = 0;
      const page: ListPage = await backend.list({ prefix, cursor, pageSize });
      pages += 1;
      listed += page.entries.length;
      const lines = requests.filter(
        (r) => r.what === 'getChildren' && r.path.split('/').length === 4,
      );
      const parents = requests.filter(
        (r) => r.what === 'getChildren' && r.path.split('/').length === 3,
      );
      const holders = page.entries.reduce((n, e) => n + e.holders.length, 0);
      expect(lines.length).toBeLessThanOrEqual(pageSize);
      expect(lines.every((r) => r.path.includes('/bound%3A'))).toBe(true);
      expect(parents.length).toBeLessThanOrEqual(2);
      expect(requests.filter((r) => r.what === 'getData')).toHaveLength(holders);
      expect(requests.filter((r) => r.what === 'sync')).toHaveLength(1);
      expect(requests.filter((r) => r.what === 'exists')).toHaveLength(0);
      cursor = page.cursor;
    } while (cursor !== null);
    // 13 keys (12 locks and a read lock) in pages of 5, then the (empty) semaphores' part.
    expect(listed).toBe(13);
    expect(pages).toBe(3);
    await Promise.all([...leases, ...others, ...readers].map((l) => l.release()));
  });

  it('lists nothing on a store whose namespace node does not exist yet', async () => {
    const empty = ns.track(
      new ZookeeperBackend(NativeClient, {
        connect: ZK_HOSTS,
        namespace: `${ns.namespace}-never-written`,
        connectTimeoutMs: 10_000,
        suspended: 'lose',
      }),
    );
    expect(await empty.list({ prefix: '', cursor: null, pageSize: 10 })).toEqual({
      entries: [],
      cursor: null,
    });
  });

  it('refuses a cursor it did not make before any engine request', async () => {
    const { backend, requests, clients } = countingBackend();
    for (const cursor of [
      'l',
      'p:x',
      'l:jobs',
      'zq',
      'zl:',
      'zl:a.b',
      'zl:a%2e',
      'zp:%E0',
      'zlx',
    ]) {
      const refused = await backend.list({ prefix: '', cursor, pageSize: 10 }).catch((e) => e);
      expect(refused, cursor).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe('cursor');
    }
    expect(requests).toEqual([]);
    expect(clients()).toBe(0);
  });

  it('skips nodes fencelock did not write and key nodes without a holder', async () => {
    const locker = ns.locker({ ttlMs: 10_000 });
    const lease = await locker.acquire('layout:held');
    const locks = `/${ns.namespace}/locks`;
    // A name no key encodes to (a dot is `%2E` in node names) with a contender-shaped child, a
    // key node with only a foreign child, and an empty key node.
    for (const path of [
      `${locks}/layout%3A.x`,
      `${locks}/layout%3A.x/_c_${'a'.repeat(32)}-w-0000000000`,
      `${locks}/layout%3Aforeign`,
      `${locks}/layout%3Aforeign/_c_abc-w-0000000000`,
      `${locks}/layout%3Aempty`,
    ]) {
      await ns.admin.create(path, '', PERSISTENT);
    }
    const entries: ListedLock[] = [];
    for await (const entry of locker.list({ prefix: 'layout:' })) entries.push(entry);
    expect(entries.map((e) => e.key)).toEqual(['layout:held']);
    expect(entries[0]!.holders.map((h) => h.fencingToken)).toEqual([lease.fencingToken]);
    await lease.release();
  });

  it('a read lock lists its readers ahead of the first writer; the rest are waiters', async () => {
    const [a, b, c, d] = Array.from({ length: 4 }, () => ns.locker({ ttlMs: 10_000 }));
    const key = 'rw:key';
    const r1 = await a!.acquire(key, { mode: 'read' });
    const r2 = await b!.acquire(key, { mode: 'read' });
    const writer = c!.acquire(key, { waitMs: 20_000 });
    // A reader behind the waiting writer waits too (a reader waits for earlier writers).
    const dir = ns.backend().dirOf(key);
    for (let i = 0; (await children(ns.admin, dir)).length < 3; i++) {
      if (i > 200) throw new Error('the writer never joined the line');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const late = d!.acquire(key, { mode: 'read', waitMs: 20_000 });
    for (let i = 0; (await children(ns.admin, dir)).length < 4; i++) {
      if (i > 200) throw new Error('the waiters never joined the line');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const page = await ns.backend().list({ prefix: key, cursor: null, pageSize: 10 });
    expect(page.entries).toHaveLength(1);
    expect(page.entries[0]).toMatchObject({ key, mode: 'read', waiters: 2 });
    expect(page.entries[0]!.holders.map((h) => [h.owner, h.fencingToken])).toEqual([
      [r1.owner, r1.fencingToken],
      [r2.owner, r2.fencingToken],
    ]);
    await Promise.all([r1.release(), r2.release()]);
    const w = await writer;
    const next = await ns.backend().list({ prefix: key, cursor: null, pageSize: 10 });
    expect(next.entries[0]).toMatchObject({ mode: 'write', waiters: 1 });
    expect(next.entries[0]!.holders.map((h) => h.owner)).toEqual([w.owner]);
    await w.release();
    await (await late).release();
  });

  it('reads a line again when a holder node goes between the line and its getData', async () => {
    const [a, b] = [ns.locker({ ttlMs: 10_000 }), ns.locker({ ttlMs: 10_000 })];
    const key = 'churn:key';
    const first = await a.acquire(key);
    const second = b.acquire(key, { waitMs: 20_000 });
    const backend = ns.backend();
    const dir = backend.dirOf(key);
    for (let i = 0; (await children(ns.admin, dir)).length < 2; i++) {
      if (i > 200) throw new Error('the waiter never joined the line');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const session = await backend.session(30_000);
    let lineReads = 0;
    let deleted = false;
    // The listing's session, with the first holder's node deleted (the engine lost it) just
    // before its getData goes out.
    const racing = new Proxy(session, {
      get(target, name) {
        if (name === 'children') {
          return (path: string) => {
            if (path === dir) lineReads += 1;
            return target.children(path);
          };
        }
        if (name === 'read') {
          return async (path: string) => {
            if (!deleted) {
              deleted = true;
              await ns.admin.delete_(path, -1);
            }
            return target.read(path);
          };
        }
        const value = Reflect.get(target, name, target) as unknown;
        return typeof value === 'function' ? value.bind(target) : value;
      },
    }) as ZkSession;
    const page = await listPage(
      {
        root: `/${ns.namespace}`,
        session: async () => racing,
        call: (run) => run(),
        ownRemainingMs: () => undefined,
      },
      { prefix: key, cursor: null, pageSize: 10 },
    );
    expect(deleted).toBe(true);
    expect(lineReads).toBe(2);
    const granted = await second;
    expect(page.entries).toHaveLength(1);
    expect(page.entries[0]).toMatchObject({ key, mode: 'write', waiters: 0 });
    expect(page.entries[0]!.holders.map((h) => [h.owner, h.fencingToken])).toEqual([
      [granted.owner, granted.fencingToken],
    ]);
    expect(first.signal.aborted || (await first.release()) !== 'released').toBe(true);
    await granted.release();
  });

  it('ttlMs: the holder’s own bound in its process, the TTL written in the node elsewhere', async () => {
    const holderBackend = ns.backend();
    const holder = ns.track(createLocker(holderBackend, { ttlMs: 8_000 }));
    const lease = await holder.acquire('ttl:watchdog');
    const fixed = await holder.acquire('ttl:fixed', { ttlMs: 3_000, autoRenew: false });
    const session = await holderBackend.session(8_000);

    const own = await holderBackend.list({ prefix: 'ttl:', cursor: null, pageSize: 10 });
    const ownTtl = Object.fromEntries(own.entries.map((e) => [e.key, e.holders[0]!.ttlMs]));
    // The session's validity left, below its negotiated timeout; the lease without watchdog's
    // own expiry, below its 3 s.
    expect(ownTtl['ttl:watchdog']).toBeGreaterThan(0);
    expect(ownTtl['ttl:watchdog']).toBeLessThan(session.timeoutMs);
    expect(ownTtl['ttl:fixed']).toBeGreaterThan(0);
    expect(ownTtl['ttl:fixed']).toBeLessThanOrEqual(3_000);

    const other = await ns.backend().list({ prefix: 'ttl:', cursor: null, pageSize: 10 });
    const otherTtl = Object.fromEntries(other.entries.map((e) => [e.key, e.holders[0]!.ttlMs]));
    // Another process reads what the holder wrote: its session's negotiated timeout.
    expect(otherTtl['ttl:watchdog']).toBe(session.timeoutMs);
    await Promise.all([lease.release(), fixed.release()]);
  });
});
