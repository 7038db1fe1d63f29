/**
 * Semaphores in the SQLite store (`AttemptRequest.permits`): at most `permits` live rows of a key
 * in `fencelock_permits`, one per holder with its own fencing token, and a FIFO line of waiters in
 * `fencelock_permit_waiters` (schema.ts), apart from the locks' tables so that a lock and a
 * semaphore of one key never meet. Every operation is one IMMEDIATE transaction.
 *
 * The rule is the Redis backend's (its `semaphore-acquire.lua`): a contender is granted when fewer
 * than `permits` permits are live and fewer live waiters stand ahead of it than permits are free.
 * A waiting contender joins the tail first (or keeps its place), so a release lets in the head of
 * the line, not whoever asks first; a single attempt never joins the line. A permit lapses at its
 * expiry unless renewed, so a crashed holder's permit comes back by its TTL. Its token is the next
 * value of the database's one counter, drawn in the granting transaction.
 *
 * Each row carries the permit count its holder or waiter uses; an attempt with another count while
 * any of them is live is refused before anything is written (`PermitsInUse`).
 */
import type Database from 'better-sqlite3';
import type {
  AttemptRequest,
  AttemptResult,
  LeaseRef,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { type LineView, type Standing, watchLine } from './line-watch.js';
import { NOW, prepareNextToken, prepareSweep } from './schema.js';

/** An attempt refused, with nothing written: live holders or waiters use `inUse` permits. */
export interface PermitsInUse {
  readonly inUse: number;
}

/** A semaphore's line as one contender sees it (times in ms, engine clock). */
interface LineRow {
  /** Live permits of the key. */
  held: bigint;
  /** Time left of the live permit that lapses first; null when none is held. */
  holderLeft: bigint | null;
  /** Live line entries ahead of the contender (all of them when it has none). */
  ahead: bigint;
  /** Time left of the entry ahead that lapses first; null when nobody is ahead. */
  aheadLeft: bigint | null;
}

interface PermitRow {
  token: bigint;
  remaining: bigint;
}

/** The semaphore operations of one connection: prepared statements and their transactions. */
export class Semaphores {
  readonly attempt: (request: AttemptRequest, permits: number) => AttemptResult | PermitsInUse;
  readonly renew: (lease: LeaseRef, ttlMs: number) => RenewResult;
  readonly release: (lease: LeaseRef) => ReleaseOutcome;
  /** Take `owner` out of the line and, unless `keepGrant`, drop its permit whatever the token. */
  readonly withdraw: (request: AttemptRequest, keepGrant: boolean) => void;

  /**
   * @param db the backend's connection (safe integers on).
   * @param view what a waiter watches between attempts (the backend's connection and commits).
   */
  constructor(db: Database.Database, view: LineView) {
    const inUse = db.prepare<{ key: string; permits: number }, { permits: bigint }>(
      `SELECT permits FROM fencelock_permits
       WHERE key = $key AND expires_at > ${NOW} AND permits <> $permits
       UNION ALL
       SELECT permits FROM fencelock_permit_waiters
       WHERE key = $key AND expires_at > ${NOW} AND permits <> $permits
       LIMIT 1`,
    );
    const mine = db.prepare<[string, string], PermitRow>(
      `SELECT token, expires_at - ${NOW} AS remaining FROM fencelock_permits
       WHERE key = ? AND owner = ?`,
    );
    const refresh = db.prepare<[bigint, string, string]>(
      `UPDATE fencelock_permits SET expires_at = ${NOW} + ? WHERE key = ? AND owner = ?`,
    );
    const grant = db.prepare<[string, string, bigint, number, bigint]>(
      `INSERT OR REPLACE INTO fencelock_permits (key, owner, token, permits, expires_at)
       VALUES (?, ?, ?, ?, ${NOW} + ?)`,
    );
    const remove = db.prepare<[string, string]>(
      `DELETE FROM fencelock_permits WHERE key = ? AND owner = ?`,
    );
    // Join the tail, or keep one's place and refresh the entry.
    const enqueue = db.prepare<{ key: string; owner: string; permits: number; entryTtlMs: number }>(
      `INSERT INTO fencelock_permit_waiters (key, owner, seq, permits, expires_at)
       VALUES ($key, $owner,
               coalesce((SELECT max(seq) FROM fencelock_permit_waiters WHERE key = $key), 0) + 1,
               $permits, ${NOW} + $entryTtlMs)
       ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    );
    const dequeue = db.prepare<[string, string]>(
      `DELETE FROM fencelock_permit_waiters WHERE key = ? AND owner = ?`,
    );
    const line = db.prepare<{ key: string; owner: string }, LineRow>(
      `SELECT held.n AS held, held.firstLeft AS holderLeft, ahead.n AS ahead, ahead.firstLeft AS aheadLeft
       FROM (SELECT count(*) AS n, min(expires_at) - ${NOW} AS firstLeft FROM fencelock_permits
             WHERE key = $key AND expires_at > ${NOW}) AS held,
            (SELECT count(*) AS n, min(expires_at) - ${NOW} AS firstLeft FROM fencelock_permit_waiters
             WHERE key = $key AND expires_at > ${NOW} AND owner <> $owner
               AND seq < coalesce((SELECT seq FROM fencelock_permit_waiters
                                   WHERE key = $key AND owner = $owner AND expires_at > ${NOW}),
                                  9223372036854775807)) AS ahead`,
    );
    const anyHeld = db.prepare<[string], { held: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_permits WHERE key = ? AND expires_at > ${NOW}) AS held`,
    );
    const nextToken = prepareNextToken(db);
    const sweep = prepareSweep(db);

    const standing = (key: string, owner: string, permits: number): Standing => {
      const row = line.get({ key, owner })!;
      return { free: permits - Number(row.held), ahead: Number(row.ahead) };
    };

    /** A not-granted answer; `boundMs` bounds how long nothing can change but by a commit. */
    const notGranted = (request: AttemptRequest, permits: number, boundMs: bigint | null) => {
      const { key, owner } = request;
      return {
        granted: false,
        holderTtlMs: Math.max(1, Number(boundMs ?? 1n)),
        queued: request.willWait !== false,
        recheckAfterMs: LINE_RECHECK_MS,
        waitForChange: (signal: AbortSignal, maxMs: number) =>
          watchLine(view, () => standing(key, owner, permits), signal, maxMs),
      } as const;
    };

    this.attempt = db
      .transaction((request: AttemptRequest, permits: number): AttemptResult | PermitsInUse => {
        const { key, owner } = request;
        const other = inUse.get({ key, permits });
        if (other !== undefined) return { inUse: Number(other.permits) };
        const ttl = BigInt(request.ttlMs);
        // A holder asking again keeps its token, its permit refreshed (and no line entry).
        const held = mine.get(key, owner);
        if (held !== undefined && held.remaining > 0n) {
          refresh.run(ttl, key, owner);
          dequeue.run(key, owner);
          return { granted: true, token: held.token, ttlMs: request.ttlMs };
        }
        // A waiting contender stands in line before it counts who is ahead of it.
        if (request.willWait !== false) {
          enqueue.run({ key, owner, permits, entryTtlMs: QUEUE_ENTRY_TTL_MS });
        }
        const row = line.get({ key, owner })!;
        const free = permits - Number(row.held);
        if (free <= 0) return notGranted(request, permits, row.holderLeft);
        if (Number(row.ahead) >= free) return notGranted(request, permits, row.aheadLeft);
        dequeue.run(key, owner);
        // Expired rows (holders and waiters that vanished) go; a lapsed permit of this owner is
        // replaced.
        sweep();
        const token = nextToken();
        grant.run(key, owner, token, permits, ttl);
        return { granted: true, token, ttlMs: request.ttlMs };
      })
      .immediate.bind(null);

    /** The answer to a renewal or release by an owner and token that hold no live permit. */
    const notHolding = (key: string): 'not-owner' | 'not-held' =>
      anyHeld.get(key)!.held === 1n ? 'not-owner' : 'not-held';

    this.renew = db
      .transaction((lease: LeaseRef, ttlMs: number): RenewResult => {
        const row = mine.get(lease.key, lease.owner);
        if (row !== undefined && row.token === lease.fencingToken && row.remaining > 0n) {
          refresh.run(BigInt(ttlMs), lease.key, lease.owner);
          return { ok: true, ttlMs };
        }
        return { ok: false, reason: notHolding(lease.key) };
      })
      .immediate.bind(null);

    this.release = db
      .transaction((lease: LeaseRef): ReleaseOutcome => {
        const row = mine.get(lease.key, lease.owner);
        // This permit's row goes, also once lapsed (then the answer is not `released`).
        if (row !== undefined && row.token === lease.fencingToken) {
          remove.run(lease.key, lease.owner);
          if (row.remaining > 0n) return 'released';
        }
        return notHolding(lease.key);
      })
      .immediate.bind(null);

    this.withdraw = db
      .transaction((request: AttemptRequest, keepGrant: boolean): void => {
        dequeue.run(request.key, request.owner);
        if (!keepGrant) remove.run(request.key, request.owner);
      })
      .immediate.bind(null);
  }
}
