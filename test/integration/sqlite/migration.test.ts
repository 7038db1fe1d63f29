/**
 * A database file written by the per-key-counter layout (`fencelock_fences`, one row per key
 * ever locked) keeps working: the first process that opens it moves it to the file's one token
 * counter, starting above every token the old counters and lease rows issued, and drops the old
 * table; an older fencelock can no longer start on the file (it would count again from 1).
 * Several processes opening the same old file at once migrate it once. A file of the version
 * before semaphores (locks only) gets the semaphore tables, and its locks and token counter
 * carry on. A file of the version before read locks (semaphores, a line without modes) gets the
 * readers' table and a mode for each line entry (those already there are writers); its locks,
 * line and token counter carry on, and a process of that version finds a key held by readers
 * held.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../../../packages/fencelock/src/backends/sqlite/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-migration-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The layout of the per-key-counter version, as it created it. */
const OLD_SCHEMA = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fencelock_fences (
  key        TEXT PRIMARY KEY,
  last_token INTEGER NOT NULL
) WITHOUT ROWID;
`;

/** The old version's grant statement: bump the key's own counter. */
const OLD_BUMP = `INSERT INTO fencelock_fences (key, last_token) VALUES (?, 1)
  ON CONFLICT (key) DO UPDATE SET last_token = last_token + 1 RETURNING last_token`;

const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

/**
 * An old-layout file: counters of `a` (7) and `b` (41); a live lease of `c` (token 3) whose
 * counter row is `c` (3); an expired lease of `d` with token 45, higher than any counter (a row
 * the old version could not have left, to show the lease rows count too).
 */
function oldFile(name: string): string {
  const path = join(dir, name);
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.exec(OLD_SCHEMA);
  db.exec(`INSERT INTO fencelock_fences VALUES ('a', 7), ('b', 41), ('c', 3)`);
  db.exec(`INSERT INTO fencelock_leases VALUES
    ('c', '${'c'.repeat(32)}', 3, ${NOW} + 60000),
    ('d', '${'d'.repeat(32)}', 45, ${NOW} - 1000)`);
  db.close();
  return path;
}

/** The store's objects in a file opened by this version, by name. */
const CURRENT_OBJECTS = [
  'table fencelock_candidates',
  'index fencelock_candidates_expires_at',
  'index fencelock_candidates_line',
  'view fencelock_fences',
  'table fencelock_leaders',
  'index fencelock_leaders_expires_at',
  'table fencelock_leases',
  'index fencelock_leases_expires_at',
  'table fencelock_permit_waiters',
  'index fencelock_permit_waiters_expires_at',
  'index fencelock_permit_waiters_line',
  'table fencelock_permits',
  'index fencelock_permits_expires_at',
  'table fencelock_readers',
  'index fencelock_readers_expires_at',
  'table fencelock_token',
  'table fencelock_waiters',
  'index fencelock_waiters_expires_at',
  'index fencelock_waiters_line',
];

function objects(path: string): { type: string; name: string }[] {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare<[], { type: string; name: string }>(
        `SELECT type, name FROM sqlite_schema WHERE name LIKE 'fencelock%' ORDER BY name`,
      )
      .all();
  } finally {
    db.close();
  }
}

describe('SQLite: a file made by this version', () => {
  it("refuses an older fencelock's grant too, which would start a key's tokens again at 1", async () => {
    const path = join(dir, 'fresh.db');
    const locker = createLocker(createSqliteBackend({ path }));
    const lease = await locker.acquire('k0');
    await lease.release();
    await locker.close();
    const db = new Database(path);
    // The older version's set-up (CREATE TABLE IF NOT EXISTS) finds the view and does nothing.
    db.exec(OLD_SCHEMA);
    expect(() => db.prepare(OLD_BUMP)).toThrow(/view/);
    db.close();
  });
});

/** The layout of the version before semaphores (one token counter, locks and their line). */
const LOCKS_ONLY_SCHEMA = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_leases_expires_at ON fencelock_leases (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_token (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  last_token INTEGER NOT NULL
);
INSERT OR IGNORE INTO fencelock_token (id, last_token) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS fencelock_waiters (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_waiters_line ON fencelock_waiters (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_waiters_expires_at ON fencelock_waiters (expires_at);
CREATE VIEW IF NOT EXISTS fencelock_fences (key, last_token) AS SELECT NULL, NULL WHERE 0;
`;

describe('SQLite: a file of the version before semaphores', () => {
  it('gets the semaphore tables; its live lock and token counter carry on', async () => {
    const path = join(dir, 'locks-only.db');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec(LOCKS_ONLY_SCHEMA);
    db.exec(`UPDATE fencelock_token SET last_token = 20 WHERE id = 1`);
    db.exec(`INSERT INTO fencelock_leases VALUES ('k', '${'c'.repeat(32)}', 20, ${NOW} + 60000)`);
    db.close();

    const locker = createLocker(createSqliteBackend({ path }));
    expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
    // The semaphore "k" is not the lock "k", still held; its token continues the one counter.
    const permit = await locker.semaphore('k', { permits: 2 }).tryAcquire({ ttlMs: 10_000 });
    expect(permit?.fencingToken).toBe(21n);
    expect((await locker.inspect('k')).holder).toMatchObject({
      owner: 'c'.repeat(32),
      fencingToken: 20n,
    });
    const lease = await locker.acquire('other');
    expect(lease.fencingToken).toBe(22n);
    expect(await permit!.release()).toBe('released');
    expect(await lease.release()).toBe('released');
    await locker.close();

    // The earlier version's set-up still runs on the file and changes nothing of it.
    const earlier = new Database(path);
    earlier.exec(LOCKS_ONLY_SCHEMA);
    earlier.close();
    expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
    const reopened = createLocker(createSqliteBackend({ path }));
    const again = await reopened.semaphore('k', { permits: 2 }).tryAcquire();
    expect(again?.fencingToken).toBe(23n);
    expect(await again!.release()).toBe('released');
    await reopened.close();
  });
});

describe('SQLite: a file of the per-key-counter layout', () => {
  it('moves to one counter above every token issued before, and keeps its live lease', async () => {
    const path = oldFile('single.db');
    const locker = createLocker(createSqliteBackend({ path }));
    const c = await locker.inspect('c');
    expect(c.holder).toMatchObject({ owner: 'c'.repeat(32), fencingToken: 3n });
    // The expired row of `d` went when the file was opened.
    const a = await locker.acquire('a');
    expect(a.fencingToken).toBe(46n);
    const b = await locker.acquire('b');
    expect(b.fencingToken).toBe(47n);
    expect(await locker.tryAcquire('c')).toBeNull();
    await a.release();
    await b.release();
    const again = await locker.acquire('a');
    expect(again.fencingToken).toBe(48n);
    await again.release();
    await locker.close();

    expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
    const db = new Database(path);
    expect(db.prepare('SELECT key FROM fencelock_leases').all()).toEqual([{ key: 'c' }]);
    // The old version's grant cannot run on the migrated file.
    expect(() => db.prepare(OLD_BUMP)).toThrow(/view/);
    db.close();

    // Opening it again migrates nothing twice and keeps counting.
    const reopened = createLocker(createSqliteBackend({ path }));
    const next = await reopened.acquire('b');
    expect(next.fencingToken).toBe(49n);
    await next.release();
    await reopened.close();
  });

  describe('opened by several processes at once', () => {
    let buildIndex: string;
    beforeAll(async () => {
      buildIndex = join((await privateBuild('sqlite-migration')).dir, 'index.js');
    }, 180_000);

    /** A process that opens `path` at `start` (epoch ms), takes key `n` once and prints its token. */
    const OPENER = `
const { createLocker } = await import(process.env.FL_DIST);
while (Date.now() < Number(process.env.FL_START)) {}
const locker = createLocker('sqlite:' + process.env.FL_PATH);
const lease = await locker.acquire('k' + process.env.FL_N);
process.stdout.write(String(lease.fencingToken));
await lease.release();
await locker.close();
`;

    function opener(path: string, start: number, n: number): Promise<string> {
      return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, ['--input-type=module', '-e', OPENER], {
          cwd: ROOT,
          env: {
            ...process.env,
            FL_DIST: buildIndex,
            FL_PATH: path,
            FL_START: String(start),
            FL_N: String(n),
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        });
        let out = '';
        let err = '';
        child.stdout.on('data', (d) => {
          out += d;
        });
        child.stderr.on('data', (d) => {
          err += d;
        });
        child.on('error', reject);
        child.on('exit', (code) =>
          code === 0 ? resolve(out) : reject(new Error(`opener ${n}: exit ${code}: ${err}`)),
        );
      });
    }

    it('migrates once: every token is above the old ones, and no token repeats', async () => {
      for (let round = 0; round < 3; round++) {
        const path = oldFile(`race-${round}.db`);
        const start = Date.now() + 700;
        const tokens = await Promise.all([0, 1, 2, 3].map((n) => opener(path, start, n)));
        const values = tokens.map(BigInt).sort((x, y) => (x < y ? -1 : 1));
        expect(values).toEqual([46n, 47n, 48n, 49n]);
        expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
      }
    }, 120_000);
  });
});

/** The layout of the version before read locks: locks, semaphores, a line without modes. */
const SEMAPHORES_SCHEMA = `${LOCKS_ONLY_SCHEMA}
CREATE TABLE IF NOT EXISTS fencelock_permits (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  permits    INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_permits_expires_at ON fencelock_permits (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_permit_waiters (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  permits    INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_permit_waiters_line ON fencelock_permit_waiters (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_permit_waiters_expires_at
  ON fencelock_permit_waiters (expires_at);
`;

/** The earlier version's attempt reads the key's one row (and grants only when it is free). */
const EARLIER_READ = `SELECT owner, token, expires_at - ${NOW} AS remaining FROM fencelock_leases WHERE key = ?`;

describe('SQLite: a file of the version before read locks', () => {
  it('gets the readers and the line modes; its lock, line and counter carry on', async () => {
    const path = join(dir, 'semaphores.db');
    const db = new Database(path);
    db.pragma('journal_mode = WAL');
    db.exec(SEMAPHORES_SCHEMA);
    db.exec(`UPDATE fencelock_token SET last_token = 30 WHERE id = 1`);
    // "w" is held by a writer; "q" is free with a writer waiting in its line.
    db.exec(`INSERT INTO fencelock_leases VALUES ('w', '${'c'.repeat(32)}', 30, ${NOW} + 60000)`);
    db.exec(`INSERT INTO fencelock_waiters VALUES ('q', '${'e'.repeat(32)}', 1, ${NOW} + 60000)`);
    db.close();

    const locker = createLocker(createSqliteBackend({ path }));
    expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
    // The writer of "w" still holds it: a reader is kept out.
    expect(await locker.tryAcquire('w', { mode: 'read' })).toBeNull();
    // The entry already in the line of "q" is a writer's: a reader does not pass it.
    expect(await locker.tryAcquire('q', { mode: 'read' })).toBeNull();
    const reader = await locker.tryAcquire('r', { mode: 'read', ttlMs: 10_000 });
    expect(reader?.fencingToken).toBe(31n);

    // A process of the earlier version finds "r" held (its grant would need a free row).
    const earlier = new Database(path);
    earlier.defaultSafeIntegers(true);
    earlier.exec(SEMAPHORES_SCHEMA);
    const row = earlier
      .prepare<[string], { owner: string; remaining: bigint }>(EARLIER_READ)
      .get('r');
    expect(row?.remaining).toBeGreaterThan(5_000n);
    expect(row?.owner).not.toBe(reader!.owner);
    // Its line entries, without a mode, are writers'.
    earlier.exec(
      `INSERT INTO fencelock_waiters (key, owner, seq, expires_at) VALUES ('r', '${'f'.repeat(32)}', 1, ${NOW} + 60000)`,
    );
    earlier.close();
    expect(await locker.tryAcquire('r', { mode: 'read' })).toBeNull();
    expect(await reader!.release()).toBe('released');
    expect(objects(path).map((o) => `${o.type} ${o.name}`)).toEqual(CURRENT_OBJECTS);
    const check = new Database(path, { readonly: true });
    expect(check.prepare(EARLIER_READ).get('r')).toBeUndefined();
    check.close();
    await locker.close();
  });
});
