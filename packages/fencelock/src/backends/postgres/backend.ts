/**
 * PostgreSQL backend, lease mode: one row per held lock in `<schema>.fencelock_leases` (key,
 * owner, fencing token, expiry on the server's clock). Grant, renew, release and withdraw are
 * one statement each (see sql.ts), so no state lives in a database session: it works through a
 * pool, and behind a transaction-mode pooler with `pooler: 'transaction'` (which also keeps the
 * startup parameters a pooler refuses off the connection; see connection.ts).
 *
 * - Fencing tokens come from one sequence per schema, drawn in the granting statement while a
 *   transaction-level lock on the key is held: a key's tokens strictly increase (not
 *   consecutively), across owners and restarts (a sequence can skip values after a crash but
 *   never goes back). docs/semantics.md ("Choices made where the issue was silent") says why a
 *   sequence and not a per-key counter.
 * - Expiry is computed from the server's clock (`clock_timestamp()`), never the client's. An
 *   expired lease is taken over by the next acquirer in the same statement; released rows are
 *   deleted, and rows left expired by crashed holders are deleted by the sweep that every open
 *   backend runs with its first attempt and then once a minute (see sweeper.ts): a key nobody
 *   holds leaves no row once `SWEEP_INTERVAL_MS` has passed after its expiry.
 * - Waiting: `LISTEN/NOTIFY` on the schema's channel (one listening connection per backend, to
 *   `listenUrl` when given: behind a transaction-mode pooler LISTEN must reach the server
 *   directly), with the core's jittered poll bounded by the holder's remaining time as a
 *   fallback.
 * - Semaphores (`locker.semaphore`, permit-sql.ts and permits.ts): one row per held permit in
 *   `<schema>.fencelock_permits` (key, owner, token from the same sequence, the permit count,
 *   expiry) and a line of waiters per semaphore in `<schema>.fencelock_permit_waiters`, apart
 *   from the locks' tables, so a lock and a semaphore of one key never meet. The permit count in
 *   use is the one its live holders and waiters carry; nothing remains of an idle semaphore once
 *   its rows are released or swept. A grant, release or withdrawal is one call of a PL/pgSQL
 *   function that takes the semaphore's transaction-level lock, then counts the live permits and
 *   the line exactly (at most N holders; FIFO among waiters), and a release NOTIFYs the one
 *   waiter its freed permit lets in, by owner (no herd).
 * - Read locks (`mode: 'read'`, read-sql.ts and reads.ts): one row per read grant in
 *   `<schema>.fencelock_readers` (key, owner, token from the same sequence, expiry); while
 *   readers hold a key its lease row is a placeholder of owner `''` that lives as long as the
 *   longest reader, so writers wait for it through the statements above, unchanged. One FIFO
 *   line for both modes (`fencelock_waiters.reader`): a reader waits only for a writer holding
 *   or lined up ahead of it. A writer's release wakes the head of the line; the first reader it
 *   lets in wakes the readers after it up to the next write entry; the last reader's release
 *   deletes the placeholder and wakes the head writer. Renewals and releases carry no mode: a
 *   writer's statement runs first; a renewal that changed nothing says whether owner and token
 *   are a read grant's, and a release answered `not-owner` is asked again as a reader's
 *   (reads.ts, a second call).
 * - Several keys at once (`attemptAll`, `acquireAll`'s first round, attempt-all-sql.ts): one
 *   statement calls `fencelock_attempt_all`, which takes the keys' transaction-level locks in one
 *   order for every caller, then makes each key's single attempt (the statement `attempt` sends,
 *   or the read attempt's function) inside a subtransaction rolled back at the first key refused:
 *   every key granted or none, the fair line and the read/write rules as for `tryAcquire`.
 * - Leader elections (`locker.election`, election-sql.ts and elections.ts): the leader's row in
 *   `<schema>.fencelock_elections` (key, owner, term, value, expiry) and a FIFO line of
 *   candidates in `<schema>.fencelock_election_waiters`, apart from the locks' and semaphores'
 *   tables (a third object of the key, with a transaction-level lock of its own,
 *   `electionLockPairOf`). A grant is the lock's statement on those tables, storing the value;
 *   the term is the grant's token from the schema's sequence, so it never goes back, however
 *   long the election stood idle. `proclaim` is one compare-and-set UPDATE of owner and term;
 *   `leader` one SELECT of the live row. A grant, proclaim, release or withdrawal NOTIFYs the
 *   schema's channel; `watchElection` registers with the one LISTEN connection (none of its
 *   own), and without notifications it is a poll (`POLL_RECHECK_MS`).
 * - Lock-delay (`lockDelayMs`, lock-delay-sql.ts): a column of the grant's row
 *   (`lock_delay_ms` in `fencelock_leases` and `fencelock_elections`). A row that expired keeps
 *   its key (or election) from every contender until `expires_at` + the delay, on the server's
 *   clock (exact); the head of the line and readers wait too. A release or withdrawal of the live
 *   grant deletes the row and the delay; a late one leaves it; the sweep deletes it after the
 *   delay.
 * - Schema versions: every object is created if missing (functions replaced) by one set-up
 *   transaction, and a backend runs it when the object the latest version added
 *   (`fencelock_delay_end`) is missing, so a schema of an earlier version is upgraded in place
 *   by the first operation (which then needs CREATE on the schema, once; and, for the
 *   lock-delay's columns, the ownership of the lease, election and advisory holders tables).
 */
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
import { RenewalBatcher, type RenewalRequest } from '../../core/renewal-batch.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { MAX_TIMER_MS } from '../../options.js';
import { QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { PostgresConnectionSet, type PostgresSettings } from './connection.js';
import { PostgresElections } from './elections.js';
import { notGrantedIn } from './listener.js';
import { listPage } from './listing.js';
import { PostgresPermits } from './permits.js';
import { PostgresReads } from './reads.js';
import { xactLockPairOf } from './sql.js';
import { Sweeper } from './sweeper.js';
import { tokenParameter } from './tokens.js';

/** Most renewals sent in one statement. */
const RENEW_BATCH_LIMIT = 1_000;

/** Each backend sweeps expired rows with its first attempt, then once per this interval, ms. */
const SWEEP_INTERVAL_MS = 60_000;
/** Most rows one sweep statement deletes; a full batch is followed at once by another. */
const SWEEP_BATCH = 1_000;

/** The lease-table backend. Build it with `createPostgresBackend`. */
export class PostgresBackend implements Backend {
  readonly name = 'postgres';
  readonly maxTtlMs = MAX_TIMER_MS;
  /**
   * Write and read locks; a FIFO line of waiters per key and per semaphore (`leaveQueue`);
   * renewals of one turn go as one statement; semaphore permits; several keys' single attempts
   * in one statement (`attemptAll`); listing; leader elections; lock-delay.
   */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write', 'read'] as const),
    sessions: false,
    queue: true,
    batchRenew: true,
    permits: true,
    attemptAll: true,
    list: true,
    election: true,
    lockDelay: true,
  });
  readonly #db: PostgresConnectionSet;
  readonly #permits: PostgresPermits;
  readonly #reads: PostgresReads;
  readonly #elections: PostgresElections;
  /** Deletes rows and permits that expired unreleased, and line entries of vanished waiters. */
  readonly #sweeper = new Sweeper(async () => {
    const { sql } = this.#db;
    let full = false;
    for (const statement of [
      sql.sweep,
      sql.sweepWaiters,
      sql.permits.sweep,
      sql.permits.sweepWaiters,
      sql.reads.sweep,
      sql.elections.sweep,
      sql.elections.sweepWaiters,
    ]) {
      const { rowCount } = await this.#db.query(statement, [SWEEP_BATCH]);
      full ||= rowCount === SWEEP_BATCH;
    }
    return full;
  }, SWEEP_INTERVAL_MS);
  /** Renewals asked for in this turn of the event loop, sent together at its end. */
  readonly #renewals = new RenewalBatcher((batch) => this.#sendRenewals(batch), RENEW_BATCH_LIMIT);

  constructor(settings: PostgresSettings) {
    this.#db = new PostgresConnectionSet(settings);
    this.#permits = new PostgresPermits(this.#db);
    this.#reads = new PostgresReads(this.#db);
    this.#elections = new PostgresElections(this.#db);
  }

  /** The schema-qualified lease table, for operators and tests. */
  get leaseTable(): string {
    return this.#db.sql.leasesTable;
  }

  /** The NOTIFY channel of releases (payload: the key). */
  get channel(): string {
    return this.#db.sql.channel;
  }

  /**
   * One statement: take a free or expired key with a new token when the key's line is empty or
   * this owner heads it, refresh this owner's own live lease (same token), or join the line (a
   * waiting contender) and report the holder's remaining TTL.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    if (request.election !== undefined) {
      try {
        return await this.#elections.attempt(request, request.election.value);
      } finally {
        this.#sweeper.start();
      }
    }
    if (request.permits !== undefined) {
      try {
        return await this.#permits.attempt(request, request.permits);
      } finally {
        this.#sweeper.start();
      }
    }
    if (request.mode === 'read') {
      try {
        return await this.#reads.attempt(request);
      } finally {
        this.#sweeper.start();
      }
    }
    const listener = this.#db.listener;
    const mark = listener?.mark() ?? -1;
    const [hi, lo] = xactLockPairOf(request.key);
    // A single attempt never joins the line, so it leaves nothing to withdraw. Nor does a waiter
    // without notifications: the head would learn of a release only when its backoff sleep
    // ends, and the key would stay free that long at every hand-off. It still lets the line go
    // first.
    const queued = request.willWait !== false && listener !== undefined;
    const { rows } = await this.#db.run('attempt', () =>
      this.#db.queryPrepared<{ token: string | null; remaining_ms: string | null }>(
        this.#db.sql.attempt,
        [
          request.key,
          request.owner,
          request.ttlMs,
          hi,
          lo,
          queued,
          QUEUE_ENTRY_TTL_MS,
          request.lockDelayMs ?? null,
        ],
      ),
    );
    this.#sweeper.start();
    const row = rows[0];
    if (row?.token != null) {
      return { granted: true, token: BigInt(row.token), ttlMs: request.ttlMs };
    }
    return notGrantedIn(listener, request.key, request.owner, mark, queued, row?.remaining_ms);
  }

  /**
   * Single attempts at several keys (`acquireAll`'s first round) in one statement: one call of
   * `fencelock_attempt_all` (attempt-all-sql.ts), which takes every key's transaction-level lock
   * in one order and makes each key's single attempt (the statement of `attempt`, or the read
   * attempt's function) in a subtransaction that it rolls back at the first key refused. So
   * every key is granted, with a token from the schema's sequence, or none is, and nothing joins
   * a line. Through a transaction-mode pooler it is one transaction, as every statement is.
   * @param requests 2 to `MAX_MULTI_KEYS` requests for distinct keys, one mode, no `permits`.
   * @returns one answer per request, in order: all granted, or none (the key at which the call
   *   stopped answered as `attempt` answers a single attempt; the others `{ granted: false }`,
   *   keys after that one not looked at); null for semaphore permits, which are not taken here.
   * @throws InvalidArgumentError (`downgradeBlocked`) when a read asked for inside the caller's
   *   write lock finds another writer waiting; nothing is granted.
   * @throws BackendError when the server cannot answer.
   */
  async attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    if (requests.some((request) => request.permits !== undefined || request.election)) {
      return null;
    }
    const listener = this.#db.listener;
    const mark = listener?.mark() ?? -1;
    const pairs = requests.map((request) => xactLockPairOf(request.key));
    const { rows } = await this.#db.run('attempt', () =>
      this.#db.queryPrepared<{
        token: string | null;
        blocked: boolean;
        refused: boolean;
        remaining_ms: string | null;
      }>(this.#db.sql.attemptAll, [
        requests.map((request) => request.key),
        requests.map((request) => request.owner),
        requests.map((request) => request.ttlMs),
        pairs.map(([hi]) => hi),
        pairs.map(([, lo]) => lo),
        requests.map((request) => request.mode === 'read'),
        requests.map((request) => request.heldWriter ?? null),
        this.#db.sql.channel,
        requests.map((request) => request.lockDelayMs ?? null),
      ]),
    );
    this.#sweeper.start();
    if (rows.length === requests.length && rows.every((row) => row.token != null)) {
      return requests.map((request, i) => ({
        granted: true,
        token: BigInt(rows[i]!.token!),
        ttlMs: request.ttlMs,
      }));
    }
    return requests.map((request, i): AttemptResult => {
      const row = rows[i];
      if (row?.blocked !== true) return { granted: false };
      if (row.refused) throw downgradeBlocked(request.key);
      return notGrantedIn(listener, request.key, request.owner, mark, false, row.remaining_ms);
    });
  }

  /**
   * Move the expiry while owner and token hold an unexpired lease. Renewals asked for in the
   * same turn of the event loop (the watchdog runs leases that fall due together in one turn)
   * go to the server as one statement: one round trip for many leases.
   */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    if (lease.election === true) return this.#elections.renew(lease, ttlMs);
    return this.#renewals.renew(lease, ttlMs);
  }

  /** A lone renewal of a lock or of a permit, or many of either in one statement. */
  async #sendRenewals(batch: readonly RenewalRequest[]): Promise<RenewResult[]> {
    const sql = this.#db.sql;
    const { rows } = await this.#db.run('renew', () =>
      batch.length === 1
        ? this.#db.queryPrepared<{ ok: boolean; live: boolean; reader: boolean }>(
            batch[0]!.lease.permits === undefined ? sql.renew : sql.permits.renew,
            [
              batch[0]!.lease.key,
              batch[0]!.lease.owner,
              tokenParameter(batch[0]!.lease.fencingToken),
              batch[0]!.ttlMs,
            ],
          )
        : this.#db.queryPrepared<{ ok: boolean; live: boolean; reader: boolean }>(sql.renewMany, [
            batch.map((r) => r.lease.key),
            batch.map((r) => r.lease.owner),
            batch.map((r) => tokenParameter(r.lease.fencingToken)),
            batch.map((r) => r.ttlMs),
            batch.map((r) => r.lease.permits !== undefined),
          ]),
    );
    return Promise.all(
      batch.map((renewal, i): RenewResult | Promise<RenewResult> => {
        const row = rows[i];
        if (row?.ok === true) return { ok: true, ttlMs: renewal.ttlMs };
        // A read grant of this owner and token (the statement looks only when the lease was
        // not renewed as a writer's) renews in read-sql.ts.
        if (row?.reader === true) return this.#reads.renew(renewal.lease, renewal.ttlMs);
        return { ok: false, reason: row?.live === true ? 'not-owner' : 'not-held' };
      }),
    );
  }

  /** Compare-and-delete by owner and token, then NOTIFY the waiters. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    if (lease.election === true) return this.#elections.release(lease);
    if (lease.permits !== undefined) return this.#permits.release(lease);
    const { rows } = await this.#db.run('release', () =>
      this.#db.queryPrepared<{ outcome: ReleaseOutcome }>(this.#db.sql.release, [
        lease.key,
        lease.owner,
        tokenParameter(lease.fencingToken),
        this.#db.sql.channel,
      ]),
    );
    const outcome = rows[0]?.outcome ?? 'not-held';
    // Someone else's row: readers' placeholder, or the writer of a downgrade. A read grant of
    // this owner is released in read-sql.ts (a reader's release costs a second call; so does a
    // writer's refused one, which is rare).
    return outcome === 'not-owner' ? this.#reads.release(lease) : outcome;
  }

  /** Take the owner out of the key's line only (a grant it holds stays); tell the new head. */
  async leaveQueue(request: AttemptRequest): Promise<void> {
    if (request.election !== undefined) return this.#elections.withdraw(request, true);
    if (request.permits !== undefined) return this.#permits.withdraw(request, true);
    if (request.mode === 'read') return this.#reads.withdraw(request, true);
    await this.#db.run('leave the line', () =>
      this.#db.queryPrepared(this.#db.sql.leaveQueue, [
        request.key,
        request.owner,
        this.#db.sql.channel,
      ]),
    );
  }

  /**
   * Delete the row if this owner has it, whatever the token, and its entry in the key's line;
   * NOTIFY the new head.
   */
  async abandon(request: AttemptRequest): Promise<void> {
    if (request.election !== undefined) return this.#elections.withdraw(request, false);
    if (request.permits !== undefined) return this.#permits.withdraw(request, false);
    if (request.mode === 'read') return this.#reads.withdraw(request, false);
    await this.#db.run('abandon', () =>
      this.#db.queryPrepared(this.#db.sql.abandon, [
        request.key,
        request.owner,
        this.#db.sql.channel,
      ]),
    );
  }

  /**
   * The unexpired holder. `lastFencingToken` is its token, 0n when the key is free: tokens come
   * from a sequence shared by all keys and a released row is deleted, so nothing per key remains.
   */
  /**
   * A page of held locks and semaphores: one statement walking at most `pageSize` rows of a
   * table's key index from where the last page stopped (listing.ts, list-sql.ts).
   */
  list(request: ListRequest): Promise<ListPage> {
    return listPage(this.#db, request);
  }

  async inspect(key: string): Promise<LockInfo> {
    const { rows } = await this.#db.run('inspect', () =>
      this.#db.query<{
        owner: string;
        token: string;
        remaining_ms: string;
        highest: string | null;
      }>(this.#db.sql.reads.inspect, [key]),
    );
    const row = rows[0];
    if (row === undefined) return { key, holder: null, lastFencingToken: 0n };
    const fencingToken = BigInt(row.token);
    const highest = row.highest === null ? 0n : BigInt(row.highest);
    return {
      key,
      holder: { owner: row.owner, fencingToken, ttlMs: Math.max(0, Number(row.remaining_ms)) },
      lastFencingToken: highest > fencingToken ? highest : fencingToken,
    };
  }

  /**
   * Store `value` as the leader's only while `lease.owner` leads with term `lease.fencingToken`
   * (one UPDATE), and NOTIFY the election's watchers.
   */
  proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    return this.#elections.proclaim(lease, value);
  }

  /**
   * The live leader of election `key` and the count of its candidates: one SELECT (one
   * snapshot), or null.
   */
  leader(key: string): Promise<ElectedLeader | null> {
    return this.#elections.leader(key);
  }

  /**
   * Watch election `key` on the backend's LISTEN connection: armed once LISTEN is confirmed;
   * `onChange` after each grant, proclaim, release and withdrawal NOTIFY (and when notices may
   * have been missed: the connection dropped, or came back). `recheckAfterMs` 30 s; without
   * notifications, a poll every second.
   */
  watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    return this.#elections.watch(key, onChange);
  }

  /** Stop the listener and end the pool (a pool you passed in stays open). */
  async close(): Promise<void> {
    await this.#sweeper.stop();
    await this.#db.close();
  }
}

export { QUEUE_ENTRY_TTL_MS };
