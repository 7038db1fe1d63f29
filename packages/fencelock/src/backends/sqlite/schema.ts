/**
 * The SQLite store's tables, and the set-up of a connection to its file: pragmas, the tables and
 * indexes, the move from the per-key counters of earlier versions, and the deletion of expired
 * rows (all of them at set-up, a bounded batch at each grant: `prepareSweep`). Every statement of
 * the backend reads time through `NOW`.
 */
import type Database from 'better-sqlite3';
import type { SqliteUrlConfig } from './url.js';

/** Engine time in ms. */
export const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

/**
 * The tables. `fencelock_token` has one row: the highest fencing token issued in this database,
 * for any key, semaphore and election; it never decreases. The expiry indexes serve the sweep of
 * expired rows.
 *
 * A semaphore's state is kept apart from the locks' (a lock and a semaphore of one key never
 * meet): `fencelock_permits` has one row per live permit (its holder, fencing token and expiry)
 * and `fencelock_permit_waiters` the semaphore's line, the shape of `fencelock_waiters`. Each row
 * of either carries the permit count its holder or waiter uses, so the count in use is stored
 * with the semaphore's state and goes with its last row: nothing stays of an idle semaphore.
 * Files of earlier versions get these tables (and nothing else changes) when a process of this
 * version opens them; an earlier version ignores them.
 *
 * Read locks: `fencelock_readers` has one row per live read grant (holder, fencing token from the
 * same counter, expiry), and each entry of a key's line says its mode (`fencelock_waiters.reads`,
 * added to files of earlier versions). While readers hold a key, its row in `fencelock_leases` is
 * a stand-in owned by `READERS_OWNER`, so a writer's attempt reads one row as before, and a
 * process of an earlier version on the same file finds the key held too.
 *
 * Leader elections: `fencelock_leaders` has one row per election with a live leader (its owner,
 * its term, a fencing token from the same counter, the value it campaigned with or last
 * proclaimed, and its expiry) and `fencelock_candidates` the election's line, the shape of
 * `fencelock_waiters`: apart from the locks' and semaphores' tables, so the election of a key
 * never meets its lock or semaphore. The value goes with the leader's row; nothing stays of an
 * idle election, and its next term is still above every earlier one (the counter is the file's).
 * Files of earlier versions get these tables when a process of this version opens them (nothing
 * else of them changes); an earlier version ignores them.
 *
 * Lock-delay (`AttemptRequest.lockDelayMs`): the rows of exclusive grants (`fencelock_leases`,
 * `fencelock_leaders`) carry the grant's delay in `lock_delay_ms` (0: none). The row's expiry is
 * the end of the grant (a renewal moves it); a row that expired unreleased stays in place, held
 * by nobody, until `expires_at + lock_delay_ms` (`OCCUPIED_UNTIL`), and the key (the election) is
 * granted to nobody until then. A release that deletes the live row clears it; the sweep deletes
 * the row once that time has passed. Files of earlier versions get the column (0 in every row
 * already there, and in the rows an earlier version still writes) when a process of this version
 * opens them; an earlier version on the same file ignores the delays (it sweeps and replaces any
 * expired row).
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  lock_delay_ms INTEGER NOT NULL DEFAULT 0  -- held by nobody until expires_at + this, if unreleased
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
  seq        INTEGER NOT NULL,  -- place in the key's line, head first
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  reads      INTEGER NOT NULL DEFAULT 0,  -- 1: a reader; 0: a writer
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_waiters_line ON fencelock_waiters (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_waiters_expires_at ON fencelock_waiters (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_permits (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  permits    INTEGER NOT NULL,  -- the semaphore's permit count its holder uses
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_permits_expires_at ON fencelock_permits (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_permit_waiters (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,  -- place in the semaphore's line, head first
  permits    INTEGER NOT NULL,  -- the semaphore's permit count its waiter uses
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_permit_waiters_line ON fencelock_permit_waiters (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_permit_waiters_expires_at
  ON fencelock_permit_waiters (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_readers (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_readers_expires_at ON fencelock_readers (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_leaders (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,  -- the leader's term
  value      TEXT NOT NULL,     -- what the leader campaigned with or last proclaimed
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  lock_delay_ms INTEGER NOT NULL DEFAULT 0  -- led by nobody until expires_at + this, if unreleased
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_leaders_expires_at ON fencelock_leaders (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_candidates (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,  -- place in the election's line, head first
  expires_at INTEGER NOT NULL,  -- engine clock, ms since the epoch
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_candidates_line ON fencelock_candidates (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_candidates_expires_at ON fencelock_candidates (expires_at);
`;

/**
 * The owner of a lock's row in `fencelock_leases` while readers hold the key (never a valid
 * owner id, which is hex): its token is the newest reader's and its expiry the latest of theirs,
 * so a writer (of this version or an earlier one) finds the key held.
 */
export const READERS_OWNER = '';

/**
 * Files of versions before read locks have a line without modes: each entry gets `reads` (1 for
 * a reader, 0 for a writer); the entries already there, and those an earlier version still
 * adds, are writers.
 */
const ADD_LINE_MODES = `ALTER TABLE fencelock_waiters ADD COLUMN reads INTEGER NOT NULL DEFAULT 0;`;

/**
 * Files of versions before lock-delays: the rows of exclusive grants get `lock_delay_ms` (0 in
 * the rows already there). SQLite adds a column with a constant default without rewriting rows.
 */
const ADD_LOCK_DELAYS = ['fencelock_leases', 'fencelock_leaders'].map((table) => ({
  table,
  sql: `ALTER TABLE ${table} ADD COLUMN lock_delay_ms INTEGER NOT NULL DEFAULT 0;`,
}));

/**
 * Until when a row of `fencelock_leases` or `fencelock_leaders` keeps its key (its election) from
 * others, ms on the engine clock: its expiry while the grant lives, then the end of its
 * lock-delay (the expiry itself when it has none). A row is live while `expires_at > NOW`, and in
 * its lock-delay while `expires_at <= NOW < OCCUPIED_UNTIL`.
 */
export const OCCUPIED_UNTIL = 'expires_at + lock_delay_ms';

/**
 * The tables whose rows expire (each has an `expires_at` index), their primary keys, and when a
 * row may be deleted (`gone`: past its lock-delay for the exclusive grants' tables). The
 * condition keeps `expires_at <= NOW` first so that the expiry index bounds the scan: rows in
 * their lock-delay (at most `MAX_LOCK_DELAY_MS` past their expiry) are passed over.
 */
const EXPIRING_TABLES = [
  { table: 'fencelock_leases', primaryKey: 'key', gone: `${OCCUPIED_UNTIL} <= ${NOW}` },
  { table: 'fencelock_waiters', primaryKey: 'key, owner', gone: '1' },
  { table: 'fencelock_permits', primaryKey: 'key, owner', gone: '1' },
  { table: 'fencelock_permit_waiters', primaryKey: 'key, owner', gone: '1' },
  { table: 'fencelock_readers', primaryKey: 'key, owner', gone: '1' },
  { table: 'fencelock_leaders', primaryKey: 'key', gone: `${OCCUPIED_UNTIL} <= ${NOW}` },
  { table: 'fencelock_candidates', primaryKey: 'key, owner', gone: '1' },
] as const;

/**
 * Most expired rows of each table one grant deletes (oldest expiry first). A grant adds at most
 * one row, so expired rows never pile up while keys are being locked; a process opening the file
 * deletes every expired row at once.
 */
export const SWEEP_LIMIT = 100;

/**
 * Files written by earlier versions kept a counter per key in `fencelock_fences`, forever. The
 * global counter starts above every token those counters (and the lease rows) issued, then the
 * table is dropped (and `BLOCK_PER_KEY_COUNTERS` puts a view in its place).
 */
const MIGRATE_PER_KEY_COUNTERS = `
UPDATE fencelock_token SET last_token = max(
  last_token,
  (SELECT coalesce(max(last_token), 0) FROM fencelock_fences),
  (SELECT coalesce(max(token), 0) FROM fencelock_leases)
) WHERE id = 1;
DROP TABLE fencelock_fences;
`;

/**
 * The empty, read-only `fencelock_fences` view, in every file (new ones too): an older fencelock
 * process finds it instead of creating a fresh per-key table whose counters would start again
 * at 1, and its grants fail (a view cannot take the upsert) instead of issuing tokens lower than
 * ones already issued.
 */
const BLOCK_PER_KEY_COUNTERS = `
CREATE VIEW IF NOT EXISTS fencelock_fences (key, last_token) AS SELECT NULL, NULL WHERE 0;
`;

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/**
 * Set the connection up and create the tables. Switching a new file to WAL can answer
 * SQLITE_BUSY at once, without waiting for the busy timeout, while another process opens the
 * same file; so the set-up is retried with a short jittered pause, within `busyTimeoutMs`.
 */
export function initialize(db: Database.Database, config: SqliteUrlConfig): void {
  db.defaultSafeIntegers(true);
  db.pragma(`busy_timeout = ${config.busyTimeoutMs}`);
  const deadline = performance.now() + Math.max(config.busyTimeoutMs, 1000);
  for (;;) {
    try {
      if (config.path !== ':memory:') db.pragma('journal_mode = WAL');
      db.pragma('synchronous = NORMAL');
      db.transaction(() => setUpSchema(db)).immediate();
      return;
    } catch (error) {
      const busy = (error as { code?: string }).code?.startsWith('SQLITE_BUSY') === true;
      if (!busy || performance.now() >= deadline) throw error;
      Atomics.wait(sleepCell, 0, 0, 5 + Math.random() * 20);
    }
  }
}

/**
 * Create what is missing, move a file of the per-key-counter layout to the global counter, add
 * the columns of later versions (line modes, lock-delays), and delete every expired row (a row of
 * an exclusive grant once past its lock-delay): one IMMEDIATE transaction (the caller's), so two processes
 * opening the file at once do it one after the other, and the second finds nothing to move.
 */
function setUpSchema(db: Database.Database): void {
  db.exec(SCHEMA);
  const perKeyCounters = db
    .prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'fencelock_fences'`)
    .get();
  if (perKeyCounters !== undefined) db.exec(MIGRATE_PER_KEY_COUNTERS);
  db.exec(BLOCK_PER_KEY_COUNTERS);
  const lineModes = db
    .prepare(`SELECT 1 FROM pragma_table_info('fencelock_waiters') WHERE name = 'reads'`)
    .get();
  if (lineModes === undefined) db.exec(ADD_LINE_MODES);
  for (const { table, sql } of ADD_LOCK_DELAYS) {
    const delays = db
      .prepare(`SELECT 1 FROM pragma_table_info('${table}') WHERE name = 'lock_delay_ms'`)
      .get();
    if (delays === undefined) db.exec(sql);
  }
  for (const { table, gone } of EXPIRING_TABLES) {
    db.prepare(`DELETE FROM ${table} WHERE expires_at <= ${NOW} AND ${gone}`).run();
  }
}

/**
 * Prepare the draw of the next fencing token from the database's one counter (`fencelock_token`),
 * for a grant's transaction: every grant of every key, semaphore and election takes the next
 * value.
 */
export function prepareNextToken(db: Database.Database): () => bigint {
  const bump = db.prepare<[], { last_token: bigint }>(
    `UPDATE fencelock_token SET last_token = last_token + 1 WHERE id = 1 RETURNING last_token`,
  );
  return () => bump.get()!.last_token;
}

/**
 * Prepare the sweep a grant runs (lock, permit or leader): it deletes up to `SWEEP_LIMIT` expired
 * rows of each table (holders and waiters that vanished), oldest expiry first, so no table keeps
 * rows of idle keys for long while any key is granted. A row of an exclusive grant that expired
 * unreleased stays until its lock-delay ended (`OCCUPIED_UNTIL`). Lapsed read grants only with `withReaders` (read
 * grants sweep them, so a plain write lock pays nothing for read locks here; a lapsed read grant
 * is never counted, and its stand-in row in `fencelock_leases` goes with every sweep).
 */
export function prepareSweep(db: Database.Database, withReaders = false): () => void {
  const tables = EXPIRING_TABLES.filter((t) => withReaders || t.table !== 'fencelock_readers');
  const sweeps = tables.map(({ table, primaryKey, gone }) =>
    db.prepare(
      `DELETE FROM ${table} WHERE (${primaryKey}) IN (
         SELECT ${primaryKey} FROM ${table} WHERE expires_at <= ${NOW} AND ${gone}
         ORDER BY expires_at LIMIT ${SWEEP_LIMIT}
       )`,
    ),
  );
  return () => {
    for (const sweep of sweeps) sweep.run();
  };
}
