/**
 * The embedded store: a SQLite file (better-sqlite3) shared by the processes of one host. Grant,
 * renew and release are single IMMEDIATE transactions; the fencing token comes from one counter
 * for the whole database, bumped in the granting transaction, so a key's tokens strictly increase
 * (not consecutively) and nothing of a key stays once its lease row is gone: a release deletes
 * the row, and a row that expired unreleased is deleted by a later grant (see `SWEEP_LIMIT` in
 * schema.ts). Expiry uses SQLite's own clock (`unixepoch('subsec')`), the host's wall clock,
 * which every process on the host shares.
 *
 * Waiters stand in a FIFO line per key (`fencelock_waiters`, the shape of the Redis backend's
 * line): a free key goes to the head of the line, and an entry lives `QUEUE_ENTRY_TTL_MS` past
 * its owner's latest attempt, so a waiter that vanished blocks the line that long at most.
 * SQLite has no change notification; a waiter watches the file's `PRAGMA data_version` (a
 * counter that moves when another connection commits), reads the key only when it moved, and
 * attempts again only once the key is free and it is first in line (no herd). How often it
 * reads depends on its place in the line and on how long nothing changed (line-watch.ts).
 *
 * A semaphore (`AttemptRequest.permits`, semaphores.ts) is kept in tables of its own, apart from
 * the locks' (a lock and a semaphore of one key never meet): one row per live permit in
 * `fencelock_permits` (holder, fencing token from the same counter, expiry, and the permit count
 * in use) and its own FIFO line in `fencelock_permit_waiters`. A permit is granted while fewer
 * than `permits` are live and fewer live waiters stand ahead than permits are free; a permit
 * lapses at its expiry unless renewed. Its waiters watch `data_version` as a lock's do, and a
 * release lets in only the waiters its freed permit is for: those with fewer live entries ahead
 * of them than permits free (the others keep watching). An attempt with another permit count
 * while holders or waiters are live is refused with `PermitsMismatchError`, writing nothing; the
 * count goes with the semaphore's last row.
 *
 * Read locks (`mode: 'read'`, readers.ts) share the key: one row per live read grant in
 * `fencelock_readers` (holder, its own token from the same counter, expiry) and, while readers
 * hold, a stand-in row of the key in `fencelock_leases` (owner `READERS_OWNER`, the latest
 * reader's expiry), so a writer reads the one row it always read and finds the key held. Both
 * modes stand in the key's one line (`fencelock_waiters.reads`): a reader waits only for writers
 * holding or ahead of it, a writer for everyone ahead. A writer's release lets in the readers at
 * the head of the line (each watcher resolves only once no writer holds or stands ahead of it);
 * the last reader's release, the writer at the head. A renewal or release that is not the
 * writer's looks for a read grant of that owner and token (a `LeaseRef` carries no mode).
 *
 * A multi-key acquire's first round (`attemptAll`) is one IMMEDIATE transaction that runs the
 * single attempt of each key in it (the same function `attempt` runs in a transaction of its own,
 * for both modes), so each key is granted by the same rules and draws its token from the same
 * counter; it commits only when every key was granted, and otherwise rolls back, writing nothing
 * (no token spent, no commit seen by other connections' waiters).
 *
 * A leader election (`AttemptRequest.election`, election.ts) is a third object of a key, in tables
 * of its own: the leader's row in `fencelock_leaders` (owner, term, the value it campaigned with
 * or last proclaimed, expiry) and its line of candidates in `fencelock_candidates`, granted by a
 * lock's rules, its term the next value of the same counter (so above every earlier term of the
 * election, whatever time it stood idle). `proclaim` is a compare-and-set of owner and term in
 * one transaction, `leader` one statement. `watchElection` (election-watch.ts) has one poller per
 * backend that reads the change signal the waiters use (`data_version` and this connection's own
 * election commits) while any watch is armed, and calls the watches whose leader changed.
 *
 * Lock-delay (`AttemptRequest.lockDelayMs`; Chubby's lock-delay, Burrows OSDI 2006 §2.4, and
 * Consul's session `LockDelay`) is a column of the exclusive grant's row (`lock_delay_ms` in
 * `fencelock_leases` and `fencelock_leaders`), written by the grant and kept by renewals and the
 * holder's repeated attempts. The end of a grant that was not released is its row's expiry, on
 * the engine clock, to the millisecond: the row stays, held by nobody (not inspected, not
 * listed), and keeps the key (the election) from every contender, its own owner, readers and the
 * head of the line included, until `expires_at + lock_delay_ms`; an attempt meanwhile answers the
 * time left as `holderTtlMs`, a waiter keeps its place, and its wait ends then (no commit marks
 * the end: the core sleeps no longer than `holderTtlMs`). A release or withdrawal that deletes the
 * live row clears the delay; one that finds the row expired leaves it. The sweep deletes the row
 * once past its delay. There is no hand-over on release here (waiters attempt themselves), so no
 * grant can skip a delay. An earlier fencelock version on the same file ignores delays.
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
  ElectedLeader,
  ElectionWatch,
  LeaseRef,
  ListPage,
  ListRequest,
  LockInfo,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { BackendError, PermitsMismatchError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import { parseKeyListCursor } from '../list-cursor.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { Elections } from './election.js';
import { ElectionWatches } from './election-watch.js';
import { type LineView, watchLine } from './line-watch.js';
import { HeldKeys } from './listing.js';
import { DOWNGRADE_BLOCKED, ReadGrants } from './readers.js';
import {
  initialize,
  NOW,
  OCCUPIED_UNTIL,
  prepareNextToken,
  prepareSweep,
  READERS_OWNER,
} from './schema.js';
import { Semaphores } from './semaphores.js';
import type { SqliteUrlConfig } from './url.js';

/** A single attempt's answer in the store: a read attempt may be a refused downgrade. */
type Answer = AttemptResult | typeof DOWNGRADE_BLOCKED;

/** Thrown inside `attemptAll`'s transaction to roll it back, with each key's answer. */
class RolledBack {
  readonly answers: Answer[];
  constructor(answers: Answer[]) {
    this.answers = answers;
  }
}

interface LeaseRow {
  owner: string;
  token: bigint;
  /** Time left of the grant, ms (engine clock); <= 0 once it expired. */
  remaining: bigint;
  /** Time left until the key is free (the end of the lock-delay after the expiry), ms. */
  occupied: bigint;
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
  /**
   * Read and write locks; a FIFO line of waiters per key (both modes) and per semaphore
   * (`leaveQueue`); semaphore permits; several keys' single attempts in one transaction
   * (`attemptAll`); leader elections (their own line, `proclaim`, `leader`, `watchElection`);
   * lock-delays of write locks and leaderships, kept in their rows (schema.ts).
   */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write', 'read'] as const),
    sessions: false,
    queue: true,
    batchRenew: false,
    permits: true,
    attemptAll: true,
    list: true,
    election: true,
    lockDelay: true,
  });
  readonly #db: Database.Database;
  readonly #attempt: (request: AttemptRequest) => AttemptResult;
  /** Each request's single attempt, in one transaction that commits only if all were granted. */
  readonly #attemptAll: (requests: readonly AttemptRequest[]) => Answer[];
  readonly #renew: (lease: LeaseRef, ttlMs: number) => RenewResult;
  readonly #release: (lease: LeaseRef) => ReleaseOutcome;
  readonly #abandon: (request: AttemptRequest) => void;
  readonly #leaveQueue: (request: AttemptRequest) => void;
  readonly #inspect: (key: string) => LockInfo;
  /** The semaphores' permits and line (semaphores.ts). */
  readonly #semaphores: Semaphores;
  /** The read grants (readers.ts). */
  readonly #readers: ReadGrants;
  /** `list`'s pages (listing.ts). */
  readonly #held: HeldKeys;
  /** What waiters watch (`watchLine`). */
  readonly #line: LineView;
  /** Commits of this connection that can let a waiter in (they do not move `data_version`). */
  #localChanges = 0;
  /** The elections' rows and line (election.ts). */
  readonly #elections: Elections;
  /** The election watches and their poller (election-watch.ts). */
  readonly #watches: ElectionWatches;
  /** Commits of this connection that may have changed an election's leader or value. */
  #electionChanges = 0;

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
      `SELECT owner, token, expires_at - ${NOW} AS remaining, ${OCCUPIED_UNTIL} - ${NOW} AS occupied
       FROM fencelock_leases WHERE key = ?`,
    );
    const refresh = db.prepare<[bigint, string]>(
      `UPDATE fencelock_leases SET expires_at = ${NOW} + ? WHERE key = ?`,
    );
    const nextToken = prepareNextToken(db);
    const grant = db.prepare<[string, string, bigint, bigint, number]>(
      `INSERT OR REPLACE INTO fencelock_leases (key, owner, token, expires_at, lock_delay_ms)
       VALUES (?, ?, ?, ${NOW} + ?, ?)`,
    );
    const remove = db.prepare<[string]>(`DELETE FROM fencelock_leases WHERE key = ?`);
    const sweep = prepareSweep(db);
    // The head of the line, and how long live readers hold the key (null: none).
    const head = db.prepare<
      { key: string },
      { owner: string | null; remaining: bigint | null; readersLeft: bigint | null }
    >(
      `SELECT first.owner AS owner, first.expires_at - ${NOW} AS remaining,
              (SELECT max(expires_at) - ${NOW} FROM fencelock_readers
               WHERE key = $key AND expires_at > ${NOW}) AS readersLeft
       FROM (SELECT 1) LEFT JOIN
            (SELECT owner, expires_at FROM fencelock_waiters
             WHERE key = $key AND expires_at > ${NOW} ORDER BY seq LIMIT 1) AS first`,
    );
    // Join the tail, or keep one's place and refresh the entry.
    const enqueue = db.prepare<{ key: string; owner: string; entryTtlMs: number }>(
      `INSERT INTO fencelock_waiters (key, owner, seq, expires_at)
       VALUES ($key, $owner,
               coalesce((SELECT max(seq) FROM fencelock_waiters WHERE key = $key), 0) + 1,
               ${NOW} + $entryTtlMs)
       ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at`,
    );
    const dequeue = db.prepare<[string, string]>(
      `DELETE FROM fencelock_waiters WHERE key = ? AND owner = ?`,
    );
    // Whether the key is held (or in a lock-delay), and the live entries ahead of the owner's
    // (all of them when it has none: it would join the tail).
    const standing = db.prepare<{ key: string; owner: string }, { held: bigint; ahead: bigint }>(
      `SELECT (EXISTS (SELECT 1 FROM fencelock_leases
                       WHERE key = $key AND ${OCCUPIED_UNTIL} > ${NOW})
               OR EXISTS (SELECT 1 FROM fencelock_readers WHERE key = $key AND expires_at > ${NOW}))
              AS held,
              (SELECT count(*) FROM fencelock_waiters
               WHERE key = $key AND expires_at > ${NOW} AND owner <> $owner
                 AND seq < coalesce((SELECT seq FROM fencelock_waiters
                                     WHERE key = $key AND owner = $owner AND expires_at > ${NOW}),
                                    9223372036854775807)) AS ahead`,
    );
    const dataVersion = db.prepare('PRAGMA data_version').pluck();
    this.#line = {
      isOpen: () => db.open,
      dataVersion: () => dataVersion.get() as bigint,
      localChanges: () => this.#localChanges,
    };
    const readers = new ReadGrants(db, this.#line);
    this.#readers = readers;

    /** A not-granted answer; a waiting contender keeps (or takes) its place in the line. */
    const notGranted = (request: AttemptRequest, holderTtlMs: bigint): AttemptResult => {
      const queued = request.willWait !== false;
      if (queued) {
        enqueue.run({ key: request.key, owner: request.owner, entryTtlMs: QUEUE_ENTRY_TTL_MS });
      }
      const { key, owner } = request;
      return {
        granted: false,
        holderTtlMs: Math.max(0, Number(holderTtlMs)),
        queued,
        recheckAfterMs: LINE_RECHECK_MS,
        waitForChange: (signal, maxMs) =>
          watchLine(this.#line, () => lockStanding(key, owner), signal, maxMs),
      };
    };

    /** A lock's single attempt, inside the caller's transaction (`#attempt`, `#attemptAll`). */
    const attemptLock = (request: AttemptRequest): AttemptResult => {
      const ttl = BigInt(request.ttlMs);
      const row = read.get(request.key);
      if (row && row.remaining > 0n) {
        if (row.owner === request.owner) {
          refresh.run(ttl, request.key);
          return { granted: true, token: row.token, ttlMs: request.ttlMs };
        }
        return notGranted(request, row.remaining);
      }
      // A grant that ended unreleased keeps the key from everyone (its own owner too) until its
      // lock-delay ends; the attempt says how long that is, and a waiter keeps its place.
      if (row && row.occupied > 0n) return notGranted(request, row.occupied);
      // Free of writers; readers granted past a writer whose row then expired (a downgrade)
      // still hold it (read in the same statement as the head of the line: the one check a
      // plain write lock pays, on a free key only).
      const first = head.get({ key: request.key })!;
      if (first.readersLeft !== null) return notGranted(request, first.readersLeft);
      // Free: the head of the line goes first; a contender behind it waits its turn.
      if (first.owner !== null && first.owner !== request.owner) {
        return notGranted(request, first.remaining ?? 0n);
      }
      if (first.owner !== null) dequeue.run(request.key, request.owner);
      // Expired rows of other keys and of semaphores (holders and waiters that vanished) go;
      // this key's is replaced.
      sweep();
      const token = nextToken();
      grant.run(request.key, request.owner, token, ttl, request.lockDelayMs ?? 0);
      return { granted: true, token, ttlMs: request.ttlMs };
    };
    this.#attempt = db.transaction(attemptLock).immediate.bind(null);

    // Every key's single attempt in one transaction, committed only when every key was granted:
    // a refusal throws `RolledBack` out of it, which undoes the grants (tokens drawn, sweeps,
    // rows) so that nothing of the round is written and no other connection sees a commit.
    const together = db.transaction((requests: readonly AttemptRequest[]): Answer[] => {
      const answers = requests.map((request) =>
        request.mode === 'read' ? readers.attemptIn(request) : attemptLock(request),
      );
      if (answers.every((a) => a !== DOWNGRADE_BLOCKED && a.granted)) return answers;
      throw new RolledBack(answers);
    }).immediate;
    this.#attemptAll = (requests: readonly AttemptRequest[]): Answer[] => {
      try {
        return together(requests);
      } catch (error) {
        if (error instanceof RolledBack) return error.answers;
        throw error;
      }
    };

    /** The answer for an owner and token that hold nothing: `not-owner` while readers hold. */
    const heldBySomeone = (key: string, state: 'not-held' | 'not-owner') =>
      state === 'not-held' && readers.anyLive(key) ? 'not-owner' : state;

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
        if (state === 'yes') {
          refresh.run(BigInt(ttlMs), lease.key);
          return { ok: true, ttlMs };
        }
        // Not the writer: a reader's grant (a LeaseRef carries no mode), found by owner.
        if (readers.renew(lease, ttlMs)) return { ok: true, ttlMs };
        return { ok: false, reason: heldBySomeone(lease.key, state) };
      })
      .immediate.bind(null);

    this.#release = db
      .transaction((lease: LeaseRef): ReleaseOutcome => {
        const row = read.get(lease.key);
        const state = holds(row, lease);
        // An expired row of this owner is cleaned up too once past its lock-delay (a release that
        // comes back after the grant ended does not clear the delay); the answer is still
        // `not-held`. A live row with this owner but another token is not this lease's: it stays
        // (`not-owner`).
        const lapsed = state === 'not-held' && row?.owner === lease.owner && row.occupied <= 0n;
        if (state === 'yes' || lapsed) {
          remove.run(lease.key);
          // Readers granted past this writer (a downgrade) keep the key held.
          readers.cover(lease.key);
          if (state === 'yes') return 'released';
        }
        // Not the writer: a reader's grant (a LeaseRef carries no mode), found by owner.
        if (readers.release(lease) === 'released') return 'released';
        return heldBySomeone(lease.key, state);
      })
      .immediate.bind(null);

    this.#abandon = db
      .transaction((request: AttemptRequest): void => {
        // The owner's live row goes (its lock-delay with it), or its row past the delay; a row in
        // its lock-delay stays.
        const row = read.get(request.key);
        if (row?.owner === request.owner && (row.remaining > 0n || row.occupied <= 0n)) {
          remove.run(request.key);
          readers.cover(request.key);
        }
        readers.drop(request.key, request.owner);
        dequeue.run(request.key, request.owner);
      })
      .immediate.bind(null);

    this.#leaveQueue = (request: AttemptRequest): void => {
      dequeue.run(request.key, request.owner);
    };
    const lockStanding = (key: string, owner: string) => {
      const row = standing.get({ key, owner })!;
      return { free: row.held === 1n ? 0 : 1, ahead: Number(row.ahead) };
    };
    this.#semaphores = new Semaphores(db, this.#line);
    this.#held = new HeldKeys(db);
    const elections = new Elections(db, this.#line);
    this.#elections = elections;
    this.#watches = new ElectionWatches(
      {
        isOpen: () => db.open,
        dataVersion: () => dataVersion.get() as bigint,
        electionChanges: () => this.#electionChanges,
      },
      (key) => {
        const leader = elections.leader(key);
        return leader === null ? null : `${leader.owner} ${leader.term} ${leader.value}`;
      },
    );

    this.#inspect = (key: string): LockInfo => {
      const row = read.get(key);
      const writer =
        row !== undefined && row.remaining > 0n && row.owner !== READERS_OWNER ? row : undefined;
      const reading = readers.live(key);
      // Without a writer, the holder is the earliest reader.
      const first = writer ?? reading[0];
      if (first === undefined) return { key, holder: null, lastFencingToken: 0n };
      const newest = reading.at(-1)?.token ?? 0n;
      return {
        key,
        holder: { owner: first.owner, fencingToken: first.token, ttlMs: Number(first.remaining) },
        lastFencingToken: first.token > newest ? first.token : newest,
      };
    };
  }

  /**
   * One IMMEDIATE transaction: take a free or expired row with a token from the database's
   * counter (deleting up to `SWEEP_LIMIT` expired rows of each table first), or report the
   * holder's remaining TTL. With `permits`, a semaphore's permit (semaphores.ts); with `mode`
   * `read`, a read grant (readers.ts); with `election`, the election's leadership, its value
   * stored with it (election.ts).
   * @throws PermitsMismatchError when the semaphore's live holders or waiters use another count.
   * @throws InvalidArgumentError (`downgradeBlocked`) for a read attempt past the caller's own
   * writer (`heldWriter`) while another writer waits in the line; the attempt is withdrawn.
   * @throws BackendError when SQLite fails.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    const { permits } = request;
    if (request.election !== undefined) {
      // A refused candidate may have joined the line, a granted one changed the leader.
      this.#electionChanges += 1;
      return this.#run('attempt', () => this.#elections.attempt(request));
    }
    if (request.mode === 'read') {
      const answer = this.#run('attempt', () => this.#readers.attempt(request));
      if (answer === DOWNGRADE_BLOCKED) throw downgradeBlocked(request.key);
      return answer;
    }
    if (permits === undefined) return this.#run('attempt', () => this.#attempt(request));
    const answer = this.#run('attempt', () => this.#semaphores.attempt(request, permits));
    if ('inUse' in answer) throw new PermitsMismatchError(request.key, permits, answer.inUse);
    return answer;
  }

  /**
   * Single attempts at several keys (`acquireAll`'s first round) as one IMMEDIATE transaction:
   * each key's attempt is `attempt`'s own (the lock's row, or a read grant; a key whose line has
   * a live waiter is refused as it is there), the grants draw their tokens from the one counter
   * in key order, and the transaction commits only when every key was granted. Otherwise it
   * rolls back: nothing is written, no token is spent and other connections' waiters see no
   * commit (`data_version` stays); each refused key is answered as `attempt` answers it, each
   * other key `{ granted: false }`.
   * @param requests single attempts (`willWait: false`) at distinct keys, without `permits`.
   * @returns the answers in the order of `requests`; null for semaphore permits or candidates
   *   (not taken here).
   * @throws InvalidArgumentError (`downgradeBlocked`) when a read attempt past the caller's own
   *   writer finds another writer waiting; nothing is granted.
   * @throws BackendError when SQLite fails (the transaction is rolled back).
   */
  async attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    if (requests.some((r) => r.permits !== undefined || r.election !== undefined)) return null;
    const answers = this.#run(`attempt of ${requests.length} keys`, () =>
      this.#attemptAll(requests),
    );
    const blocked = answers.indexOf(DOWNGRADE_BLOCKED);
    if (blocked >= 0) throw downgradeBlocked(requests[blocked]!.key);
    // As for `attempt`, `#localChanges` stays: a grant lets no waiter in, and a refusal wrote
    // nothing; a committed round moves `data_version` for the other connections' waiters.
    const all = answers as AttemptResult[];
    if (all.every((a) => a.granted)) return all;
    // Rolled back: a key granted in the transaction is free, not held.
    return all.map((a) => (a.granted ? { granted: false } : a));
  }

  /**
   * Move the row's expiry only while owner and token match and it has not expired (a permit's
   * row with `lease.permits`; the leader's with `lease.election`; a read grant's when the key's
   * row is not this writer's).
   */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    if (lease.election === true) {
      return this.#run('renew', () => this.#elections.renew(lease, ttlMs));
    }
    if (lease.permits !== undefined) {
      return this.#run('renew', () => this.#semaphores.renew(lease, ttlMs));
    }
    return this.#run('renew', () => this.#renew(lease, ttlMs));
  }

  /**
   * Compare-and-delete by owner and token (the writer's row, else a read grant); an expired row
   * of this owner is cleaned up as `not-held` (or `not-owner` while others hold the key or the
   * semaphore's permits). A writer's release leaves the readers' stand-in in its place when
   * readers were granted past it (a downgrade). With `lease.election`, the leader's row of that
   * owner and term, its value with it.
   */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    this.#localChanges += 1;
    if (lease.election === true) {
      this.#electionChanges += 1;
      return this.#run('release', () => this.#elections.release(lease));
    }
    if (lease.permits !== undefined) {
      return this.#run('release', () => this.#semaphores.release(lease));
    }
    return this.#run('release', () => this.#release(lease));
  }

  /**
   * Delete the row (writer's or read grant) if this owner has it, whatever the token, and take
   * it out of the key's line (a permit's row and the semaphore's line with `request.permits`;
   * the leader's row and the election's line with `request.election`).
   */
  async abandon(request: AttemptRequest): Promise<void> {
    this.#localChanges += 1;
    if (request.election !== undefined) {
      this.#electionChanges += 1;
      this.#run('abandon', () => this.#elections.withdraw(request, false));
      return;
    }
    if (request.permits !== undefined) {
      this.#run('abandon', () => this.#semaphores.withdraw(request, false));
      return;
    }
    this.#run('abandon', () => this.#abandon(request));
  }

  /** Take the owner out of the key's (semaphore's, election's) line only; a grant it holds stays. */
  async leaveQueue(request: AttemptRequest): Promise<void> {
    this.#localChanges += 1;
    if (request.election !== undefined) {
      this.#run('leave the line', () => this.#elections.withdraw(request, true));
      return;
    }
    if (request.permits !== undefined) {
      this.#run('leave the line', () => this.#semaphores.withdraw(request, true));
      return;
    }
    this.#run('leave the line', () => this.#leaveQueue(request));
  }

  /**
   * The unexpired holder (the writer, else the reader with the oldest token). `lastFencingToken`
   * is the newest token of the holders, 0n when the key is free: tokens come
   * from one counter for the whole database and a freed key leaves no row, so nothing per key
   * remains to tell its last token.
   */
  async inspect(key: string): Promise<LockInfo> {
    return this.#run('inspect', () => this.#inspect(key));
  }

  /** A page of the held locks and semaphores under a prefix, in one read transaction. */
  async list(request: ListRequest): Promise<ListPage> {
    const start = parseKeyListCursor(request.cursor, request.prefix);
    return this.#run('list', () => this.#held.page(request, start));
  }

  /**
   * Compare-and-set of the leader's value: one IMMEDIATE transaction that stores `value` only in
   * the live row of `lease.owner` with term `lease.fencingToken`; `not-owner` while another
   * leader (or another term of this owner) is live, else `not-held`.
   * @throws BackendError when SQLite fails.
   */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    this.#electionChanges += 1;
    return this.#run('proclaim', () => this.#elections.proclaim(lease, value));
  }

  /**
   * The live leader of the election `key`: owner, term, value, remaining TTL (ms, > 0) and the
   * count of candidates (the leader and the line's live entries), read by one SELECT (one
   * snapshot of the file); candidates in line are not leaders, an expired row is nobody's.
   * @throws BackendError when SQLite fails.
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    return this.#run('leader', () => this.#elections.leader(key));
  }

  /**
   * Watch the election `key`: armed (its leader read) before it resolves; the backend's one
   * poller then calls `onChange` after a commit of any connection that changed the leader's
   * owner, term or value (election-watch.ts), within about `ELECTION_POLL_MS`.
   * `recheckAfterMs` is `ELECTION_RECHECK_MS` (2 s): the watch is polled, and an expiry with no
   * commit after it goes unnotified.
   * @throws BackendError when SQLite fails or the backend is closed.
   */
  async watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    return this.#run('watch of the election', () => this.#watches.watch(key, onChange));
  }

  /** End the election watches (no callback after it) and close the database connection. */
  async close(): Promise<void> {
    this.#watches.close();
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

export { QUEUE_ENTRY_TTL_MS };
