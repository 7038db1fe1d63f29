/**
 * Read locks in the SQLite store (`AttemptRequest.mode` `read`, Curator's
 * `InterProcessReadWriteLock`): one row per live read grant in `fencelock_readers` (holder, its
 * own fencing token from the database's one counter, expiry), beside the key's lock row, and the
 * key's one FIFO line for both modes (`fencelock_waiters`, each entry with its mode in `reads`).
 *
 * While readers hold a key, its row in `fencelock_leases` is a stand-in owned by `READERS_OWNER`
 * with the newest reader's token and the latest reader's expiry (`sync`, after every change of
 * the key's readers), so a writer's attempt, renewal and release read the one row they always
 * read and find the key held. A downgrade (a reader granted past its own writer, `heldWriter`)
 * leaves the writer's row in place and stretches its expiry over the readers'; the writer's
 * release puts the stand-in in its place (`cover`, the one statement the write path gains).
 *
 * A reader is granted when no writer holds the key (nor keeps it in a lock-delay after its grant
 * ended unreleased: the key's lock is granted to nobody then) and no live writer's entry stands ahead of it
 * in the line; a writer waits for everyone ahead (the lock's rule). A waiting reader joins the
 * tail before it looks ahead, so its place is kept; a single attempt never joins the line. A read
 * grant lapses at its expiry unless renewed: a crashed reader's grant ends by its TTL, and the
 * stand-in with it. Lapsed read grants are swept by read grants (and when a process opens the
 * file), not by a writer's, which sweeps the stand-in.
 */
import type Database from 'better-sqlite3';
import type { AttemptRequest, AttemptResult, LeaseRef } from '../../core/backend.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { type LineView, type Standing, watchLine } from './line-watch.js';
import { NOW, OCCUPIED_UNTIL, prepareNextToken, prepareSweep, READERS_OWNER } from './schema.js';

/** A downgrade refused, with the reader's entry withdrawn: another writer waits in the line. */
export const DOWNGRADE_BLOCKED = Symbol('downgrade blocked');

interface ReaderRow {
  owner: string;
  token: bigint;
  remaining: bigint;
}

/** What a reader sees of its key (times in ms, engine clock). */
interface ReaderLine {
  /** 1 while a writer (not the readers' stand-in) holds the key, or its lock-delay runs. */
  written: bigint;
  /** Time left of that writer's row (until its lock-delay ends); null when none. */
  writerLeft: bigint | null;
  /** Live writers' entries ahead of the reader in the line (all of them when it has none). */
  writersAhead: bigint;
  /** Time left of the first of those entries to lapse; null when none. */
  aheadLeft: bigint | null;
}

/** The read grants of one connection: statements and the read attempt's transaction. */
export class ReadGrants {
  /**
   * Inside the caller's transaction: a read grant, a not-granted answer, or a refused downgrade
   * (the backend's `attemptAll` runs it for each key of one transaction).
   */
  readonly attemptIn: (request: AttemptRequest) => AttemptResult | typeof DOWNGRADE_BLOCKED;
  /** `attemptIn` as one IMMEDIATE transaction. */
  readonly attempt: (request: AttemptRequest) => AttemptResult | typeof DOWNGRADE_BLOCKED;
  /** Inside the caller's transaction: renew `lease` if it is a live read grant. */
  readonly renew: (lease: LeaseRef, ttlMs: number) => boolean;
  /** Inside the caller's transaction: delete `lease`'s read grant (`lapsed` when expired). */
  readonly release: (lease: LeaseRef) => 'released' | 'lapsed' | 'none';
  /** Inside the caller's transaction: delete `owner`'s read grant of `key`, whatever the token. */
  readonly drop: (key: string, owner: string) => void;
  /** After a writer's row of `key` was deleted: the stand-in takes its place if readers hold. */
  readonly cover: (key: string) => void;
  /** Whether any read grant of `key` is live. */
  readonly anyLive: (key: string) => boolean;
  /** The live read grants of `key`, oldest token first. */
  readonly live: (key: string) => ReaderRow[];

  /**
   * @param db the backend's connection (safe integers on).
   * @param view what a waiter watches between attempts (the backend's connection and commits).
   */
  constructor(db: Database.Database, view: LineView) {
    const mine = db.prepare<[string, string], ReaderRow>(
      `SELECT owner, token, expires_at - ${NOW} AS remaining FROM fencelock_readers
       WHERE key = ? AND owner = ?`,
    );
    const refresh = db.prepare<[bigint, string, string]>(
      `UPDATE fencelock_readers SET expires_at = ${NOW} + ? WHERE key = ? AND owner = ?`,
    );
    const grant = db.prepare<[string, string, bigint, bigint]>(
      `INSERT OR REPLACE INTO fencelock_readers (key, owner, token, expires_at)
       VALUES (?, ?, ?, ${NOW} + ?)`,
    );
    const remove = db.prepare<[string, string]>(
      `DELETE FROM fencelock_readers WHERE key = ? AND owner = ?`,
    );
    const live = db.prepare<[string], ReaderRow>(
      `SELECT owner, token, expires_at - ${NOW} AS remaining FROM fencelock_readers
       WHERE key = ? AND expires_at > ${NOW} ORDER BY token`,
    );
    const anyLive = db.prepare<[string], { held: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_readers WHERE key = ? AND expires_at > ${NOW}) AS held`,
    );
    // The stand-in goes (and an expired writer's row with it, once past its lock-delay) ...
    const uncover = db.prepare<{ key: string }>(
      `DELETE FROM fencelock_leases
       WHERE key = $key AND (owner = '${READERS_OWNER}' OR ${OCCUPIED_UNTIL} <= ${NOW})`,
    );
    // ... and comes back over the live readers; a live writer's row (a downgrade) is stretched,
    // an expired one in its lock-delay is left as it is (not brought back to life).
    const cover = db.prepare<{ key: string }>(
      `INSERT INTO fencelock_leases (key, owner, token, expires_at)
       SELECT $key, '${READERS_OWNER}', max(token), max(expires_at) FROM fencelock_readers
       WHERE key = $key AND expires_at > ${NOW} HAVING count(*) > 0
       ON CONFLICT (key) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)
       WHERE expires_at > ${NOW}`,
    );
    const enqueue = db.prepare<{ key: string; owner: string; entryTtlMs: number }>(
      `INSERT INTO fencelock_waiters (key, owner, seq, expires_at, reads)
       VALUES ($key, $owner,
               coalesce((SELECT max(seq) FROM fencelock_waiters WHERE key = $key), 0) + 1,
               ${NOW} + $entryTtlMs, 1)
       ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    );
    const dequeue = db.prepare<[string, string]>(
      `DELETE FROM fencelock_waiters WHERE key = ? AND owner = ?`,
    );
    const writerWaits = db.prepare<[string, string], { waits: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_waiters
                      WHERE key = ? AND owner <> ? AND reads = 0 AND expires_at > ${NOW}) AS waits`,
    );
    const line = db.prepare<{ key: string; owner: string }, ReaderLine>(
      `SELECT writer.n AS written, writer.left AS writerLeft,
              ahead.n AS writersAhead, ahead.firstLeft AS aheadLeft
       FROM (SELECT count(*) AS n, max(${OCCUPIED_UNTIL}) - ${NOW} AS left FROM fencelock_leases
             WHERE key = $key AND owner <> '${READERS_OWNER}'
               AND ${OCCUPIED_UNTIL} > ${NOW}) AS writer,
            (SELECT count(*) AS n, min(expires_at) - ${NOW} AS firstLeft FROM fencelock_waiters
             WHERE key = $key AND reads = 0 AND expires_at > ${NOW} AND owner <> $owner
               AND seq < coalesce((SELECT seq FROM fencelock_waiters
                                   WHERE key = $key AND owner = $owner AND expires_at > ${NOW}),
                                  9223372036854775807)) AS ahead`,
    );
    const holdsWrite = db.prepare<[string, string], { held: bigint }>(
      `SELECT EXISTS (SELECT 1 FROM fencelock_leases
                      WHERE key = ? AND owner = ? AND expires_at > ${NOW}) AS held`,
    );
    const nextToken = prepareNextToken(db);
    const sweep = prepareSweep(db, true);

    /** Put the key's lock row in step with its live readers. */
    const sync = (key: string): void => {
      uncover.run({ key });
      cover.run({ key });
    };

    /** A reader may go once no writer holds the key and none stands ahead of it. */
    const standing = (key: string, owner: string): Standing => {
      const row = line.get({ key, owner })!;
      return { free: row.written > 0n ? 0 : 1, ahead: Number(row.writersAhead) };
    };

    const notGranted = (request: AttemptRequest, boundMs: bigint | null): AttemptResult => {
      const { key, owner } = request;
      return {
        granted: false,
        holderTtlMs: Math.max(1, Number(boundMs ?? 1n)),
        queued: request.willWait !== false,
        recheckAfterMs: LINE_RECHECK_MS,
        waitForChange: (signal: AbortSignal, maxMs: number) =>
          watchLine(view, () => standing(key, owner), signal, maxMs),
      };
    };

    this.attemptIn = (request: AttemptRequest): AttemptResult | typeof DOWNGRADE_BLOCKED => {
      const { key, owner } = request;
      const ttl = BigInt(request.ttlMs);
      // A reader asking again keeps its token, its grant refreshed (and no line entry).
      const held = mine.get(key, owner);
      if (held !== undefined && held.remaining > 0n) {
        refresh.run(ttl, key, owner);
        dequeue.run(key, owner);
        sync(key);
        return { granted: true, token: held.token, ttlMs: request.ttlMs };
      }
      const downgrade =
        request.heldWriter !== undefined && holdsWrite.get(key, request.heldWriter)!.held === 1n;
      if (downgrade) {
        // Past the caller's own writer; another writer waiting would wait for this reader.
        if (writerWaits.get(key, owner)!.waits === 1n) {
          dequeue.run(key, owner);
          return DOWNGRADE_BLOCKED;
        }
      } else {
        // A waiting reader stands in line before it looks who is ahead of it.
        if (request.willWait !== false) {
          enqueue.run({ key, owner, entryTtlMs: QUEUE_ENTRY_TTL_MS });
        }
        const row = line.get({ key, owner })!;
        if (row.written > 0n) return notGranted(request, row.writerLeft);
        if (row.writersAhead > 0n) return notGranted(request, row.aheadLeft);
      }
      dequeue.run(key, owner);
      // Expired rows (holders and waiters that vanished) go; a lapsed grant of this owner is
      // replaced.
      sweep();
      const token = nextToken();
      grant.run(key, owner, token, ttl);
      sync(key);
      return { granted: true, token, ttlMs: request.ttlMs };
    };
    this.attempt = db.transaction(this.attemptIn).immediate.bind(null);

    this.renew = (lease: LeaseRef, ttlMs: number): boolean => {
      const row = mine.get(lease.key, lease.owner);
      if (row === undefined || row.token !== lease.fencingToken || row.remaining <= 0n) {
        return false;
      }
      refresh.run(BigInt(ttlMs), lease.key, lease.owner);
      sync(lease.key);
      return true;
    };

    this.release = (lease: LeaseRef): 'released' | 'lapsed' | 'none' => {
      const row = mine.get(lease.key, lease.owner);
      if (row === undefined || row.token !== lease.fencingToken) return 'none';
      remove.run(lease.key, lease.owner);
      sync(lease.key);
      return row.remaining > 0n ? 'released' : 'lapsed';
    };

    this.drop = (key: string, owner: string): void => {
      if (remove.run(key, owner).changes > 0) sync(key);
    };
    this.cover = (key: string): void => {
      cover.run({ key });
    };
    this.anyLive = (key: string): boolean => anyLive.get(key)!.held === 1n;
    this.live = (key: string): ReaderRow[] => live.all(key);
  }
}
