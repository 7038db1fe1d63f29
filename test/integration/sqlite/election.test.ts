/**
 * SQLite: leader elections. The election object of a key is its leader row in
 * `fencelock_leaders` (owner, term, value, expiry) and its line in `fencelock_candidates`, apart
 * from the lock and the semaphore of the same key; terms come from the file's one token counter,
 * so they keep increasing after the election stood idle, its rows were swept, or the file was
 * opened again; a repeated attempt by the leader (a lost reply) answers its term and keeps its
 * value; `proclaim` is a compare-and-set of owner and term. Watches of different connections
 * (as separate processes would have) see each other's commits, one poller per backend runs while
 * a watch is armed and none after `stop()` or `close()`. A file of the version before elections
 * gets the election tables and keeps its locks and counter.
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
import {
  type AttemptRequest,
  type AttemptResult,
  createLocker,
  type Granted,
  type LeaseRef,
  type Locker,
  type NotGranted,
} from '../../../packages/fencelock/src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-election-'));
const path = join(dir, 'locks.db');
const backends: SqliteBackend[] = [];
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all([...lockers, ...backends].map((b) => b.close()));
  rmSync(dir, { recursive: true, force: true });
});

/** A backend with a connection of its own to `file`, as a separate process would have. */
function backend(file = path): SqliteBackend {
  const b = createSqliteBackend({ path: file });
  backends.push(b);
  return b;
}

function locker(file = path): Locker {
  const l = createLocker(createSqliteBackend({ path: file }));
  lockers.push(l);
  return l;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const owner = (digit: string) => digit.repeat(32);
const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

/** A candidate's attempt on `key` by a made-up owner (32 times `digit`), straight to the engine. */
function candidate(
  key: string,
  digit: string,
  value: string,
  waiting: boolean,
  ttlMs = 10_000,
): AttemptRequest {
  return {
    key,
    owner: owner(digit),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: waiting,
    election: { value },
  };
}

const leadership = (key: string, digit: string, term: bigint): LeaseRef => ({
  key,
  owner: owner(digit),
  fencingToken: term,
  election: true,
});

/** Rows of the file, through a connection of the test's own. */
function rows<T>(sql: string, ...params: unknown[]): T[] {
  const db = new Database(path, { readonly: true });
  try {
    db.defaultSafeIntegers(true);
    return db.prepare<unknown[], T>(sql).all(...params);
  } finally {
    db.close();
  }
}

function granted(result: AttemptResult): Granted {
  expect(result.granted).toBe(true);
  return result as Granted;
}

function notGranted(result: AttemptResult): NotGranted {
  expect(result.granted).toBe(false);
  return result as NotGranted;
}

/** Timers alive in this process now (`Timeout` resources). */
function timers(): number {
  return process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
}

/** Resolves once `test()` holds, or rejects after `ms`. */
async function until(test: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!test()) {
    if (Date.now() > deadline) throw new Error('condition not reached');
    await sleep(5);
  }
}

describe('SQLite election: rows', () => {
  it('the leader row holds owner, term and value; the line is apart; lock and semaphore untouched', async () => {
    const key = `el:rows:${randomUUID()}`;
    const b = backend();
    const l = locker();
    // The lock and a permit of the same key, held before and during the election.
    const lock = await l.acquire(key, { ttlMs: 30_000 });
    const permit = await l.semaphore(key, { permits: 1 }).acquire({ ttlMs: 30_000 });
    const lead = granted(await b.attempt(candidate(key, 'a', 'host-a', true)));
    expect(lead.token).toBeGreaterThan(permit.fencingToken);
    const waiting = notGranted(await b.attempt(candidate(key, 'b', 'host-b', true)));
    expect(waiting.queued).toBe(true);
    expect(notGranted(await b.attempt(candidate(key, 'c', 'host-c', false))).queued).toBe(false);
    expect(rows('SELECT owner, token, value FROM fencelock_leaders WHERE key = ?', key)).toEqual([
      { owner: owner('a'), token: lead.token, value: 'host-a' },
    ]);
    expect(rows('SELECT owner FROM fencelock_candidates WHERE key = ?', key)).toEqual([
      { owner: owner('b') },
    ]);
    // Nothing of the election in the lock's or the semaphore's tables, and `list` leaves it out.
    expect(rows('SELECT owner FROM fencelock_leases WHERE key = ?', key)).toEqual([
      { owner: lock.owner },
    ]);
    expect(rows('SELECT owner FROM fencelock_waiters WHERE key = ?', key)).toEqual([]);
    expect(rows('SELECT owner FROM fencelock_permits WHERE key = ?', key)).toEqual([
      { owner: permit.owner },
    ]);
    const page = await b.list!({ prefix: key, cursor: null, pageSize: 10 });
    expect(page.entries.map((e) => [e.mode, e.holders[0]!.owner])).toEqual([
      ['write', lock.owner],
      ['permits', permit.owner],
    ]);
    expect((await b.inspect(key)).holder?.owner).toBe(lock.owner);

    // A release of the leadership leaves the lock and the permit held; the value goes with it.
    expect(await b.release(leadership(key, 'a', lead.token))).toBe('released');
    expect(rows('SELECT * FROM fencelock_leaders WHERE key = ?', key)).toEqual([]);
    expect((await b.inspect(key)).holder?.owner).toBe(lock.owner);
    expect(await permit.release()).toBe('released');
    expect(await lock.release()).toBe('released');
    // The lock's release does not touch the election either.
    const next = granted(await b.attempt(candidate(key, 'b', 'host-b', true)));
    expect(await b.leader!(key)).toMatchObject({ owner: owner('b'), value: 'host-b' });
    await b.abandon(candidate(key, 'b', 'host-b', true));
    expect(await b.leader!(key)).toBeNull();
    expect(rows('SELECT * FROM fencelock_candidates WHERE key = ?', key)).toEqual([]);
    expect(next.token).toBeGreaterThan(lead.token);
  });

  it('a repeated attempt by the leader (a lost reply) answers its term and keeps its proclaimed value', async () => {
    const key = `el:again:${randomUUID()}`;
    const b = backend();
    const first = granted(await b.attempt(candidate(key, 'a', 'v1', true, 1_000)));
    expect(await b.proclaim!(leadership(key, 'a', first.token), 'v2')).toBe('proclaimed');
    const again = granted(await b.attempt(candidate(key, 'a', 'v1', true, 20_000)));
    expect(again.token).toBe(first.token);
    const leader = await b.leader!(key);
    expect(leader).toMatchObject({ owner: owner('a'), term: first.token, value: 'v2' });
    // The repeated attempt refreshed the grant to its TTL.
    expect(leader!.ttlMs).toBeGreaterThan(10_000);
    expect(await b.release(leadership(key, 'a', first.token))).toBe('released');
  });

  it('proclaim is a compare-and-set of owner and term', async () => {
    const key = `el:cas:${randomUUID()}`;
    const b = backend();
    expect(await b.proclaim!(leadership(key, 'a', 1n), 'x')).toBe('not-held');
    const first = granted(await b.attempt(candidate(key, 'a', 'a1', false, 150)));
    // Another owner, or the leader with another term, stores nothing.
    expect(await b.proclaim!(leadership(key, 'b', first.token), 'b')).toBe('not-owner');
    expect(await b.proclaim!(leadership(key, 'a', first.token - 1n), 'old')).toBe('not-owner');
    expect(await b.renew(leadership(key, 'a', first.token - 1n), 1_000)).toEqual({
      ok: false,
      reason: 'not-owner',
    });
    expect((await b.leader!(key))?.value).toBe('a1');
    // A lapsed leader stores nothing, and its renewal is refused.
    await sleep(250);
    expect(await b.proclaim!(leadership(key, 'a', first.token), 'late')).toBe('not-held');
    expect(await b.renew(leadership(key, 'a', first.token), 1_000)).toEqual({
      ok: false,
      reason: 'not-held',
    });
    expect(await b.leader!(key)).toBeNull();
    // The next leader's term is greater; the old term's proclaim is refused, its value stays.
    const second = granted(await b.attempt(candidate(key, 'b', 'b1', false)));
    expect(second.token).toBeGreaterThan(first.token);
    expect(await b.proclaim!(leadership(key, 'a', first.token), 'stale')).toBe('not-owner');
    expect(await b.release(leadership(key, 'a', first.token))).toBe('not-owner');
    expect(await b.leader!(key)).toMatchObject({
      owner: owner('b'),
      term: second.token,
      value: 'b1',
    });
    expect(await b.release(leadership(key, 'b', second.token))).toBe('released');
  });
});

describe('SQLite election: terms', () => {
  it('keep increasing after the election stood idle, its rows were swept, and the file was opened again', async () => {
    const key = `el:terms:${randomUUID()}`;
    const file = join(dir, `terms-${randomUUID()}.db`);
    const b = backend(file);
    const first = granted(await b.attempt(candidate(key, 'a', 'a', false, 50)));
    // The grant lapses unreleased; other keys' grants sweep its row.
    await sleep(100);
    const other = granted(await b.attempt(candidate(`${key}:other`, 'c', 'c', false)));
    const rowsOf = (k: string) => {
      const db = new Database(file, { readonly: true });
      try {
        return db.prepare('SELECT key FROM fencelock_leaders WHERE key = ?').all(k);
      } finally {
        db.close();
      }
    };
    expect(rowsOf(key)).toEqual([]);
    expect(other.token).toBeGreaterThan(first.token);
    await b.close();
    // Another process opens the file later: the election has no row at all, and its next term
    // is above both earlier grants (the counter is the file's, never reset).
    const reopened = backend(file);
    const second = granted(await reopened.attempt(candidate(key, 'b', 'b', false)));
    expect(second.token).toBeGreaterThan(other.token);
    expect((await reopened.leader!(key))?.term).toBe(second.token);
  });
});

describe('SQLite election: watches', () => {
  it("connections see each other's grants, proclaims and releases", async () => {
    const key = `el:watch:${randomUUID()}`;
    const [a, b, watcher] = [backend(), backend(), backend()];
    let calls = 0;
    const watch = await watcher.watchElection!(key, () => {
      calls += 1;
    });
    expect(watch.recheckAfterMs).toBe(2_000);
    // A commit elsewhere that leaves the election as it was is not a change.
    await (await locker().acquire(key)).release();
    await sleep(100);
    expect(calls).toBe(0);

    const first = granted(await a.attempt(candidate(key, 'a', 'a1', false)));
    await until(() => calls === 1);
    expect(await watcher.leader!(key)).toMatchObject({ owner: owner('a'), value: 'a1' });
    expect(await a.proclaim!(leadership(key, 'a', first.token), 'a2')).toBe('proclaimed');
    await until(() => calls === 2);
    expect((await b.leader!(key))?.value).toBe('a2');
    // A candidate of another connection waits in line and is woken by the release.
    const waiting = notGranted(await b.attempt(candidate(key, 'b', 'b1', true)));
    const woken = waiting.waitForChange!(new AbortController().signal, 10_000);
    await sleep(100);
    const releasedAt = performance.now();
    expect(await a.release(leadership(key, 'a', first.token))).toBe('released');
    await woken;
    expect(performance.now() - releasedAt).toBeLessThan(1_000);
    await until(() => calls === 3);
    const second = granted(await b.attempt(candidate(key, 'b', 'b1', true)));
    await until(() => calls === 4);
    expect(await watcher.leader!(key)).toMatchObject({ owner: owner('b'), term: second.token });
    // The watcher's own connection's commits too (they do not move its data_version).
    expect(await watcher.abandon(candidate(key, 'b', '', false))).toBeUndefined();
    await until(() => calls === 5);
    expect(await watcher.leader!(key)).toBeNull();
    watch.stop();
    watch.stop();
    await a.attempt(candidate(key, 'a', 'after-stop', false));
    await sleep(100);
    expect(calls).toBe(5);
  });

  it('one poller per backend, while armed only; no timer after stop() or close()', async () => {
    const b = backend();
    const a = backend();
    const seen = new Map<string, number>();
    const keys = Array.from({ length: 20 }, (_, i) => `el:poller:${i}:${randomUUID()}`);
    const onChange = (key: string) => () => seen.set(key, (seen.get(key) ?? 0) + 1);
    // Timers are counted across awaits that settle without a turn of the event loop, so that
    // other timers of the process cannot come or go in between.
    const idle = timers();
    const watches = [await b.watchElection!(keys[0]!, onChange(keys[0]!))];
    expect(timers()).toBe(idle + 1);
    watches.push(
      ...(await Promise.all(keys.slice(1).map((key) => b.watchElection!(key, onChange(key))))),
    );
    expect(timers()).toBe(idle + 1);
    // One grant: only its election's watch is called.
    const lead = granted(await a.attempt(candidate(keys[7]!, 'a', 'x', false)));
    await until(() => seen.get(keys[7]!) === 1);
    await sleep(60);
    expect([...seen]).toEqual([[keys[7]!, 1]]);
    const armed = timers();
    for (const watch of watches.slice(1)) watch.stop();
    expect(timers()).toBe(armed);
    watches[0]!.stop();
    expect(timers()).toBe(armed - 1);
    // Armed again, then the backend closes: no callback and no timer after it.
    let late = 0;
    const unarmed = timers();
    await b.watchElection!(keys[7]!, () => {
      late += 1;
    });
    expect(timers()).toBe(unarmed + 1);
    await b.close();
    expect(timers()).toBe(unarmed);
    await a.release(leadership(keys[7]!, 'a', lead.token));
    await sleep(100);
    expect(late).toBe(0);
    await expect(b.watchElection!(keys[0]!, () => {})).rejects.toThrow(/closed/);
  });
});

/** The layout of the version before elections: locks, semaphores, read locks. */
const READ_LOCKS_SCHEMA = `
CREATE TABLE fencelock_leases (
  key TEXT PRIMARY KEY, owner TEXT NOT NULL, token INTEGER NOT NULL, expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX fencelock_leases_expires_at ON fencelock_leases (expires_at);
CREATE TABLE fencelock_token (id INTEGER PRIMARY KEY CHECK (id = 1), last_token INTEGER NOT NULL);
INSERT INTO fencelock_token (id, last_token) VALUES (1, 0);
CREATE TABLE fencelock_waiters (
  key TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  reads INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX fencelock_waiters_line ON fencelock_waiters (key, seq);
CREATE INDEX fencelock_waiters_expires_at ON fencelock_waiters (expires_at);
CREATE TABLE fencelock_permits (
  key TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL, permits INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX fencelock_permits_expires_at ON fencelock_permits (expires_at);
CREATE TABLE fencelock_permit_waiters (
  key TEXT NOT NULL, owner TEXT NOT NULL, seq INTEGER NOT NULL, permits INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX fencelock_permit_waiters_line ON fencelock_permit_waiters (key, seq);
CREATE INDEX fencelock_permit_waiters_expires_at ON fencelock_permit_waiters (expires_at);
CREATE TABLE fencelock_readers (
  key TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL, expires_at INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX fencelock_readers_expires_at ON fencelock_readers (expires_at);
CREATE VIEW fencelock_fences (key, last_token) AS SELECT NULL, NULL WHERE 0;
`;

describe('SQLite election: a file of the version before elections', () => {
  it('gets the election tables; its lock and token counter carry on', async () => {
    const file = join(dir, 'read-locks.db');
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.exec(READ_LOCKS_SCHEMA);
    db.exec(`UPDATE fencelock_token SET last_token = 40 WHERE id = 1`);
    db.exec(`INSERT INTO fencelock_leases VALUES ('k', '${owner('c')}', 40, ${NOW} + 60000)`);
    db.close();

    const l = locker(file);
    const leading = await l.election('k').campaign('here', { ttlMs: 10_000 });
    expect(leading.term).toBe(41n);
    expect((await l.inspect('k')).holder).toMatchObject({ owner: owner('c'), fencingToken: 40n });
    const check = new Database(file, { readonly: true });
    const names = check
      .prepare<[], { name: string }>(
        `SELECT name FROM sqlite_schema WHERE name LIKE 'fencelock_lead%' OR name LIKE 'fencelock_cand%' ORDER BY name`,
      )
      .all()
      .map((r) => r.name);
    check.close();
    expect(names).toEqual([
      'fencelock_candidates',
      'fencelock_candidates_expires_at',
      'fencelock_candidates_line',
      'fencelock_leaders',
      'fencelock_leaders_expires_at',
    ]);
    expect(await leading.resign()).toBe('released');
    const lease = await l.acquire('other');
    expect(lease.fencingToken).toBe(42n);
    await lease.release();
  });
});
