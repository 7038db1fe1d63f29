/**
 * The leader-election operations of the PostgreSQL lease mode (`AttemptRequest.election`,
 * `LeaseRef.election`): each one statement of election-sql.ts, which describes the tables, the
 * grant rule (the lock's, FIFO line included), where the term comes from and what each change
 * notifies. The watch rides on the backend's one LISTEN connection (listener.ts).
 */
import type {
  AttemptRequest,
  AttemptResult,
  ElectedLeader,
  ElectionWatch,
  LeaseRef,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { BackendError } from '../../errors.js';
import { QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import type { PostgresConnectionSet } from './connection.js';
import { electionLineOf, notGrantedIn } from './listener.js';
import { electionLockPairOf } from './sql.js';
import { tokenParameter } from './tokens.js';

/**
 * How long an observer relies on LISTEN before it reads the leader again anyway, ms. NOTIFY
 * reaches a listening connection for every committed grant, proclaim and release; notices are
 * lost only while that connection is down, and the listener then calls the watchers itself
 * (when it drops, at each reconnect try, once listening again). So only a connection that died
 * silently (no FIN, until TCP keep-alive notices) leaves a gap, bounded by this.
 */
export const LISTEN_RECHECK_MS = 30_000;

/**
 * The same without notifications (`notifications: false`, the usual choice behind a
 * transaction-mode pooler without `listenUrl`, where LISTEN cannot work): the watch is a poll,
 * and an observer reads the leader this often.
 */
export const POLL_RECHECK_MS = 1_000;

/** An election's grants, renewals, proclaims, releases, reads and watches on one backend. */
export class PostgresElections {
  readonly #db: PostgresConnectionSet;

  constructor(db: PostgresConnectionSet) {
    this.#db = db;
  }

  /**
   * Grant the election to the candidate with its value (a new term), refresh the live leader's
   * own grant (same term and value), or stand in the election's line (a waiting candidate with
   * notifications) and report the leader's remaining TTL.
   * @throws BackendError when the server cannot answer.
   */
  async attempt(request: AttemptRequest, value: string): Promise<AttemptResult> {
    const listener = this.#db.listener;
    const mark = listener?.mark() ?? -1;
    const [hi, lo] = electionLockPairOf(request.key);
    // As for a lock (backend.ts): a single attempt, or a waiter without notifications, never
    // stands in the line, and lets the line go first.
    const queued = request.willWait !== false && listener !== undefined;
    const { rows } = await this.#db.run('attempt', () =>
      this.#db.queryPrepared<{ token: string | null; remaining_ms: string | null }>(
        this.#db.sql.elections.attempt,
        [
          request.key,
          request.owner,
          request.ttlMs,
          hi,
          lo,
          queued,
          QUEUE_ENTRY_TTL_MS,
          value,
          this.#db.sql.channel,
          request.lockDelayMs ?? null,
        ],
      ),
    );
    const row = rows[0];
    if (row?.token != null) {
      return { granted: true, token: BigInt(row.token), ttlMs: request.ttlMs };
    }
    return notGrantedIn(
      listener,
      electionLineOf(request.key),
      request.owner,
      mark,
      queued,
      row?.remaining_ms,
    );
  }

  /**
   * Move the leadership's expiry while owner and term hold it: one statement of its own (a
   * process leads few elections; locks' and permits' renewals go in batches, backend.ts).
   */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const { rows } = await this.#db.run('renew', () =>
      this.#db.queryPrepared<{ ok: boolean; live: boolean }>(this.#db.sql.elections.renew, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        ttlMs,
      ]),
    );
    const row = rows[0];
    if (row?.ok === true) return { ok: true, ttlMs };
    return { ok: false, reason: row?.live === true ? 'not-owner' : 'not-held' };
  }

  /** Compare-and-set of the value by owner and term; the watchers are notified. */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    const { rows } = await this.#db.run('proclaim', () =>
      this.#db.queryPrepared<{ ok: boolean; live: boolean }>(this.#db.sql.elections.proclaim, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        value,
        this.#db.sql.channel,
      ]),
    );
    const row = rows[0];
    if (row?.ok === true) return 'proclaimed';
    return row?.live === true ? 'not-owner' : 'not-held';
  }

  /** Compare-and-delete by owner and term; the head of the line and the watchers are told. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const { rows } = await this.#db.run('release', () =>
      this.#db.queryPrepared<{ outcome: ReleaseOutcome }>(this.#db.sql.elections.release, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        this.#db.sql.channel,
      ]),
    );
    return rows[0]?.outcome ?? 'not-held';
  }

  /**
   * Take the candidate out of the line and, unless `keepGrant`, drop its leadership whatever the
   * term (a grant whose reply was lost); whom this concerns is told.
   */
  async withdraw(request: AttemptRequest, keepGrant: boolean): Promise<void> {
    const { sql } = this.#db;
    await this.#db.run(keepGrant ? 'leave the line' : 'abandon', () =>
      this.#db.queryPrepared(keepGrant ? sql.elections.leaveQueue : sql.elections.abandon, [
        request.key,
        request.owner,
        sql.channel,
      ]),
    );
  }

  /**
   * The live leader: one statement, so owner, term, value, TTL and the count of candidates are
   * one snapshot.
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    const { rows } = await this.#db.run('leader', () =>
      this.#db.queryPrepared<{
        owner: string;
        token: string;
        value: string;
        remaining_ms: string;
        candidates: number;
      }>(this.#db.sql.elections.leader, [key]),
    );
    const row = rows[0];
    if (row === undefined) return null;
    return {
      owner: row.owner,
      term: BigInt(row.token),
      value: row.value,
      // The row was live when read: at least 1 ms, whatever the rounding of the clock between.
      ttlMs: Math.max(1, Number(row.remaining_ms)),
      candidates: row.candidates,
    };
  }

  /**
   * Watch election `key` on the backend's LISTEN connection (no connection of its own), armed
   * once LISTEN is confirmed; without notifications, a poll (`POLL_RECHECK_MS`) with nothing to
   * arm.
   * @throws BackendError when LISTEN cannot be confirmed now.
   */
  async watch(key: string, onChange: () => void): Promise<ElectionWatch> {
    const listener = this.#db.listener;
    if (listener === undefined) return { recheckAfterMs: POLL_RECHECK_MS, stop: () => {} };
    if (this.#db.closed) {
      throw new BackendError('postgres', 'watch', new Error('backend is closed'));
    }
    let stop: () => void;
    try {
      stop = await listener.watch(key, onChange);
    } catch (error) {
      throw new BackendError('postgres', 'watch', error);
    }
    return { recheckAfterMs: LISTEN_RECHECK_MS, stop };
  }
}
