/**
 * `attemptAll` on the SQLite store: a multi-key acquire's first round as one IMMEDIATE
 * transaction that runs each key's single attempt and commits only when every key was granted.
 * What the contract cannot see: the statements SQLite ran (one BEGIN … COMMIT, or BEGIN …
 * ROLLBACK, however many keys), a refused round writing nothing (no token spent, no commit for
 * other connections' waiters to see), the fair line and downgrade rule applied as a single
 * attempt applies them, tokens drawn from the file's one counter in key order, expiry of the
 * round's rows, and another process holding the file's write lock (busy timeout).
 *
 * Every backend and connection here has its own connection to one file, as processes would.
 */
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  createSqliteBackend,
  type SqliteBackend,
} from '../../../packages/fencelock/src/backends/sqlite/index.js';
import type {
  AttemptRequest,
  AttemptResult,
  Granted,
  LockMode,
  NotGranted,
} from '../../../packages/fencelock/src/core/backend.js';
import {
  BackendError,
  createLocker,
  InvalidArgumentError,
} from '../../../packages/fencelock/src/index.js';

/** The statements each connection ran, in order (better-sqlite3's `verbose` logger). */
const traced = vi.hoisted(() => ({ connections: [] as string[][] }));

// Every connection opened in this file (the backends' too) logs the statements it runs.
vi.mock('better-sqlite3', async (importOriginal) => {
  const original = (await importOriginal<{ default: typeof Database }>()).default;
  function Traced(path: string, options?: Database.Options): Database.Database {
    const log: string[] = [];
    traced.connections.push(log);
    return new original(path, { ...options, verbose: (sql) => log.push(String(sql)) });
  }
  Traced.prototype = original.prototype;
  return { default: Traced };
});

const dir = mkdtempSync(join(tmpdir(), 'fencelock-attempt-all-'));
const path = join(dir, 'locks.db');
const closers: { close(): unknown }[] = [];

afterAll(async () => {
  for (const c of closers) await c.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A backend with its own connection, and the statements that connection runs. */
function backend(busyTimeoutMs = 5000): { b: SqliteBackend; statements: string[] } {
  const b = createSqliteBackend({ path, busyTimeoutMs });
  closers.push(b);
  return { b, statements: traced.connections.at(-1)! };
}

/** A connection of the test's own (another process's view of the file). */
function connection(): Database.Database {
  const db = new Database(path);
  db.defaultSafeIntegers(true);
  closers.push(db);
  return db;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const newOwner = () => randomBytes(16).toString('hex');
const keysFor = (label: string, n: number) =>
  Array.from({ length: n }, (_, i) => `all:${label}:${randomUUID()}:${i}`).sort();

/** A single attempt (`willWait: false`) or a waiting one at `key`, by an owner of its own. */
function single(key: string, willWait = false, ttlMs = 10_000): AttemptRequest {
  return { key, owner: newOwner(), ttlMs, mode: 'write', autoRenew: false, willWait };
}

/** A round: single attempts at `keys` (sorted), each with an owner of its own. */
function round(keys: readonly string[], mode: LockMode = 'write', ttlMs = 10_000) {
  return keys.map((key): AttemptRequest => ({ ...single(key, false, ttlMs), mode }));
}

function tokensOf(results: AttemptResult[] | null): bigint[] {
  expect(results?.every((r) => r.granted)).toBe(true);
  return results!.map((r) => (r as Granted).token);
}

function tokenOf(result: AttemptResult): bigint {
  expect(result.granted).toBe(true);
  return (result as Granted).token;
}

/** Transaction control statements a connection ran since `from`. */
function transactions(statements: string[], from = 0): string[] {
  return statements.slice(from).filter((s) => /^(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)/.test(s));
}

/** The rows of `keys` in the lock and reader tables, read through `db`. */
function rowsOf(db: Database.Database, keys: readonly string[]): number {
  const count = db.prepare<{ key: string }, { n: bigint }>(
    `SELECT (SELECT count(*) FROM fencelock_leases WHERE key = $key)
          + (SELECT count(*) FROM fencelock_readers WHERE key = $key)
          + (SELECT count(*) FROM fencelock_waiters WHERE key = $key) AS n`,
  );
  return keys.reduce((n, key) => n + Number(count.get({ key })!.n), 0);
}

const dataVersion = (db: Database.Database) => db.pragma('data_version', { simple: true });

describe('SQLite attemptAll', () => {
  it('is one IMMEDIATE transaction however many keys: BEGIN … COMMIT, or BEGIN … ROLLBACK', async () => {
    const { b, statements } = backend();
    const { b: other } = backend();
    for (const n of [2, 1000]) {
      const keys = keysFor(`one-tx-${n}`, n);
      const from = statements.length;
      tokensOf(await b.attemptAll(round(keys)));
      const ran = statements.slice(from);
      expect(transactions(ran)).toEqual(['BEGIN IMMEDIATE', 'COMMIT']);
      // Every statement of the round ran inside that transaction.
      expect(ran[0]).toBe('BEGIN IMMEDIATE');
      expect(ran.at(-1)).toBe('COMMIT');
      expect(ran.length).toBeGreaterThan(2 * n);
    }
    // A held key: the same one transaction, rolled back.
    const keys = keysFor('one-tx-refused', 3);
    tokenOf(await other.attempt(single(keys[2]!)));
    const from = statements.length;
    const results = await b.attemptAll(round(keys));
    expect(results!.map((r) => r.granted)).toEqual([false, false, false]);
    expect(transactions(statements, from)).toEqual(['BEGIN IMMEDIATE', 'ROLLBACK']);
  });

  it('acquireAll takes its keys in that one transaction, not one per key', async () => {
    const { b, statements } = backend();
    const locker = createLocker(b, { ttlMs: 10_000 });
    closers.push(locker);
    const keys = keysFor('locker', 4);
    const from = statements.length;
    const all = await locker.acquireAll(keys);
    expect(transactions(statements, from)).toEqual(['BEGIN IMMEDIATE', 'COMMIT']);
    expect(all.leases.map((l) => l.key)).toEqual(keys);
    expect(await all.release()).toEqual(['released', 'released', 'released', 'released']);
  });

  it('a held key refuses the round: nothing written, no token spent, no commit for waiters to see', async () => {
    const { b } = backend();
    const { b: holder } = backend();
    const watcher = connection();
    const keys = keysFor('held', 3);
    const held = tokenOf(await holder.attempt(single(keys[1]!)));
    const before = dataVersion(watcher);
    const requests = round(keys);
    const results = await b.attemptAll(requests);
    // The held key answered as a single attempt is; the free ones plainly not granted.
    expect(results![0]).toEqual({ granted: false });
    expect(results![2]).toEqual({ granted: false });
    const refused = results![1] as NotGranted;
    expect(refused).toMatchObject({ granted: false, queued: false });
    expect(refused.holderTtlMs).toBeGreaterThan(5_000);
    expect(refused.waitForChange).toBeTypeOf('function');
    // Nothing of the round is in the file, and other connections saw no commit.
    expect(dataVersion(watcher)).toBe(before);
    expect(rowsOf(watcher, [keys[0]!, keys[2]!])).toBe(0);
    for (const r of requests) await b.abandon(r); // the core's clean-up: nothing to undo
    expect((await b.inspect(keys[1]!)).holder?.fencingToken).toBe(held);
    // The counter did not move: the next grant of the file takes the token after the holder's.
    expect(tokenOf(await b.attempt(single(keys[0]!)))).toBe(held + 1n);
    expect(dataVersion(watcher)).not.toBe(before);
  });

  it('a free key with a waiter in its line refuses the round, as it refuses a single attempt', async () => {
    const { b } = backend();
    const { b: other } = backend();
    const keys = keysFor('line', 2);
    const lined = keys[1]!;
    const holder = single(lined);
    const token = tokenOf(await other.attempt(holder));
    const waiter = single(lined, true);
    expect((await other.attempt(waiter)) as NotGranted).toMatchObject({ queued: true });
    expect(await other.release({ key: lined, owner: holder.owner, fencingToken: token })).toBe(
      'released',
    );
    // Free, but its turn is the waiter's: the round and a newcomer's single attempt both refused.
    const results = await b.attemptAll(round(keys));
    expect(results!.map((r) => r.granted)).toEqual([false, false]);
    expect(results![1]).toMatchObject({ granted: false, queued: false });
    expect((await b.attempt(single(lined))).granted).toBe(false);
    expect((await b.inspect(keys[0]!)).holder).toBeNull();
    // The waiter keeps its place and is granted.
    expect(tokenOf(await other.attempt(waiter))).toBeGreaterThan(token);
  });

  it('tokens come from the file’s one counter in key order, between single grants', async () => {
    const { b } = backend();
    const keys = keysFor('tokens', 3);
    const before = single(keys[1]!);
    const t0 = tokenOf(await b.attempt(before));
    expect(await b.release({ key: keys[1]!, owner: before.owner, fencingToken: t0 })).toBe(
      'released',
    );
    const requests = round(keys);
    const tokens = tokensOf(await b.attemptAll(requests));
    expect(tokens).toEqual([t0 + 1n, t0 + 2n, t0 + 3n]);
    // Retried by the same owners (a lost reply): the same grants, and no token drawn.
    expect(tokensOf(await b.attemptAll(requests))).toEqual(tokens);
    for (const [i, r] of requests.entries()) {
      expect(await b.release({ key: r.key, owner: r.owner, fencingToken: tokens[i]! })).toBe(
        'released',
      );
    }
    expect(tokenOf(await b.attempt(single(keys[0]!)))).toBe(t0 + 4n);
    // Readers' rounds draw from the same counter, and share the keys.
    const readKeys = keysFor('tokens-read', 2);
    const first = tokensOf(await b.attemptAll(round(readKeys, 'read')));
    const second = tokensOf(await b.attemptAll(round(readKeys, 'read')));
    expect(first).toEqual([t0 + 5n, t0 + 6n]);
    expect(second).toEqual([t0 + 7n, t0 + 8n]);
  });

  it('a read round past the caller’s own writer with another writer waiting: refused whole', async () => {
    const { b } = backend();
    const keys = keysFor('downgrade', 2);
    const writer = single(keys[1]!);
    tokenOf(await b.attempt(writer));
    expect((await b.attempt(single(keys[1]!, true))).granted).toBe(false); // waits in line
    const requests = round(keys, 'read').map((r) => ({ ...r, heldWriter: writer.owner }));
    await expect(b.attemptAll(requests)).rejects.toBeInstanceOf(InvalidArgumentError);
    // The first key's read grant went with the rolled-back transaction.
    expect((await b.inspect(keys[0]!)).holder).toBeNull();
    // Without the waiting writer, the same round downgrades.
    const free = keysFor('downgrade-free', 2);
    const own = single(free[1]!);
    const ownToken = tokenOf(await b.attempt(own));
    const granted = tokensOf(
      await b.attemptAll(round(free, 'read').map((r) => ({ ...r, heldWriter: own.owner }))),
    );
    expect(granted[1]).toBeGreaterThan(ownToken);
  });

  it('the round’s grants lapse by their TTL; lapsed rows are replaced or swept', async () => {
    const { b } = backend();
    const { b: other } = backend();
    const watcher = connection();
    const keys = keysFor('expiry', 2);
    const first = round(keys, 'write', 60);
    const tokens = tokensOf(await b.attemptAll(first));
    expect((await other.attemptAll(round(keys)))!.map((r) => r.granted)).toEqual([false, false]);
    await sleep(120);
    // Lapsed: another round takes the keys, with higher tokens, in place of the lapsed rows.
    const second = round(keys);
    const next = tokensOf(await other.attemptAll(second));
    expect(next[0]).toBeGreaterThan(tokens[1]!);
    expect(
      watcher
        .prepare('SELECT owner FROM fencelock_leases WHERE key IN (?, ?) ORDER BY key')
        .pluck()
        .all(...keys),
    ).toEqual(second.map((r) => r.owner));
    // The same owners as the lapsed round ask again: refused, their grants are gone.
    expect((await b.attemptAll(first))!.map((r) => r.granted)).toEqual([false, false]);
    // Read grants of a round lapse too (rows and stand-ins), and a later grant sweeps them.
    const readKeys = keysFor('expiry-read', 2);
    tokensOf(await b.attemptAll(round(readKeys, 'read', 60)));
    expect(rowsOf(watcher, readKeys)).toBe(4); // two read grants, two stand-ins
    await sleep(120);
    expect((await b.inspect(readKeys[0]!)).holder).toBeNull();
    tokenOf(await b.attempt({ ...single(`all:sweep:${randomUUID()}`), mode: 'read' }));
    expect(rowsOf(watcher, readKeys)).toBe(0);
  });

  describe('another process holding the file’s write lock', () => {
    const betterSqlite = createRequire(import.meta.url).resolve('better-sqlite3');

    /** A process that takes the write lock, says `locked`, and commits after `holdMs`. */
    function holdWriteLock(holdMs: number): { locked: Promise<void>; exited: Promise<void> } {
      const child = spawn(process.execPath, [
        '-e',
        `const Database = require(${JSON.stringify(betterSqlite)});
         const db = new Database(${JSON.stringify(path)});
         db.exec('BEGIN IMMEDIATE');
         console.log('locked');
         setTimeout(() => { db.exec('COMMIT'); db.close(); }, ${holdMs});`,
      ]);
      const locked = new Promise<void>((resolve, reject) => {
        child.stdout.on('data', (d: Buffer) => {
          if (d.toString().includes('locked')) resolve();
        });
        child.on('error', reject);
        child.on('exit', (code) => reject(new Error(`holder exited ${code} before locking`)));
      });
      const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
      return { locked, exited };
    }

    it('the round waits for it within the busy timeout, then grants', async () => {
      const { b } = backend(5000);
      const keys = keysFor('busy-wait', 3);
      const holder = holdWriteLock(300);
      await holder.locked;
      const startedAt = performance.now();
      tokensOf(await b.attemptAll(round(keys)));
      expect(performance.now() - startedAt).toBeGreaterThan(200);
      await holder.exited;
    });

    it('a round that outwaits busyTimeoutMs rejects with BackendError, granting nothing', async () => {
      const { b } = backend(20);
      const keys = keysFor('busy-fail', 3);
      const holder = holdWriteLock(500);
      await holder.locked;
      const error = await b.attemptAll(round(keys)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as BackendError).cause).toMatchObject({ code: 'SQLITE_BUSY' });
      await holder.exited;
      for (const key of keys) expect((await b.inspect(key)).holder).toBeNull();
      // The connection is usable again: the next round takes the keys.
      tokensOf(await b.attemptAll(round(keys)));
    });
  });

  it('semaphore permits are not taken in one round (null: the core attempts them one by one)', async () => {
    const { b } = backend();
    const requests = round(keysFor('permits', 2)).map((r) => ({ ...r, permits: 2 }));
    expect(await b.attemptAll(requests)).toBeNull();
  });
});
