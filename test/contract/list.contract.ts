/**
 * The listing part of the backend contract (`locker.list`), registered by `describeBackend` for
 * every backend: where `capabilities.list` is false, the refusal; elsewhere every held key under
 * a prefix once, with its mode, holders and waiters, paged and limited, and nothing outside the
 * prefix or no longer held.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import {
  type Backend,
  BackendError,
  InvalidArgumentError,
  type ListedLock,
  type ListPage,
  type Locker,
  type LockerOptions,
} from '../../packages/fencelock/src/index.js';

/** What the listing cases need from the suite. */
export interface ListSuite {
  newClient(options?: LockerOptions): Promise<{ locker: Locker; backend: Backend }>;
  uniqueKey(label: string): string;
}

async function collect(iterable: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const entries: ListedLock[] = [];
  for await (const entry of iterable) entries.push(entry);
  return entries;
}

/** Register the listing cases (inside `describeBackend`'s describe). */
export function describeListContract(suite: ListSuite): void {
  const { newClient, uniqueKey } = suite;

  it('list: refused at the first iteration where capabilities.list is false', async () => {
    const { locker, backend } = await newClient();
    if (backend.capabilities.list) return;
    const refused = await collect(locker.list()).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as InvalidArgumentError).argument).toBe('store');
  });

  it('list: each held key under the prefix once, with its mode, holders and waiters', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.list) return t.skip();
    const prefix = `${uniqueKey('list')}:`;
    const ttlMs = 10_000;
    const writer = await a.locker.acquire(`${prefix}w`, { ttlMs });
    const readers = a.backend.capabilities.modes.includes('read')
      ? [
          await a.locker.acquire(`${prefix}r`, { ttlMs, mode: 'read' }),
          await b.locker.acquire(`${prefix}r`, { ttlMs, mode: 'read' }),
        ]
      : [];
    const permits = a.backend.capabilities.permits
      ? [
          await a.locker.semaphore(`${prefix}w`, { permits: 3 }).acquire({ ttlMs }),
          await b.locker.semaphore(`${prefix}w`, { permits: 3 }).acquire({ ttlMs }),
        ]
      : [];
    // A waiter for the written key, and a key outside the prefix.
    const waiting = b.locker.acquire(`${prefix}w`, { ttlMs, waitMs: 20_000 });
    const outside = await a.locker.acquire(`${prefix.slice(0, -1)}-outside`, { ttlMs });
    const released = await a.locker.acquire(`${prefix}gone`, { ttlMs });
    await released.release();
    // The waiter joins the line by its first attempt.
    await delay(300);

    const entries = await collect(a.locker.list({ prefix }));
    const lock = entries.find((e) => e.key === `${prefix}w` && e.mode === 'write');
    expect(lock?.holders).toEqual([
      { owner: writer.owner, fencingToken: writer.fencingToken, ttlMs: expect.any(Number) },
    ]);
    expect(lock!.holders[0]!.ttlMs).toBeGreaterThan(0);
    expect(lock!.holders[0]!.ttlMs).toBeLessThanOrEqual(ttlMs);
    if (a.backend.capabilities.queue) expect(lock!.waiters).toBe(1);
    const expected = [{ key: `${prefix}w`, mode: 'write' }];
    if (readers.length > 0) {
      const read = entries.find((e) => e.key === `${prefix}r`);
      expect(read?.mode).toBe('read');
      expect(read!.holders.map((h) => [h.owner, h.fencingToken])).toEqual(
        readers.map((r) => [r.owner, r.fencingToken]),
      );
      expected.push({ key: `${prefix}r`, mode: 'read' });
    }
    if (permits.length > 0) {
      const semaphore = entries.find((e) => e.mode === 'permits');
      expect(semaphore).toMatchObject({ key: `${prefix}w`, permits: 3, waiters: 0 });
      expect(semaphore!.holders.map((h) => [h.owner, h.fencingToken])).toEqual(
        permits.map((p) => [p.owner, p.fencingToken]),
      );
      expected.push({ key: `${prefix}w`, mode: 'permits' });
    }
    expect(entries.map((e) => ({ key: e.key, mode: e.mode })).sort(byKeyAndMode)).toEqual(
      expected.sort(byKeyAndMode),
    );

    await writer.release();
    const next = await waiting;
    await Promise.all([...readers, ...permits, next, outside].map((l) => l.release()));
    expect(await collect(a.locker.list({ prefix }))).toEqual([]);
  });

  it('list: pages, limit and a prefix taken literally', async (t) => {
    const { locker, backend } = await newClient();
    if (!backend.capabilities.list) return t.skip();
    // `%` and `_` are LIKE wildcards, `*` and `?` glob ones: the prefix must match none of them
    // as patterns.
    const prefix = `${uniqueKey('page')}:%_*?[é]`;
    const keys = Array.from({ length: 7 }, (_, i) => `${prefix}${i}`);
    const leases = await Promise.all(keys.map((key) => locker.acquire(key, { ttlMs: 10_000 })));
    const lookalike = await locker.acquire(`${prefix.replace('%_*?', 'ab??')}0`, { ttlMs: 10_000 });

    const paged = await collect(locker.list({ prefix, pageSize: 2 }));
    expect(paged.map((e) => e.key).sort()).toEqual([...keys].sort());
    const limited = await collect(locker.list({ prefix, pageSize: 3, limit: 4 }));
    expect(limited).toHaveLength(4);
    expect(new Set(limited.map((e) => e.key)).size).toBe(4);

    const controller = new AbortController();
    const seen: string[] = [];
    const stopped = (async () => {
      for await (const entry of locker.list({ prefix, pageSize: 2, signal: controller.signal })) {
        seen.push(entry.key);
        if (seen.length === 3) controller.abort(new Error('enough'));
      }
    })();
    await expect(stopped).rejects.toThrow('enough');
    expect(seen).toHaveLength(3);

    // A cursor of another prefix never lists keys outside the prefix asked for (refused, or
    // taken as a position only): `otherPrefix` sorts after every key above, and `l:!` (this
    // form is SQLite's, PostgreSQL's and etcd's) before them. Nor does a cursor with a NUL in it
    // reach the engine.
    const otherPrefix = `${prefix}~`;
    const others = await Promise.all(
      ['x', 'y'].map((s) => locker.acquire(`${otherPrefix}${s}`, { ttlMs: 10_000 })),
    );
    const first = await locker.listPage({ prefix, pageSize: 1 });
    expect(first.cursor).not.toBeNull();
    for (const cursor of [first.cursor, 'l:!']) {
      const crossed = await locker
        .listPage({ prefix: otherPrefix, cursor })
        .catch((e: unknown) => e);
      if (crossed instanceof Error) expect(crossed).toBeInstanceOf(InvalidArgumentError);
      else {
        for (const entry of (crossed as ListPage).entries) {
          expect(entry.key.startsWith(otherPrefix), `${cursor}: ${entry.key}`).toBe(true);
        }
      }
    }
    for (const cursor of ['l:\u0000', 'p:a\u0000']) {
      const answer = await locker.listPage({ prefix: '', cursor }).catch((e: unknown) => e);
      expect(answer, JSON.stringify(cursor)).not.toBeInstanceOf(BackendError);
    }

    await Promise.all([...leases, lookalike, ...others].map((l) => l.release()));
  });

  it('list: bad options are InvalidArgumentError before any engine call', async () => {
    const { locker } = await newClient();
    for (const options of [
      { prefix: 42 },
      { prefix: 'a\u0000b' },
      { limit: 0 },
      { limit: 1.5 },
      { pageSize: 0 },
      { pageSize: 1_001 },
      { signal: 'stop' },
      { cursor: 'x' },
      'prefix',
    ]) {
      expect(() => locker.list(options as never), JSON.stringify(options)).toThrow(
        InvalidArgumentError,
      );
    }
  });
}

function byKeyAndMode(a: { key: string; mode: string }, b: { key: string; mode: string }): number {
  return a.key === b.key ? a.mode.localeCompare(b.mode) : a.key < b.key ? -1 : 1;
}
