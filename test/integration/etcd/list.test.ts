/**
 * `list` on etcd beyond the contract: paging over more keys than a page, with each page one
 * Range of at most `pageSize × 4` keys plus one `LeaseTimeToLive` per distinct lease of its
 * holders (requests counted on the client); user keys whose percent-encoding looks like
 * another's prefix; folders longer than a page's Range (many waiters, many readers, many
 * permits); keys fencelock did not write; and a cursor from elsewhere refused before any request.
 */
import { Etcd3 } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  createLocker,
  InvalidArgumentError,
  type ListedLock,
  type ListPage,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS } from '../../helpers/engines.js';
import { useNamespace, waitForCount } from './support.js';

const space = useNamespace('list');

/** One request the listing's client made: `KV.range` with its request, or another method. */
interface Sent {
  readonly what: string;
  readonly payload: Record<string, unknown>;
}

/** A backend on a client of its own whose requests are logged in `sent`. */
function countedBackend(): { backend: EtcdBackend; sent: Sent[] } {
  const sent: Sent[] = [];
  const client = new Etcd3({ hosts: [...ETCD_ENDPOINTS], dialTimeout: 5000 });
  clients.push(client);
  const pool = (client as unknown as { pool: { exec: (...args: unknown[]) => Promise<unknown> } })
    .pool;
  const exec = pool.exec.bind(pool);
  pool.exec = (service, method, payload, ...rest) => {
    sent.push({ what: `${service}.${method}`, payload: payload as Record<string, unknown> });
    return exec(service, method, payload, ...rest);
  };
  const backend = createEtcdBackend({ client, namespace: space.namespace });
  backends.push(backend);
  return { backend, sent };
}

const clients: Etcd3[] = [];
const backends: EtcdBackend[] = [];
afterAll(async () => {
  await Promise.allSettled(backends.map((b) => b.close()));
  for (const client of clients) client.close();
});

/** Every page of a listing through `backend.list`, as the core would ask for them. */
async function pages(backend: EtcdBackend, prefix: string, pageSize: number): Promise<ListPage[]> {
  const all: ListPage[] = [];
  let cursor: string | null = null;
  do {
    const page = await backend.list({ prefix, cursor, pageSize });
    all.push(page);
    cursor = page.cursor;
    if (all.length > 1_000) throw new Error('the cursor does not move');
  } while (cursor !== null);
  return all;
}

async function collect(iterable: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const entries: ListedLock[] = [];
  for await (const entry of iterable) entries.push(entry);
  return entries;
}

describe('etcd: list', () => {
  it('pages over more keys than a page, each page one bounded Range and a TTL per lease', async () => {
    const locker = space.locker({ ttlMs: 10_000 });
    const prefix = 'paged:';
    const keys = Array.from({ length: 23 }, (_, i) => `${prefix}${String(i).padStart(2, '0')}`);
    const leases = await Promise.all(keys.map((key) => locker.acquire(key)));
    const { backend, sent } = countedBackend();

    const pageSize = 5;
    let cursor: string | null = null;
    const listed: string[] = [];
    let ranges = 0;
    do {
      sent.length = 0;
      const page: ListPage = await backend.list({ prefix, cursor, pageSize });
      expect(page.entries.length).toBeLessThanOrEqual(pageSize);
      listed.push(...page.entries.map((e) => e.key));
      const kv = sent.filter((s) => s.what === 'KV.range');
      // One Range per page, limited to pageSize × 4 keys, under the prefix's range.
      expect(kv).toHaveLength(1);
      expect(Number(kv[0]!.payload.limit)).toBe(pageSize * 4);
      const part = String(kv[0]!.payload.key).includes('/semaphores/') ? 'semaphores' : 'locks';
      expect(String(kv[0]!.payload.range_end)).toBe(`${space.namespace}/${part}/paged%3B`);
      ranges += 1;
      // The locker's keys share one session: one lease asked for per page with holders.
      const ttl = sent.filter((s) => s.what === 'Lease.leaseTimeToLive');
      expect(ttl).toHaveLength(page.entries.length > 0 ? 1 : 0);
      expect(sent).toHaveLength(kv.length + ttl.length);
      cursor = page.cursor;
    } while (cursor !== null);
    expect(listed).toEqual(keys);
    // 5 pages of locks (the last one finds the end), then the semaphores' part.
    expect(ranges).toBe(6);
    await Promise.all(leases.map((l) => l.release()));
  });

  it('takes the prefix literally, percent-encoding included', async () => {
    const locker = space.locker({ ttlMs: 10_000 });
    // `x/y` is stored as `x%2Fy`; the user key `x%2Fz` as `x%252Fz`.
    const names = ['x/y', 'x%2Fz', 'x*', 'x_1', 'x?', 'x[é]', 'xé', 'x'];
    const leases = await Promise.all(names.map((key) => locker.acquire(key)));
    const listed = async (prefix: string) =>
      (await collect(locker.list({ prefix, pageSize: 2 }))).map((e) => e.key).sort();
    expect(await listed('x/')).toEqual(['x/y']);
    expect(await listed('x%2F')).toEqual(['x%2Fz']);
    expect(await listed('x%')).toEqual(['x%2Fz']);
    expect(await listed('x*')).toEqual(['x*']);
    expect(await listed('x_')).toEqual(['x_1']);
    expect(await listed('x[')).toEqual(['x[é]']);
    expect(await listed('xé')).toEqual(['xé']);
    expect(await listed('x')).toEqual([...names].sort());
    await Promise.all(leases.map((l) => l.release()));
  });

  it('reads a folder longer than the page’s Range by itself, holders whole', async () => {
    const lockers = Array.from({ length: 7 }, () => space.locker({ ttlMs: 10_000 }));
    const prefix = 'long:';
    // A writer with 6 waiters; 7 readers; 7 permits of 7 held, then 2 waiting.
    const writer = await lockers[0]!.acquire(`${prefix}w`);
    const waiting = lockers
      .slice(1)
      .map((l) => l.acquire(`${prefix}w`, { waitMs: 20_000 }).catch(() => undefined));
    const readers = await Promise.all(
      lockers.map((l) => l.acquire(`${prefix}r`, { mode: 'read' })),
    );
    const semaphore = (i: number) => lockers[i % 7]!.semaphore(`${prefix}s`, { permits: 7 });
    const permits = await Promise.all(lockers.map((_, i) => semaphore(i).acquire()));
    const permitWaiters = [0, 1].map((i) =>
      semaphore(i)
        .acquire({ waitMs: 20_000 })
        .catch(() => undefined),
    );
    const backend = (await lockers[0]!.backend()) as EtcdBackend;
    await waitForCount(space.admin, backend.dirOf(`${prefix}w`), 7);
    await waitForCount(space.admin, backend.semaphoreDirOf(`${prefix}s`), 9);

    // pageSize 1: a Range of 4 keys, shorter than every folder.
    const { backend: counted, sent } = countedBackend();
    const all = await pages(counted, prefix, 1);
    const entries = all.flatMap((p) => p.entries);
    expect(entries.map((e) => [e.key, e.mode])).toEqual([
      [`${prefix}r`, 'read'],
      [`${prefix}w`, 'write'],
      [`${prefix}s`, 'permits'],
    ]);
    const [read, write, sem] = entries;
    // Acquired at once: oldest token first.
    expect(read!.holders.map((h) => [h.owner, h.fencingToken])).toEqual(
      readers
        .map((r) => [r.owner, r.fencingToken])
        .sort((a, b) => ((a[1] as bigint) < (b[1] as bigint) ? -1 : 1)),
    );
    expect(read!.waiters).toBe(0);
    expect(write!.holders.map((h) => [h.owner, h.fencingToken])).toEqual([
      [writer.owner, writer.fencingToken],
    ]);
    expect(write!.waiters).toBe(6);
    expect(sem).toMatchObject({ permits: 7, waiters: 2 });
    expect(sem!.holders.map((h) => h.fencingToken)).toEqual(
      permits.map((p) => p.fencingToken).sort((a, b) => (a < b ? -1 : 1)),
    );
    for (const entry of entries) {
      for (const h of entry.holders) expect(h.ttlMs).toBeGreaterThan(0);
    }
    // The writer's folder is read once more, oldest first with the limit; the readers' and the
    // semaphore's a third time whole (their holders may go past the limit).
    const ranges = sent.filter((s) => s.what === 'KV.range').map((s) => s.payload);
    const folderReads = ranges.filter((r) => r.sort_target === 'Create');
    expect(folderReads.map((r) => r.limit ?? 0).map(Number)).toEqual([4, 0, 4, 4, 0]);

    // Other page sizes cut folders elsewhere (a Range of 8 keys: the 7 readers, then 1 of the
    // writer's 7 keys): the folder a Range cut is left for the next page, so the same entries.
    const snapshot = (list: readonly ListedLock[]) =>
      list.map((e) => ({ ...e, holders: e.holders.map((h) => [h.owner, h.fencingToken]) }));
    sent.length = 0;
    const first = await counted.list({ prefix, cursor: null, pageSize: 2 });
    expect(first.entries.map((e) => e.key)).toEqual([`${prefix}r`]);
    expect(sent.filter((s) => s.what === 'KV.range')).toHaveLength(1);
    for (const pageSize of [2, 3, 100]) {
      const again = (await pages(counted, prefix, pageSize)).flatMap((p) => p.entries);
      expect(snapshot(again), `pageSize ${pageSize}`).toEqual(snapshot(entries));
    }

    await Promise.all([writer, ...readers, ...permits].map((l) => l.release()));
    await Promise.all([...waiting, ...permitWaiters].map(async (w) => (await w)?.release()));
  });

  it('a read lock: the readers before the oldest writer hold, the rest wait', async () => {
    const lockers = Array.from({ length: 4 }, () => space.locker({ ttlMs: 10_000 }));
    const key = 'rw:line';
    const readers = [
      await lockers[0]!.acquire(key, { mode: 'read' }),
      await lockers[1]!.acquire(key, { mode: 'read' }),
    ];
    const backend = (await lockers[0]!.backend()) as EtcdBackend;
    const writer = lockers[2]!.acquire(key, { waitMs: 20_000 });
    await waitForCount(space.admin, backend.dirOf(key), 3);
    const late = lockers[3]!.acquire(key, { mode: 'read', waitMs: 20_000 });
    await waitForCount(space.admin, backend.dirOf(key), 4);
    const [entry] = await collect(lockers[0]!.list({ prefix: key }));
    expect(entry).toMatchObject({ key, mode: 'read', waiters: 2 });
    expect(entry!.holders.map((h) => h.owner)).toEqual(readers.map((r) => r.owner));
    await Promise.all(readers.map((r) => r.release()));
    await (await writer).release();
    await (await late).release();
  });

  it('passes over keys fencelock did not write, and keeps moving through them', async () => {
    const admin = space.admin;
    const locker = space.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const prefix = 'foreign:';
    const held = await locker.acquire(`${prefix}z`);
    const base = `${space.namespace}/locks/`;
    // Keys with no folder, a folder name dirOf never makes, a key of no contender shape: more
    // of them than one page's Range.
    for (let i = 0; i < 6; i++) await admin.put(`${base}foreign%3A${i}`).value('by hand');
    const lease = await admin.lease(60, { autoKeepAlive: false }).grant();
    const leaseHex = BigInt(lease).toString(16);
    // `~` is never percent-encoded: no key's folder is named `%7E`.
    await admin
      .put(`${base}foreign%3A%7E/w-${leaseHex}-${'ab'.repeat(16)}`)
      .value('write')
      .lease(lease);
    await admin.put(`${backend.dirOf(`${prefix}a`)}someone-else`).value('by hand');
    const all = await pages(backend, prefix, 1);
    expect(all.flatMap((p) => p.entries).map((e) => e.key)).toEqual([`${prefix}z`]);
    await held.release();
  });

  it('refuses a cursor it did not make before any request', async () => {
    const { backend, sent } = countedBackend();
    for (const cursor of ['x', 'l:other:', 'p:paged:x/y', 'l:pa', 'q:paged', 'l:paged\u0100']) {
      const refused = await backend
        .list({ prefix: 'paged', cursor, pageSize: 10 })
        .catch((e: unknown) => e);
      expect(refused, cursor).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe('cursor');
    }
    expect(sent).toEqual([]);
    // Its own cursors are taken.
    const page = await backend.list({ prefix: 'paged', cursor: 'l:paged%3A05/', pageSize: 1 });
    expect(page.entries).toEqual([]);
    expect(sent.length).toBeGreaterThan(0);
  });

  it('lists through the locker from a client the user passed in', async () => {
    const { backend } = countedBackend();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const lease = await locker.acquire('own-client');
    const entries = await collect(locker.list({ prefix: 'own-client' }));
    expect(entries).toEqual([
      {
        key: 'own-client',
        mode: 'write',
        holders: [
          { owner: lease.owner, fencingToken: lease.fencingToken, ttlMs: expect.any(Number) },
        ],
        waiters: 0,
      },
    ]);
    await lease.release();
  });
});
