/**
 * The semaphore operations of the PostgreSQL lease mode (`AttemptRequest.permits`): each one
 * call of a function of permit-sql.ts, which describes the tables, the grant rule (at most N live
 * permits, FIFO among waiters, tokens from the schema's sequence) and whom a change wakes.
 * Renewals go with the locks' (backend.ts, one statement per batch).
 */
import type {
  AttemptRequest,
  AttemptResult,
  LeaseRef,
  ReleaseOutcome,
} from '../../core/backend.js';
import { PermitsMismatchError } from '../../errors.js';
import { QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import type { PostgresConnectionSet } from './connection.js';
import { notGrantedIn, permitLineOf } from './listener.js';
import { permitLockPairOf } from './sql.js';
import { tokenParameter } from './tokens.js';

/** A semaphore's grants, releases and withdrawals on one backend's connections. */
export class PostgresPermits {
  readonly #db: PostgresConnectionSet;

  constructor(db: PostgresConnectionSet) {
    this.#db = db;
  }

  /**
   * Grant one of `permits` permits, refresh this owner's own (same token), or stand in the
   * semaphore's line (a waiting contender with notifications) and report how long nothing may
   * change.
   * @throws PermitsMismatchError when live holders or waiters use another count (nothing written).
   * @throws BackendError when the server cannot answer.
   */
  async attempt(request: AttemptRequest, permits: number): Promise<AttemptResult> {
    const listener = this.#db.listener;
    const mark = listener?.mark() ?? -1;
    const [hi, lo] = permitLockPairOf(request.key);
    // As for a lock (backend.ts): a single attempt, or a waiter without notifications, never
    // stands in the line, and lets the line go first.
    const queued = request.willWait !== false && listener !== undefined;
    const { rows } = await this.#db.run('attempt', () =>
      this.#db.queryPrepared<{
        token: string | null;
        in_use: number | null;
        remaining_ms: string | null;
      }>(this.#db.sql.permits.attempt, [
        request.key,
        request.owner,
        request.ttlMs,
        hi,
        lo,
        permits,
        queued,
        QUEUE_ENTRY_TTL_MS,
      ]),
    );
    const row = rows[0];
    if (row?.token != null) {
      return { granted: true, token: BigInt(row.token), ttlMs: request.ttlMs };
    }
    if (row?.in_use != null) throw new PermitsMismatchError(request.key, permits, row.in_use);
    return notGrantedIn(
      listener,
      permitLineOf(request.key),
      request.owner,
      mark,
      queued,
      row?.remaining_ms,
    );
  }

  /** Compare-and-delete by owner and token; the waiter the freed permit lets in is notified. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const [hi, lo] = permitLockPairOf(lease.key);
    const { rows } = await this.#db.run('release', () =>
      this.#db.queryPrepared<{ outcome: ReleaseOutcome }>(this.#db.sql.permits.release, [
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

  /**
   * Take the owner out of the semaphore's line and, unless `keepGrant`, drop its permit whatever
   * the token; whoever this lets in is notified.
   */
  async withdraw(request: AttemptRequest, keepGrant: boolean): Promise<void> {
    const [hi, lo] = permitLockPairOf(request.key);
    await this.#db.run(keepGrant ? 'leave the line' : 'abandon', () =>
      this.#db.queryPrepared(this.#db.sql.permits.withdraw, [
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
