/**
 * The embedded store: a SQLite file (better-sqlite3) shared by the processes of one host. Grant,
 * renew and release are single IMMEDIATE transactions; the fencing counter of each key is bumped
 * in the granting transaction. Expiry uses SQLite's own clock (`unixepoch('subsec')`), the host's
 * wall clock, which every process on the host shares. There is no change notification, so
 * waiters back off with jitter, bounded by the holder's remaining TTL.
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

const SCHEMA = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL  -- engine clock, ms since the epoch
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fencelock_fences (
  key        TEXT PRIMARY KEY,
  last_token INTEGER NOT NULL  -- highest fencing token issued for key; never decreases
) WITHOUT ROWID;
`;

/** Engine time in ms. */
const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

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
      db.exec(SCHEMA);
      return;
    } catch (error) {
      const busy = (error as { code?: string }).code?.startsWith('SQLITE_BUSY') === true;
      if (!busy || performance.now() >= deadline) throw error;
      Atomics.wait(sleepCell, 0, 0, 5 + Math.random() * 20);
    }
  }
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
    const bump = db.prepare<[string], { last_token: bigint }>(
      `INSERT INTO fencelock_fences (key, last_token) VALUES (?, 1)
       ON CONFLICT (key) DO UPDATE SET last_token = last_token + 1 RETURNING last_token`,
    );
    const grant = db.prepare<[string, string, bigint, bigint]>(
      `INSERT OR REPLACE INTO fencelock_leases (key, owner, token, expires_at) VALUES (?, ?, ?, ${NOW} + ?)`,
    );
    const remove = db.prepare<[string]>(`DELETE FROM fencelock_leases WHERE key = ?`);
    const lastToken = db.prepare<[string], { last_token: bigint }>(
      `SELECT last_token FROM fencelock_fences WHERE key = ?`,
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
        const token = bump.get(request.key)!.last_token;
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

    this.#inspect = db
      .transaction((key: string): LockInfo => {
        const row = read.get(key);
        const last = lastToken.get(key)?.last_token ?? 0n;
        const holder =
          row && row.remaining > 0n
            ? { owner: row.owner, fencingToken: row.token, ttlMs: Number(row.remaining) }
            : null;
        return { key, holder, lastFencingToken: last };
      })
      .deferred.bind(null);
  }

  /** One IMMEDIATE transaction: take a free or expired row with a bumped token, or report the holder's remaining TTL. */
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

  /** Holder (if unexpired) and the key's fence counter. */
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
