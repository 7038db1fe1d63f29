/**
 * The read locks of the PostgreSQL lease mode (`AttemptRequest.mode` `'read'`): each operation
 * one call of a function of read-sql.ts, which describes the storage (reader rows and the lease
 * row's placeholder), the grant rule (one FIFO line for both modes) and whom a change wakes.
 * Renewals and releases come without a mode (`LeaseRef`): backend.ts sends them as a writer's
 * first and asks here when the key turns out held by others (`not-owner`).
 */
import type {
  AttemptRequest,
  AttemptResult,
  LeaseRef,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import type { PostgresConnectionSet } from './connection.js';
import { notGrantedIn } from './listener.js';
import { xactLockPairOf } from './sql.js';
import { tokenParameter } from './tokens.js';

/** A key's read grants, releases, renewals and withdrawals on one backend's connections. */
export class PostgresReads {
  readonly #db: PostgresConnectionSet;

  constructor(db: PostgresConnectionSet) {
    this.#db = db;
  }

  /**
   * Grant a read lock, refresh this owner's own (same token), or stand in the key's line (a
   * waiting contender with notifications) and report the holder's time left.
   * @throws InvalidArgumentError (`downgradeBlocked`) when a read asked for inside the caller's
   *   write lock (`heldWriter`) finds another writer waiting; nothing stays written.
   * @throws BackendError when the server cannot answer.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    const listener = this.#db.listener;
    const mark = listener?.mark() ?? -1;
    const [hi, lo] = xactLockPairOf(request.key);
    // As for a write lock (backend.ts): a single attempt, or a waiter without notifications,
    // never stands in the line.
    const queued = request.willWait !== false && listener !== undefined;
    const { rows } = await this.#db.run('attempt', () =>
      this.#db.queryPrepared<{
        token: string | null;
        refused: boolean | null;
        remaining_ms: string | null;
      }>(this.#db.sql.reads.attempt, [
        request.key,
        request.owner,
        request.ttlMs,
        hi,
        lo,
        queued,
        QUEUE_ENTRY_TTL_MS,
        request.heldWriter ?? null,
        this.#db.sql.channel,
      ]),
    );
    const row = rows[0];
    if (row?.token != null) {
      return { granted: true, token: BigInt(row.token), ttlMs: request.ttlMs };
    }
    if (row?.refused === true) throw downgradeBlocked(request.key);
    return notGrantedIn(listener, request.key, request.owner, mark, queued, row?.remaining_ms);
  }

  /** Compare-and-delete a read grant by owner and token; the last one wakes the head run. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const [hi, lo] = xactLockPairOf(lease.key);
    const { rows } = await this.#db.run('release', () =>
      this.#db.queryPrepared<{ outcome: ReleaseOutcome }>(this.#db.sql.reads.release, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        hi,
        lo,
        this.#db.sql.channel,
      ]),
    );
    return rows[0]?.outcome ?? 'not-held';
  }

  /** Move a live read grant's expiry (and the key's row with it). */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const [hi, lo] = xactLockPairOf(lease.key);
    const { rows } = await this.#db.run('renew', () =>
      this.#db.queryPrepared<{ ok: boolean; live: boolean }>(this.#db.sql.reads.renew, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        ttlMs,
        hi,
        lo,
      ]),
    );
    const row = rows[0];
    return row?.ok === true
      ? { ok: true, ttlMs }
      : { ok: false, reason: row?.live === true ? 'not-owner' : 'not-held' };
  }

  /** Leave the line and, unless `keepGrant`, drop the read grant whatever the token. */
  async withdraw(request: AttemptRequest, keepGrant: boolean): Promise<void> {
    const [hi, lo] = xactLockPairOf(request.key);
    await this.#db.run(keepGrant ? 'leave the line' : 'abandon', () =>
      this.#db.queryPrepared(this.#db.sql.reads.withdraw, [
        request.key,
        request.owner,
        keepGrant,
        hi,
        lo,
        this.#db.sql.channel,
      ]),
    );
  }
}
