/**
 * Read-write locks on the SQLite store: readers share the key, each with its own fencing token
 * from the file's one counter (rows in `fencelock_readers`, a stand-in row in `fencelock_leases`
 * while they hold); a writer is kept out while they hold; one FIFO line for both modes, so a
 * reader behind a queued writer waits for it. Waiting has no herd: a writer's release lets in
 * only the readers at the head of the line (the others' waits go on), the last reader's release
 * only the writer at the head. A crashed reader's grant lapses by its TTL. Each backend below has
 * its own connection to the file, as separate processes would have.
 *
 * Downgrade and upgrade: the rules of test/integration/rwlock-rules.ts.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createSqliteBackend,
  type SqliteBackend,
} from '../../../packages/fencelock/src/backends/sqlite/index.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import {
  type AttemptRequest,
  type AttemptResult,
  createLocker,
  type Lease,
  type Locker,
  type LockerOptions,
  type NotGranted,
} from '../../../packages/fencelock/src/index.js';
import { settledWithin } from '../../helpers/promises.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-rwlock-'));
const path = join(dir, 'locks.db');
const backends: SqliteBackend[] = [];
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all([...lockers, ...backends].map((b) => b.close()));
  rmSync(dir, { recursive: true, force: true });
});

function backend(): SqliteBackend {
  const b = createSqliteBackend({ path });
  backends.push(b);
  return b;
}

function newLocker(options?: LockerOptions): Locker {
  const l = createLocker(createSqliteBackend({ path }), options);
  lockers.push(l);
  return l;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const owner = (digit: string) => digit.repeat(32);

/** An attempt on `key` by a made-up owner (32 times `digit`), straight to the engine. */
function attempt(
  key: string,
  digit: string,
  mode: LockMode,
  waiting: boolean,
  ttlMs = 10_000,
): AttemptRequest {
  return { key, owner: owner(digit), ttlMs, mode, autoRenew: false, willWait: waiting };
}

function expectNotGranted(result: AttemptResult): NotGranted {
  expect(result.granted).toBe(false);
  return result as NotGranted;
}

function expectToken(result: AttemptResult): bigint {
  expect(result.granted).toBe(true);
  return result.granted ? result.token : 0n;
}

/** Read-only rows of the file, through a connection of the test's own. */
function rows<T>(sql: string, ...params: unknown[]): T[] {
  const db = new Database(path, { readonly: true });
  try {
    db.defaultSafeIntegers(true);
    return db.prepare<unknown[], T>(sql).all(...params);
  } finally {
    db.close();
  }
}

/** The key's holders (writer, then readers by token) and its line, as `[owner, mode, token]`. */
function holdersAndLine(key: string): [string, LockMode, bigint][] {
  const writer = rows<{ owner: string; token: bigint }>(
    `SELECT owner, token FROM fencelock_leases WHERE key = ? AND owner <> ''
       AND expires_at > CAST(unixepoch('subsec') * 1000 AS INTEGER)`,
    key,
  ).map((r) => [r.owner, 'write', r.token] as [string, LockMode, bigint]);
  const readers = rows<{ owner: string; token: bigint }>(
    `SELECT owner, token FROM fencelock_readers WHERE key = ?
       AND expires_at > CAST(unixepoch('subsec') * 1000 AS INTEGER) ORDER BY token`,
    key,
  ).map((r) => [r.owner, 'read', r.token] as [string, LockMode, bigint]);
  const line = rows<{ owner: string; reads: bigint }>(
    'SELECT owner, reads FROM fencelock_waiters WHERE key = ? ORDER BY seq',
    key,
  ).map((r) => [r.owner, r.reads === 1n ? 'read' : 'write', 0n] as [string, LockMode, bigint]);
  return [...writer, ...readers, ...line];
}

/** Every row of the key: lock rows (the readers' stand-in too), read grants, line entries. */
function rowCount(key: string): number {
  const [row] = rows<{ n: bigint }>(
    `SELECT (SELECT count(*) FROM fencelock_leases WHERE key = $key)
          + (SELECT count(*) FROM fencelock_readers WHERE key = $key)
          + (SELECT count(*) FROM fencelock_waiters WHERE key = $key) AS n`,
    { key },
  );
  return Number(row!.n);
}

async function waitForLine(key: string, n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (rows('SELECT 1 FROM fencelock_waiters WHERE key = ?', key).length === n) return;
    await sleep(10);
  }
  throw new Error(`the line of ${key} never held ${n} entries`);
}

describe('SQLite read-write lock', () => {
  downgradeAndUpgradeTests({
    engine: 'sqlite',
    locker: (options) => newLocker(options),
    dirOf: (_backend, key) => key,
    line: async (key) => holdersAndLine(key),
    // The readers' stand-in row is not a contender.
    count: async (key) =>
      rowCount(key) -
      rows(`SELECT 1 FROM fencelock_leases WHERE key = ? AND owner = ''`, key).length,
    waitForCount: async (key, n) => {
      for (let i = 0; i < 500; i++) {
        if (holdersAndLine(key).length === n) return;
        await sleep(10);
      }
      throw new Error(`${key} never had ${n} entries`);
    },
  });

  it('readers share the key with rising tokens; a writer is kept out while they hold', async () => {
    const key = `rw:shared:${randomUUID()}`;
    const probe = newLocker({ ttlMs: 10_000 });
    const readers: Lease[] = [];
    for (let i = 0; i < 3; i++) {
      readers.push(
        await newLocker({ ttlMs: 10_000 }).acquire(key, { mode: 'read', waitMs: 1_000 }),
      );
    }
    const [r1, r2, r3] = readers as [Lease, Lease, Lease];
    expect(r2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(r3.fencingToken).toBeGreaterThan(r2.fencingToken);
    expect(holdersAndLine(key)).toEqual(readers.map((r) => [r.owner, 'read', r.fencingToken]));
    // The lock row is the readers' stand-in: the newest token, the latest expiry.
    expect(rows('SELECT owner, token FROM fencelock_leases WHERE key = ?', key)).toEqual([
      { owner: '', token: r3.fencingToken },
    ]);
    const info = await probe.inspect(key);
    expect(info.holder).toMatchObject({ owner: r1.owner, fencingToken: r1.fencingToken });
    expect(info.holder!.ttlMs).toBeGreaterThan(5_000);
    expect(info.lastFencingToken).toBe(r3.fencingToken);
    // A writer's single attempt fails and leaves no entry; a waiting one waits.
    expect(await probe.tryAcquire(key)).toBeNull();
    expect(holdersAndLine(key)).toHaveLength(3);
    const writing = newLocker({ ttlMs: 10_000 }).acquire(key, { waitMs: 10_000 });
    await waitForLine(key, 1);
    expect(await settledWithin(writing, 300)).toBe(false);
    // Another reader's single attempt is refused too: the writer stands ahead of it.
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    for (const r of [r2, r3]) expect(await r.release()).toBe('released');
    expect(await settledWithin(writing, 300)).toBe(false);
    expect(await r1.release()).toBe('released');
    const writer = await writing;
    expect(writer.fencingToken).toBeGreaterThan(r3.fencingToken);
    expect(holdersAndLine(key)).toEqual([[writer.owner, 'write', writer.fencingToken]]);
    expect(await writer.release()).toBe('released');
    expect(rowCount(key)).toBe(0);
  });

  it('release and renew of a read grant compare owner and token (not-owner, not-held)', async () => {
    const key = `rw:refusals:${randomUUID()}`;
    const a = backend();
    const b = backend();
    const token = expectToken(await a.attempt(attempt(key, 'a', 'read', false)));
    const other = expectToken(await a.attempt(attempt(key, 'b', 'read', false)));
    const ref = (digit: string, t: bigint) => ({ key, owner: owner(digit), fencingToken: t });
    for (const x of [a, b]) {
      expect(await x.release(ref('a', token + 1n))).toBe('not-owner');
      expect(await x.release(ref('c', token))).toBe('not-owner');
      expect(await x.renew(ref('a', other), 10_000)).toEqual({ ok: false, reason: 'not-owner' });
    }
    expect(await b.renew(ref('a', token), 20_000)).toEqual({ ok: true, ttlMs: 20_000 });
    const [standIn] = rows<{ left: bigint }>(
      `SELECT expires_at - CAST(unixepoch('subsec') * 1000 AS INTEGER) AS left
       FROM fencelock_leases WHERE key = ?`,
      key,
    );
    expect(standIn!.left).toBeGreaterThan(15_000n);
    expect(await b.release(ref('a', token))).toBe('released');
    // The other reader still holds: a second release of the first is not-owner.
    expect(await b.release(ref('a', token))).toBe('not-owner');
    expect(await a.release(ref('b', other))).toBe('released');
    expect(await a.release(ref('b', other))).toBe('not-held');
    expect(await a.renew(ref('b', other), 10_000)).toEqual({ ok: false, reason: 'not-held' });
    expect(rowCount(key)).toBe(0);
  });

  it('FIFO: a reader behind a queued writer waits for it; grants in line order', async () => {
    const key = `rw:fifo:${randomUUID()}`;
    const grants: { name: string; token: bigint }[] = [];
    const contender = (mode: LockMode, name: string) =>
      newLocker({ ttlMs: 10_000 })
        .acquire(key, { mode, waitMs: 10_000 })
        .then((lease) => {
          grants.push({ name, token: lease.fencingToken });
          return lease;
        });
    const r1 = await contender('read', 'R1');
    const r2 = await contender('read', 'R2');
    const w = contender('write', 'W');
    await waitForLine(key, 1);
    const r3 = contender('read', 'R3');
    await waitForLine(key, 2);
    // Only readers hold, yet R3 waits: a writer stands ahead of it.
    expect(await settledWithin(Promise.race([w, r3]), 300)).toBe(false);
    expect(await r2.release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await r1.release()).toBe('released');
    const writer = await w;
    expect(await settledWithin(r3, 300)).toBe(false);
    expect(await writer.release()).toBe('released');
    const reader3 = await r3;
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'W', 'R3']);
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!.token).toBeGreaterThan(grants[i - 1]!.token);
    }
    expect(await reader3.release()).toBe('released');
    expect(rowCount(key)).toBe(0);
  });

  it('handoffs without a herd: a release lets in only the waiters it frees', async () => {
    const key = `rw:herd:${randomUUID()}`;
    const holder = backend();
    const w1 = expectToken(await holder.attempt(attempt(key, 'a', 'write', false)));
    // Waiting, in this order: R1, R2 (readers), W2 (a writer), R3 (a reader behind it).
    const waiters = [
      ['b', 'read'],
      ['c', 'read'],
      ['d', 'write'],
      ['e', 'read'],
    ] as const;
    const engines = waiters.map(() => backend());
    const watch = new AbortController();
    const wakes: Promise<unknown>[] = [];
    try {
      for (const [i, [digit, mode]] of waiters.entries()) {
        const answer = expectNotGranted(await engines[i]!.attempt(attempt(key, digit, mode, true)));
        expect(answer.queued).toBe(true);
        wakes.push(answer.waitForChange!(watch.signal, 3_000));
      }
      expect(holdersAndLine(key).map(([o, m]) => [o[0], m])).toEqual([
        ['a', 'write'],
        ['b', 'read'],
        ['c', 'read'],
        ['d', 'write'],
        ['e', 'read'],
      ]);
      const ref = (digit: string, t: bigint) => ({ key, owner: owner(digit), fencingToken: t });
      // Nothing changed yet: nobody goes back to the engine.
      expect(await settledWithin(Promise.race(wakes), 200)).toBe(false);
      // The writer's release lets in the two readers at the head, not W2 nor R3 behind it.
      expect(await holder.release(ref('a', w1))).toBe('released');
      expect(await settledWithin(Promise.all(wakes.slice(0, 2)), 200)).toBe(true);
      expect(await settledWithin(Promise.race(wakes.slice(2)), 0)).toBe(false);
      const r1 = expectToken(await engines[0]!.attempt(attempt(key, 'b', 'read', true)));
      const r2 = expectToken(await engines[1]!.attempt(attempt(key, 'c', 'read', true)));
      expect(r2).toBeGreaterThan(r1);
      expect(r1).toBeGreaterThan(w1);
      // One reader's release frees nothing: W2 waits for the other reader.
      expect(await engines[0]!.release(ref('b', r1))).toBe('released');
      expect(await settledWithin(Promise.race(wakes.slice(2)), 200)).toBe(false);
      // The last reader's release lets in W2 only.
      expect(await engines[1]!.release(ref('c', r2))).toBe('released');
      expect(await settledWithin(wakes[2]!, 200)).toBe(true);
      expect(await settledWithin(wakes[3]!, 0)).toBe(false);
      const w2 = expectToken(await engines[2]!.attempt(attempt(key, 'd', 'write', true)));
      expect(w2).toBeGreaterThan(r2);
      expect(await settledWithin(wakes[3]!, 200)).toBe(false);
      expect(await engines[2]!.release(ref('d', w2))).toBe('released');
      expect(await settledWithin(wakes[3]!, 200)).toBe(true);
      const r3 = expectToken(await engines[3]!.attempt(attempt(key, 'e', 'read', true)));
      expect(r3).toBeGreaterThan(w2);
      expect(await engines[3]!.release(ref('e', r3))).toBe('released');
      expect(rowCount(key)).toBe(0);
    } finally {
      watch.abort();
      for (const [i, [digit, mode]] of waiters.entries()) {
        await engines[i]!.abandon(attempt(key, digit, mode, true));
      }
    }
  });

  it("a crashed reader's grant lapses by its TTL; a waiting writer then gets the key", async () => {
    const key = `rw:crash:${randomUUID()}`;
    const crashed = backend();
    const reader = expectToken(await crashed.attempt(attempt(key, 'a', 'read', false, 400)));
    // The process is gone: nothing renews or releases its grant.
    await crashed.close();
    const startedAt = performance.now();
    const writer = await newLocker({ ttlMs: 10_000 }).acquire(key, { waitMs: 5_000 });
    const waitedMs = performance.now() - startedAt;
    expect(waitedMs).toBeGreaterThan(250);
    expect(waitedMs).toBeLessThan(2_000);
    expect(writer.fencingToken).toBeGreaterThan(reader);
    expect(holdersAndLine(key)).toEqual([[writer.owner, 'write', writer.fencingToken]]);
    expect(await writer.release()).toBe('released');
    // The lapsed read grant counts for nothing; the next read grant (of any key) sweeps it.
    expect(holdersAndLine(key)).toEqual([]);
    expect(rows('SELECT owner FROM fencelock_readers WHERE key = ?', key)).toEqual([
      { owner: owner('a') },
    ]);
    const b = backend();
    const other = `rw:crash-sweep:${randomUUID()}`;
    const sweeper = expectToken(await b.attempt(attempt(other, 'b', 'read', false)));
    expect(rowCount(key)).toBe(0);
    expect(await b.release({ key: other, owner: owner('b'), fencingToken: sweeper })).toBe(
      'released',
    );
  });

  it("a reader granted past its writer keeps the key held after the writer's row lapses", async () => {
    const key = `rw:downgrade-lapse:${randomUUID()}`;
    const b = backend();
    const w = expectToken(await b.attempt(attempt(key, 'a', 'write', false)));
    const r = expectToken(
      await b.attempt({ ...attempt(key, 'b', 'read', false), heldWriter: owner('a') }),
    );
    expect(r).toBeGreaterThan(w);
    // The writer renews to a short TTL, then its process is gone: its row lapses first.
    expect(await b.renew({ key, owner: owner('a'), fencingToken: w }, 100)).toMatchObject({
      ok: true,
    });
    await sleep(200);
    const other = backend();
    expectNotGranted(await other.attempt(attempt(key, 'c', 'write', false)));
    expect((await other.inspect(key)).holder).toMatchObject({ owner: owner('b'), fencingToken: r });
    expect(await b.release({ key, owner: owner('b'), fencingToken: r })).toBe('released');
    const next = expectToken(await other.attempt(attempt(key, 'c', 'write', false)));
    expect(next).toBeGreaterThan(r);
    expect(await other.release({ key, owner: owner('c'), fencingToken: next })).toBe('released');
    expect(rowCount(key)).toBe(0);
  });
});
