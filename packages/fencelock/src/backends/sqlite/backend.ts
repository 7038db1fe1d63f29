/**
 * The embedded store: a SQLite file (better-sqlite3) shared by the processes of one host. Grant,
 * renew and release are single IMMEDIATE transactions; the fencing token comes from one counter
 * for the whole database, bumped in the granting transaction, so a key's tokens strictly increase
 * (not consecutively) and nothing of a key stays once its lease row is gone: a release deletes
 * the row, and a row that expired unreleased is deleted by a later grant (see `SWEEP_LIMIT`).
 * Expiry uses SQLite's own clock (`unixepoch('subsec')`), the host's wall clock, which every
 * process on the host shares. There is no change notification, so waiters back off with jitter,
 * bounded by the holder's remaining TTL.
 *
 * One host only: SQLite's locking is unreliable on network file systems, and the lease clock is
 * the host's.
 */
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  LeaseRef,
  LockInfo,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { BackendError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import type { SqliteUrlConfig } from './url.js';

/** Engine time in ms. */
const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

/**
 * The tables. `fencelock_token` has one row: the highest fencing token issued in this database,
 * for any key; it never decreases. The expiry index serves the sweep of expired rows.
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL  -- engine clock, ms since the epoch
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_leases_expires_at ON fencelock_leases (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_token (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  last_token INTEGER NOT NULL
);
INSERT OR IGNORE INTO fencelock_token (id, last_token) VALUES (1, 0);
`;

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

/**
 * Most expired rows of other keys one grant deletes (oldest expiry first). A grant adds at most
 * one row, so expired rows never pile up while keys are being locked; a process opening the file
 * deletes every expired row at once.
 */
const SWEEP_LIMIT = 100;

interface LeaseRow {
  owner: string;
  token: bigint;
  remaining: bigint;
}

const sleepCell = new Int32Array(new SharedArrayBuffer(4));

/**
 * Set the connection up and create the tables. Switching a new file to WAL can answer
 * SQLITE_BUSY at once, without waiting for the busy timeout, while another process opens the
 * same file; so the set-up is retried with a short jittered pause, within `busyTimeoutMs`.
 */
function initialize(db: Database.Database, config: SqliteUrlConfig): void {
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
 * Create what is missing, move a file of the per-key-counter layout to the global counter, and
 * delete every expired lease row: one IMMEDIATE transaction (the caller's), so two processes
 * opening the file at once do it one after the other, and the second finds nothing to move.
 */
function setUpSchema(db: Database.Database): void {
  db.exec(SCHEMA);
  const perKeyCounters = db
    .prepare(`SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'fencelock_fences'`)
    .get();
  if (perKeyCounters !== undefined) db.exec(MIGRATE_PER_KEY_COUNTERS);
  db.exec(BLOCK_PER_KEY_COUNTERS);
  db.prepare(`DELETE FROM fencelock_leases WHERE expires_at <= ${NOW}`).run();
}

/**
 * What to do when better-sqlite3 is installed without its native addon (its install script was
 * skipped, as npm does for scripts that `allowScripts` does not approve, or failed): the
 * `bindings` package's "Could not locate the bindings file" error says only where it looked.
 */
export function addonHint(error: unknown): string {
  const message = error instanceof Error ? error.message : '';
  return message.startsWith('Could not locate the bindings file')
    ? " (better-sqlite3's native addon is not built: run npm rebuild better-sqlite3)"
    : '';
}

/** The SQLite backend. Build it with `createSqliteBackend`. */
export class SqliteBackend implements Backend {
  readonly name = 'sqlite';
  readonly maxTtlMs = MAX_TIMER_MS;
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write'] as const),
    sessions: false,
    queue: false,
    batchRenew: false,
  });
  readonly #db: Database.Database;
  readonly #attempt: (request: AttemptRequest) => AttemptResult;
  readonly #renew: (lease: LeaseRef, ttlMs: number) => RenewResult;
  readonly #release: (lease: LeaseRef) => ReleaseOutcome;
  readonly #abandon: (request: AttemptRequest) => void;
  readonly #inspect: (key: string) => LockInfo;

  constructor(config: SqliteUrlConfig) {
    let db: Database.Database;
    try {
      if (config.path !== ':memory:') mkdirSync(dirname(config.path), { recursive: true });
      db = new Database(config.path);
    } catch (error) {
      throw new BackendError('sqlite', `open of ${config.path}${addonHint(error)}`, error);
    }
    this.#db = db;
    try {
      initialize(db, config);
    } catch (error) {
      db.close();
      throw new BackendError('sqlite', `open of ${config.path}`, error);
    }

    const read = db.prepare<[string], LeaseRow>(
      `SELECT owner, token, expires_at - ${NOW} AS remaining FROM fencelock_leases WHERE key = ?`,
    );
    const refresh = db.prepare<[bigint, string]>(
      `UPDATE fencelock_leases SET expires_at = ${NOW} + ? WHERE key = ?`,
    );
    const bump = db.prepare<[], { last_token: bigint }>(
      `UPDATE fencelock_token SET last_token = last_token + 1 WHERE id = 1 RETURNING last_token`,
    );
    const grant = db.prepare<[string, string, bigint, bigint]>(
      `INSERT OR REPLACE INTO fencelock_leases (key, owner, token, expires_at) VALUES (?, ?, ?, ${NOW} + ?)`,
    );
    const remove = db.prepare<[string]>(`DELETE FROM fencelock_leases WHERE key = ?`);
    const sweep = db.prepare(
      `DELETE FROM fencelock_leases WHERE key IN (
         SELECT key FROM fencelock_leases WHERE expires_at <= ${NOW} ORDER BY expires_at LIMIT ${SWEEP_LIMIT}
       )`,
    );

    this.#attempt = db
      .transaction((request: AttemptRequest): AttemptResult => {
        const ttl = BigInt(request.ttlMs);
        const row = read.get(request.key);
        if (row && row.remaining > 0n) {
          if (row.owner === request.owner) {
            refresh.run(ttl, request.key);
            return { granted: true, token: row.token, ttlMs: request.ttlMs };
          }
          return { granted: false, holderTtlMs: Number(row.remaining) };
        }
        // Expired rows of other keys (holders that never released) go; this key's is replaced.
        sweep.run();
        const token = bump.get()!.last_token;
        grant.run(request.key, request.owner, token, ttl);
        return { granted: true, token, ttlMs: request.ttlMs };
      })
      .immediate.bind(null);

    const holds = (
      row: LeaseRow | undefined,
      lease: LeaseRef,
    ): 'yes' | 'not-held' | 'not-owner' => {
      if (!row || row.remaining <= 0n) return 'not-held';
      return row.owner === lease.owner && row.token === lease.fencingToken ? 'yes' : 'not-owner';
    };

    this.#renew = db
      .transaction((lease: LeaseRef, ttlMs: number): RenewResult => {
        const state = holds(read.get(lease.key), lease);
        if (state !== 'yes') return { ok: false, reason: state };
        refresh.run(BigInt(ttlMs), lease.key);
        return { ok: true, ttlMs };
      })
      .immediate.bind(null);

    this.#release = db
      .transaction((lease: LeaseRef): ReleaseOutcome => {
        const row = read.get(lease.key);
        const state = holds(row, lease);
        // An expired row of this owner is cleaned up too; the answer is still `not-held`. A live
        // row with this owner but another token is not this lease's: it stays (`not-owner`).
        if (state === 'yes' || (state === 'not-held' && row?.owner === lease.owner)) {
          remove.run(lease.key);
        }
        return state === 'yes' ? 'released' : state;
      })
      .immediate.bind(null);

    this.#abandon = db
      .transaction((request: AttemptRequest): void => {
        if (read.get(request.key)?.owner === request.owner) remove.run(request.key);
      })
      .immediate.bind(null);

    this.#inspect = (key: string): LockInfo => {
      const row = read.get(key);
      if (!row || row.remaining <= 0n) return { key, holder: null, lastFencingToken: 0n };
      return {
        key,
        holder: { owner: row.owner, fencingToken: row.token, ttlMs: Number(row.remaining) },
        lastFencingToken: row.token,
      };
    };
  }

  /**
   * One IMMEDIATE transaction: take a free or expired row with a token from the database's
   * counter (deleting up to `SWEEP_LIMIT` expired rows of other keys first), or report the
   * holder's remaining TTL.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    return this.#run('attempt', () => this.#attempt(request));
  }

  /** Move the row's expiry only while owner and token match and it has not expired. */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    return this.#run('renew', () => this.#renew(lease, ttlMs));
  }

  /** Compare-and-delete by owner and token; an expired row of this owner is cleaned up as `not-held`. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    return this.#run('release', () => this.#release(lease));
  }

  /** Delete the row if this owner has it, whatever the token. */
  async abandon(request: AttemptRequest): Promise<void> {
    this.#run('abandon', () => this.#abandon(request));
  }

  /**
   * The unexpired holder. `lastFencingToken` is its token, 0n when the key is free: tokens come
   * from one counter for the whole database and a freed key leaves no row, so nothing per key
   * remains to tell its last token.
   */
  async inspect(key: string): Promise<LockInfo> {
    return this.#run('inspect', () => this.#inspect(key));
  }

  /** Close the database connection. */
  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }

  #run<T>(operation: string, fn: () => T): T {
    if (!this.#db.open)
      throw new BackendError(this.name, operation, new Error('backend is closed'));
    try {
      return fn();
    } catch (error) {
      throw new BackendError(this.name, operation, error);
    }
  }
}
