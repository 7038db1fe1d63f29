/**
 * Leader elections in the SQLite store (`AttemptRequest.election`): the election object of a key
 * is its row in `fencelock_leaders` (the leader's owner, its term, its value and expiry) and its
 * line of candidates in `fencelock_candidates` (schema.ts), apart from the locks' and the
 * semaphores' tables, so the election, the lock and the semaphore of one key never meet. Every
 * write is one IMMEDIATE transaction; `leader` is one statement.
 *
 * A candidate is granted as a lock's writer is: when the election has no live leader and no live
 * candidate stands ahead of it in line (a waiting candidate keeps its place between attempts; a
 * single attempt never joins the line), with the next value of the file's one token counter as
 * its term, and with the value of its campaign stored in the leader's row. A repeated attempt by
 * the leader refreshes its expiry and answers its term (a lost reply is safe), keeping the value
 * it may have proclaimed since. The row goes at release or withdrawal, or lapses at its expiry;
 * the value goes with it. The counter is the file's, bumped by every grant of any key and never
 * reset, so a term is above every earlier leader's of the election, also after any idle time.
 * Waiting candidates watch `data_version` as a lock's waiters do (line-watch.ts).
 *
 * Lock-delay (`AttemptRequest.lockDelayMs`, Chubby's): a leadership granted with one stores it in
 * the leader's row (`lock_delay_ms`); when the row expires unreleased it stays, held by nobody
 * (`leader` answers null), and no candidate is elected until `lock_delay_ms` after its expiry (an
 * attempt answers the time left as `holderTtlMs`; a waiting candidate keeps its place). A release
 * or withdrawal that deletes the live row clears it; one that finds it expired leaves it.
 */
import type Database from 'better-sqlite3';
import type {
  AttemptRequest,
  AttemptResult,
  ElectedLeader,
  LeaseRef,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { type LineView, type Standing, watchLine } from './line-watch.js';
import { NOW, OCCUPIED_UNTIL, prepareNextToken, prepareSweep } from './schema.js';

/** The leader's row as a candidate or a renewal reads it (remaining: ms, engine clock). */
interface LeaderRow {
  owner: string;
  token: bigint;
  remaining: bigint;
  /** Time left until the election is free (the end of the lock-delay after the expiry), ms. */
  occupied: bigint;
}

/** The leader's row as `leader` reads it: only a live one. */
interface ElectedRow {
  owner: string;
  token: bigint;
  value: string;
  remaining: bigint;
  /** The leader and the live entries of the line. */
  candidates: bigint;
}

/** The election operations of one connection: prepared statements and their transactions. */
export class Elections {
  readonly attempt: (request: AttemptRequest) => AttemptResult;
  readonly renew: (lease: LeaseRef, ttlMs: number) => RenewResult;
  readonly release: (lease: LeaseRef) => ReleaseOutcome;
  /** Take `owner` out of the line and, unless `keepGrant`, end its leadership whatever the term. */
  readonly withdraw: (request: AttemptRequest, keepGrant: boolean) => void;
  /** Store `value` if `lease` holds the election (owner, term, unexpired). */
  readonly proclaim: (lease: LeaseRef, value: string) => ProclaimOutcome;
  /** The live leader of `key`, in one statement (one read snapshot of the file), or null. */
  readonly leader: (key: string) => ElectedLeader | null;

  /**
   * @param db the backend's connection (safe integers on).
   * @param view what a waiting candidate watches between attempts (the backend's connection).
   */
  constructor(db: Database.Database, view: LineView) {
    const read = db.prepare<[string], LeaderRow>(
      `SELECT owner, token, expires_at - ${NOW} AS remaining, ${OCCUPIED_UNTIL} - ${NOW} AS occupied
       FROM fencelock_leaders WHERE key = ?`,
    );
    const elected = db.prepare<[string], ElectedRow>(
      `SELECT l.owner, l.token, l.value, l.expires_at - ${NOW} AS remaining,
         1 + (SELECT count(*) FROM fencelock_candidates c
              WHERE c.key = l.key AND c.owner <> l.owner AND c.expires_at > ${NOW}) AS candidates
       FROM fencelock_leaders l WHERE l.key = ? AND l.expires_at > ${NOW}`,
    );
    const refresh = db.prepare<[bigint, string]>(
      `UPDATE fencelock_leaders SET expires_at = ${NOW} + ? WHERE key = ?`,
    );
    const grant = db.prepare<[string, string, bigint, string, bigint, number]>(
      `INSERT OR REPLACE INTO fencelock_leaders (key, owner, token, value, expires_at, lock_delay_ms)
       VALUES (?, ?, ?, ?, ${NOW} + ?, ?)`,
    );
    const renewal = db.prepare<{ key: string; owner: string; token: bigint; ttlMs: bigint }>(
      `UPDATE fencelock_leaders SET expires_at = ${NOW} + $ttlMs
       WHERE key = $key AND owner = $owner AND token = $token AND expires_at > ${NOW}`,
    );
    const store = db.prepare<{ key: string; owner: string; token: bigint; value: string }>(
      `UPDATE fencelock_leaders SET value = $value
       WHERE key = $key AND owner = $owner AND token = $token AND expires_at > ${NOW}`,
    );
    const removeTerm = db.prepare<[string, string, bigint]>(
      `DELETE FROM fencelock_leaders WHERE key = ? AND owner = ? AND token = ?`,
    );
    // The owner's live row (its lock-delay with it), or its row past the delay; one in its
    // lock-delay stays.
    const removeOwner = db.prepare<[string, string]>(
      `DELETE FROM fencelock_leaders
       WHERE key = ? AND owner = ? AND (expires_at > ${NOW} OR ${OCCUPIED_UNTIL} <= ${NOW})`,
    );
    const anyLeader = db.prepare<[string], { held: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_leaders WHERE key = ? AND expires_at > ${NOW}) AS held`,
    );
    // The head of the line (a left join: one row, nulls when nobody stands in it).
    const head = db.prepare<[string], { owner: string | null; remaining: bigint | null }>(
      `SELECT first.owner AS owner, first.expires_at - ${NOW} AS remaining
       FROM (SELECT 1) LEFT JOIN
            (SELECT owner, expires_at FROM fencelock_candidates
             WHERE key = ? AND expires_at > ${NOW} ORDER BY seq LIMIT 1) AS first`,
    );
    // Join the tail, or keep one's place and refresh the entry.
    const enqueue = db.prepare<{ key: string; owner: string; entryTtlMs: number }>(
      `INSERT INTO fencelock_candidates (key, owner, seq, expires_at)
       VALUES ($key, $owner,
               coalesce((SELECT max(seq) FROM fencelock_candidates WHERE key = $key), 0) + 1,
               ${NOW} + $entryTtlMs)
       ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    );
    const dequeue = db.prepare<[string, string]>(
      `DELETE FROM fencelock_candidates WHERE key = ? AND owner = ?`,
    );
    // Whether a leader is live (or its lock-delay runs), and the live candidates ahead of the
    // owner (all when it has none).
    const standingRow = db.prepare<{ key: string; owner: string }, { held: bigint; ahead: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_leaders
                      WHERE key = $key AND ${OCCUPIED_UNTIL} > ${NOW}) AS held,
              (SELECT count(*) FROM fencelock_candidates
               WHERE key = $key AND expires_at > ${NOW} AND owner <> $owner
                 AND seq < coalesce((SELECT seq FROM fencelock_candidates
                                     WHERE key = $key AND owner = $owner AND expires_at > ${NOW}),
                                    9223372036854775807)) AS ahead`,
    );
    const nextToken = prepareNextToken(db);
    const sweep = prepareSweep(db);

    const standing = (key: string, owner: string): Standing => {
      const row = standingRow.get({ key, owner })!;
      return { free: row.held === 1n ? 0 : 1, ahead: Number(row.ahead) };
    };

    /** A not-granted answer; a waiting candidate keeps (or takes) its place in the line. */
    const notGranted = (request: AttemptRequest, boundMs: bigint): AttemptResult => {
      const { key, owner } = request;
      const queued = request.willWait !== false;
      if (queued) enqueue.run({ key, owner, entryTtlMs: QUEUE_ENTRY_TTL_MS });
      return {
        granted: false,
        holderTtlMs: Math.max(0, Number(boundMs)),
        queued,
        recheckAfterMs: LINE_RECHECK_MS,
        waitForChange: (signal, maxMs) =>
          watchLine(view, () => standing(key, owner), signal, maxMs),
      };
    };

    /** The answer for an owner and term that do not hold the election: is anyone leading? */
    const notHolding = (key: string): 'not-owner' | 'not-held' =>
      anyLeader.get(key)!.held === 1n ? 'not-owner' : 'not-held';

    this.attempt = db
      .transaction((request: AttemptRequest): AttemptResult => {
        const { key, owner } = request;
        const ttl = BigInt(request.ttlMs);
        const row = read.get(key);
        if (row !== undefined && row.remaining > 0n) {
          if (row.owner === owner) {
            refresh.run(ttl, key);
            return { granted: true, token: row.token, ttlMs: request.ttlMs };
          }
          return notGranted(request, row.remaining);
        }
        // A leadership that ended unreleased keeps the election from everyone until its
        // lock-delay ends; a waiting candidate keeps its place in line.
        if (row !== undefined && row.occupied > 0n) return notGranted(request, row.occupied);
        // No leader: the head of the line goes first; a candidate behind it waits its turn.
        const first = head.get(key)!;
        if (first.owner !== null && first.owner !== owner) {
          return notGranted(request, first.remaining ?? 0n);
        }
        if (first.owner !== null) dequeue.run(key, owner);
        // Expired rows (leaders and candidates that vanished, of any table) go; this election's
        // lapsed leader row is replaced, its value with it.
        sweep();
        const term = nextToken();
        grant.run(key, owner, term, request.election!.value, ttl, request.lockDelayMs ?? 0);
        return { granted: true, token: term, ttlMs: request.ttlMs };
      })
      .immediate.bind(null);

    this.renew = db
      .transaction((lease: LeaseRef, ttlMs: number): RenewResult => {
        const { key, owner, fencingToken: token } = lease;
        if (renewal.run({ key, owner, token, ttlMs: BigInt(ttlMs) }).changes === 1) {
          return { ok: true, ttlMs };
        }
        return { ok: false, reason: notHolding(key) };
      })
      .immediate.bind(null);

    this.release = db
      .transaction((lease: LeaseRef): ReleaseOutcome => {
        const { key, owner, fencingToken: token } = lease;
        const row = read.get(key);
        // This term's row goes, also once lapsed and past its lock-delay (then the answer is not
        // `released`); a release that comes back in the delay does not clear it.
        if (
          row !== undefined &&
          row.owner === owner &&
          row.token === token &&
          (row.remaining > 0n || row.occupied <= 0n)
        ) {
          removeTerm.run(key, owner, token);
          if (row.remaining > 0n) return 'released';
        }
        return notHolding(key);
      })
      .immediate.bind(null);

    this.withdraw = db
      .transaction((request: AttemptRequest, keepGrant: boolean): void => {
        dequeue.run(request.key, request.owner);
        if (!keepGrant) removeOwner.run(request.key, request.owner);
      })
      .immediate.bind(null);

    this.proclaim = db
      .transaction((lease: LeaseRef, value: string): ProclaimOutcome => {
        const { key, owner, fencingToken: token } = lease;
        if (store.run({ key, owner, token, value }).changes === 1) return 'proclaimed';
        return notHolding(key);
      })
      .immediate.bind(null);

    this.leader = (key: string): ElectedLeader | null => {
      const row = elected.get(key);
      if (row === undefined) return null;
      return {
        owner: row.owner,
        term: row.token,
        value: row.value,
        ttlMs: Number(row.remaining),
        candidates: Number(row.candidates),
      };
    };
  }
}
