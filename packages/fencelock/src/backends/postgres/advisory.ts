/**
 * PostgreSQL backend, advisory-lock mode: a lock is a session-level `pg_try_advisory_lock(id)`
 * (id: the 64-bit hash of the key, see `lockIdOf`) taken on one dedicated connection per backend.
 * The server holds it while that connection lives, so a killed backend process or a dropped
 * connection releases it at once; the client then counts every lease of the connection as lost
 * (`lease.signal` aborts).
 *
 * - Session-level advisory locks are reentrant within a session: the same connection asking
 *   twice gets the lock twice. Every lease of this backend shares the connection, so the backend
 *   keeps its own table of which owner holds which key and never asks the server for a key that
 *   another of its owners holds or is asking for: two handles on one connection still exclude
 *   each other (failure scenario T05, test/integration/handed/t05-reentrancy.test.ts).
 * - Fencing token: drawn from the schema's sequence in the statement that took the lock, after
 *   it was taken, and recorded with the owner and the server pid in
 *   `<schema>.fencelock_advisory_holders` for `inspect`.
 * - TTL: the server knows none. The backend releases a lease that was not renewed within its
 *   TTL, as the other engines' expiry would; while the process is paused or cut off, only the
 *   server's detection of the dead connection (TCP keepalive, `tcp_user_timeout`) frees the key,
 *   which is why writes should be fenced.
 * - Rows of `fencelock_advisory_holders` whose session is gone (terminated, crashed, a process
 *   that ended without releasing) are deleted by the sweep every open backend runs with its first
 *   attempt and then once a minute (see `advisorySweep` in sql.ts and sweeper.ts): a key nobody
 *   holds leaves no row once `SWEEP_INTERVAL_MS` has passed after its session ended. A release
 *   deletes its row in the unlocking statement.
 * - No semaphores (`capabilities.permits` false): a permit held as a session-level lock (one of N
 *   slot locks per key) could be renewed or given back only by the connection that holds it, but
 *   any locker must be able to renew and release a permit by owner and token (owner-addressed
 *   permits, the sidecar's path). Lease mode grants them (permit-sql.ts).
 * - Write locks only (`capabilities.modes` `['write']`): `pg_advisory_lock_shared` would share a
 *   key among readers, but a session lock has no line (a `pg_try_` attempt is not queued, and a
 *   blocking one waits in the server's own order, invisible to `leaveQueue` and deadlines), so a
 *   reader arriving after a waiting writer would pass it (no FIFO, writer starvation), and the
 *   readers' tokens, renewals and releases by owner would need rows that only the holding
 *   connection can back. Lease mode grants read locks (read-sql.ts).
 * - Several keys at once (`attemptAll`, `acquireAll`'s first round): one statement on the lock
 *   connection tries every key's lock and, unless it got them all, unlocks those it got before it
 *   answers, so the server never keeps a partial set; tokens are drawn only once all are held.
 *   A try never waits, so no order of keys can deadlock. Another session's `pg_try_` can find a
 *   key taken for the length of that statement and be refused, as by any short-lived holder.
 * - Lock-delay (`capabilities.lockDelay`, lock-delay-sql.ts): the holder's row keeps the grant's
 *   delay. When the backend's TTL runs out, the unlocking statement first turns the row into
 *   the delay's record (`delayed_until` = the server's clock then + the delay): exact. When the
 *   holder's session ends instead (killed process, terminated or lost connection), the server
 *   keeps no time of it: the first attempt that finds the lock free under such a row sets
 *   `delayed_until` to the earlier of the row's TTL end and that moment, + the delay (never
 *   early; late by at most the holder's TTL, or the contenders' poll interval while they wait).
 *   A release or withdrawal deletes the row before it unlocks: no delay. Every attempt checks
 *   the row under its row lock after taking the session lock, so it sees each such change that
 *   the lock's last holder committed.
 * - Needs a real session: do not run this mode behind a transaction-mode pooler
 *   (`pooler: 'transaction'` is refused with this mode). A pooler the options do not name is
 *   found when the lock connection opens, before any lock is taken on it (see session-check.ts):
 *   every attempt then fails with a `BackendError` saying so.
 */
import type pg from 'pg';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  Granted,
  LeaseRef,
  ListPage,
  ListRequest,
  LockInfo,
  NotGranted,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { BackendError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import {
  isConnectionFailure,
  PostgresConnectionSet,
  type PostgresSettings,
  prepared,
} from './connection.js';
import { listAdvisoryPage } from './listing.js';
import { findTransactionPooler } from './session-check.js';
import { lockIdOf, pgLocksIdOf } from './sql.js';
import { Sweeper } from './sweeper.js';

/** Each backend sweeps unbacked holder rows with its first attempt, then once per this interval, ms. */
const SWEEP_INTERVAL_MS = 60_000;
/** Most rows one sweep statement deletes; a full batch is followed at once by another. */
const SWEEP_BATCH = 1_000;

/** The dedicated connection all advisory locks of a backend live on. */
interface AdvisorySession {
  readonly client: pg.Client;
  /** The last statement queued on the connection: statements run one after another. */
  tail: Promise<unknown>;
  /** Aborted (with a BackendError) when the connection is lost: its locks are gone. */
  readonly lost: AbortController;
}

/** A key this backend holds, or is asking the server for. */
interface Holding {
  readonly owner: string;
  /** Undefined while the attempt is in flight. */
  token: bigint | undefined;
  session: AdvisorySession | undefined;
  /** Releases the lock when it is not renewed within its TTL. */
  expiry: NodeJS.Timeout | undefined;
  /**
   * The TTL ran out and the unlock is queued on the connection: from then on the lock is not
   * this owner's, even before the unlock has run (a renewal queued behind it must not succeed).
   */
  expired: boolean;
}

/** The advisory-lock backend. Build it with `createPostgresBackend({ …, mode: 'advisory' })`. */
export class PostgresAdvisoryBackend implements Backend {
  readonly name = 'postgres';
  readonly maxTtlMs = MAX_TIMER_MS;
  /**
   * Write locks only; several keys' single attempts in one statement (`attemptAll`); listing of
   * the keys whose holder's session holds the lock.
   */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write'] as const),
    sessions: false,
    queue: false,
    batchRenew: false,
    permits: false,
    attemptAll: true,
    list: true,
    election: false,
    lockDelay: true,
  });
  readonly #db: PostgresConnectionSet;
  readonly #held = new Map<string, Holding>();
  #session: AdvisorySession | undefined;
  #opening: Promise<AdvisorySession> | undefined;
  /** Deletes holder rows whose session is gone. */
  readonly #sweeper = new Sweeper(async () => {
    const { rowCount } = await this.#db.query(this.#db.sql.advisorySweep, [SWEEP_BATCH]);
    return rowCount === SWEEP_BATCH;
  }, SWEEP_INTERVAL_MS);
  /** Set once the lock connection was found behind a transaction-mode pooler: every attempt fails. */
  #refused: BackendError | undefined;
  readonly #commandTimeoutMs: number;

  constructor(settings: PostgresSettings) {
    this.#db = new PostgresConnectionSet(settings);
    this.#commandTimeoutMs = settings.commandTimeoutMs;
  }

  /** Server pid of the dedicated connection, or undefined when none is open (tests, operators). */
  get sessionPid(): number | undefined {
    return (this.#session?.client as { processID?: number } | undefined)?.processID;
  }

  /** Ask the server for the key's advisory lock unless another owner of this backend has it. */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    const mark = this.#db.listener?.mark() ?? -1;
    const local = this.#held.get(request.key);
    if (local !== undefined) {
      if (
        local.owner === request.owner &&
        local.token !== undefined &&
        local.session &&
        !local.expired
      ) {
        this.#armExpiry(request.key, local, request.ttlMs);
        return {
          granted: true,
          token: local.token,
          ttlMs: request.ttlMs,
          lost: local.session.lost.signal,
        };
      }
      return this.#notGranted(request, mark);
    }
    const holding = this.#claim(request);
    let session: AdvisorySession | undefined;
    try {
      const { rows } = await this.#db.run('attempt', async () => {
        session = await this.#getSession();
        return serially(session, (client) =>
          client.query<AttemptRow>(
            prepared(this.#db.sql.advisoryAttempt, attemptArrays([request])),
          ),
        );
      });
      this.#sweeper.start();
      const row = rows[0];
      if (row?.ok !== true || row.token === null || session === undefined) {
        this.#forget(request.key, holding);
        return this.#notGranted(request, mark, row?.remaining_ms);
      }
      return this.#confirm(request, holding, BigInt(row.token), session);
    } catch (error) {
      // The server may have granted the lock before the error (a lost reply): give it back.
      await this.#giveBack(request.key, holding);
      throw error;
    }
  }

  /**
   * Single attempts at several keys (`acquireAll`'s first round) in one statement on the lock
   * connection (`advisoryAttempt` in sql.ts, as for one key): it tries every key's session lock
   * and, unless all were got and no key is in a lock-delay, unlocks those it got before
   * answering; tokens are drawn only once every lock is held. The local table is kept as by `attempt`: a key another owner of this backend holds
   * or asks for is refused without asking the server, and every key asked for is marked as this
   * owner's while the statement runs.
   * @param requests 2 to `MAX_MULTI_KEYS` requests for distinct keys, write mode, no `permits`.
   * @returns one answer per request, in order: all granted, or none (keys found held answered as
   *   `attempt` answers, a key in its lock-delay with the delay left, the others
   *   `{ granted: false }`). A key this same owner holds already (a
   *   repeated call) keeps its grant: granted again when every key is, else left as it was.
   *   Null for read locks or semaphore permits, which this mode does not grant.
   * @throws BackendError when the server cannot answer (the locks the statement may have taken
   *   are given back first), or when the lock connection was lost meanwhile.
   */
  async attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    if (requests.some((r) => r.permits !== undefined || r.mode !== 'write')) return null;
    const mark = this.#db.listener?.mark() ?? -1;
    const locals = requests.map((request) => this.#held.get(request.key));
    const own = (local: Holding | undefined, request: AttemptRequest) =>
      local !== undefined &&
      local.owner === request.owner &&
      local.token !== undefined &&
      local.session !== undefined &&
      !local.expired;
    if (locals.some((local, i) => local !== undefined && !own(local, requests[i]!))) {
      return requests.map((request, i) =>
        locals[i] !== undefined && !own(locals[i], request)
          ? this.#notGranted(request, mark)
          : { granted: false },
      );
    }
    const asked = requests.filter((_, i) => locals[i] === undefined);
    const holdings = asked.map((request) => this.#claim(request));
    let session: AdvisorySession | undefined;
    let rows: AttemptRow[] = [];
    try {
      if (asked.length > 0) {
        ({ rows } = await this.#db.run('attempt', async () => {
          session = await this.#getSession();
          return serially(session, (client) =>
            client.query<AttemptRow>(prepared(this.#db.sql.advisoryAttempt, attemptArrays(asked))),
          );
        }));
        this.#sweeper.start();
      }
      const all = rows.length === asked.length && rows.every((r) => r.ok && r.token !== null);
      if (!all || (asked.length > 0 && session === undefined)) {
        for (const [j, request] of asked.entries()) this.#forget(request.key, holdings[j]!);
        let j = 0;
        return requests.map((request, i): AttemptResult => {
          if (locals[i] !== undefined) return { granted: false };
          const row = rows[j++];
          if (row?.ok === false) return this.#notGranted(request, mark);
          // A key in its lock-delay: refused like a held one, for the delay left.
          return row?.remaining_ms != null
            ? this.#notGranted(request, mark, row.remaining_ms)
            : { granted: false };
        });
      }
      let j = 0;
      return requests.map((request, i): Granted => {
        const local = locals[i];
        if (local !== undefined) {
          this.#armExpiry(request.key, local, request.ttlMs);
          return {
            granted: true,
            token: local.token!,
            ttlMs: request.ttlMs,
            lost: local.session!.lost.signal,
          };
        }
        const k = j++;
        return this.#confirm(request, holdings[k]!, BigInt(rows[k]!.token!), session!);
      });
    } catch (error) {
      await Promise.all(asked.map((request, j) => this.#giveBack(request.key, holdings[j]!)));
      throw error;
    }
  }

  /** Mark `request.key` as asked for by its owner: other owners of this backend keep off it. */
  #claim(request: AttemptRequest): Holding {
    const holding: Holding = {
      owner: request.owner,
      token: undefined,
      session: undefined,
      expiry: undefined,
      expired: false,
    };
    this.#held.set(request.key, holding);
    return holding;
  }

  /**
   * Record a lock the server granted on `session` as `request`'s, and start its TTL.
   * @throws BackendError when the connection was lost meanwhile (its locks are gone).
   */
  #confirm(
    request: AttemptRequest,
    holding: Holding,
    token: bigint,
    session: AdvisorySession,
  ): Granted {
    if (session.lost.signal.aborted) {
      this.#forget(request.key, holding);
      throw new BackendError(this.name, 'attempt', session.lost.signal.reason);
    }
    holding.token = token;
    holding.session = session;
    this.#armExpiry(request.key, holding, request.ttlMs);
    return { granted: true, token, ttlMs: request.ttlMs, lost: session.lost.signal };
  }

  /** After a failed attempt: unlock what the server may have granted, and forget the key. */
  async #giveBack(key: string, holding: Holding): Promise<void> {
    if (this.#held.get(key) !== holding) return;
    await this.#unlock(key, holding);
    this.#forget(key, holding);
  }

  /** Confirm with the server that this connection still holds the lock, and re-arm the TTL. */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const holding = this.#held.get(lease.key);
    const state = stateOf(holding, lease);
    if (state === 'not-owner') return { ok: false, reason: state };
    if (state === 'not-held') {
      const info = await this.inspect(lease.key);
      return { ok: false, reason: info.holder === null ? 'not-held' : 'not-owner' };
    }
    const session = holding!.session!;
    const [classId, objectId] = pgLocksIdOf(lease.key);
    const rows = await this.#onSession(session, 'renew', (client) =>
      client.query<{ held: boolean }>(
        prepared(this.#db.sql.advisoryRenew, [
          lease.key,
          lease.owner,
          lease.fencingToken.toString(),
          ttlMs,
          classId,
          objectId,
        ]),
      ),
    );
    if (rows === undefined) return { ok: false, reason: 'not-held' };
    if (rows[0]?.held !== true || this.#held.get(lease.key) !== holding || holding!.expired) {
      this.#forget(lease.key, holding!);
      return { ok: false, reason: 'not-held' };
    }
    this.#armExpiry(lease.key, holding!, ttlMs);
    return { ok: true, ttlMs };
  }

  /** Delete the holder row, unlock, NOTIFY: only for this owner and token. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const holding = this.#held.get(lease.key);
    const state = stateOf(holding, lease);
    if (state === 'not-owner') return 'not-owner';
    if (state === 'not-held') {
      const info = await this.inspect(lease.key);
      return info.holder === null ? 'not-held' : 'not-owner';
    }
    const session = holding!.session!;
    clearTimeout(holding!.expiry);
    const rows = await this.#onSession(session, 'release', (client) =>
      client.query<{ unlocked: boolean }>(
        prepared(this.#db.sql.advisoryRelease, [
          lease.key,
          lease.owner,
          lease.fencingToken.toString(),
          lockIdOf(lease.key).toString(),
          this.#db.sql.channel,
        ]),
      ),
    );
    this.#forget(lease.key, holding!);
    return rows?.[0]?.unlocked === true ? 'released' : 'not-held';
  }

  /** Give the lock back if this owner has it (granted or not yet confirmed). */
  async abandon(request: AttemptRequest): Promise<void> {
    const holding = this.#held.get(request.key);
    if (holding === undefined || holding.owner !== request.owner || holding.token === undefined) {
      return;
    }
    await this.#unlock(request.key, holding);
    this.#forget(request.key, holding);
  }

  /**
   * One page of held keys: one statement walking at most `pageSize` rows of the holders table's
   * key index from where the last page stopped, keeping those whose session holds the key's
   * advisory lock now (`pg_locks`), as `inspect` does (listing.ts, `advisoryList` in sql.ts).
   */
  list(request: ListRequest): Promise<ListPage> {
    return listAdvisoryPage(this.#db, request);
  }

  /** The holder whose connection really holds the lock (server view, any process). */
  async inspect(key: string): Promise<LockInfo> {
    const [classId, objectId] = pgLocksIdOf(key);
    const { rows } = await this.#db.run('inspect', () =>
      this.#db.query<{ owner: string; token: string; remaining_ms: string }>(
        this.#db.sql.advisoryInspect,
        [key, classId, objectId],
      ),
    );
    const row = rows[0];
    if (row === undefined) return { key, holder: null, lastFencingToken: 0n };
    const fencingToken = BigInt(row.token);
    return {
      key,
      holder: { owner: row.owner, fencingToken, ttlMs: Math.max(0, Number(row.remaining_ms)) },
      lastFencingToken: fencingToken,
    };
  }

  /** End the dedicated connection (the server drops its locks), the listener and the pool. */
  async close(): Promise<void> {
    await this.#sweeper.stop();
    for (const holding of this.#held.values()) clearTimeout(holding.expiry);
    this.#held.clear();
    const session = this.#session ?? (await this.#opening?.catch(() => undefined));
    this.#session = undefined;
    if (session !== undefined) {
      session.lost.abort(new BackendError(this.name, 'close', new Error('backend closed')));
      await session.client.end().catch(() => undefined);
    }
    await this.#db.close();
  }

  /**
   * Run a statement on the lock connection. When it fails because the connection is gone (the
   * server terminated it, the socket closed), the server has dropped its locks: every lease on
   * it is lost and the answer is undefined. Other failures (a timeout on a silent server) reject
   * with a BackendError, and the core keeps trying until the lease's TTL runs out.
   */
  async #onSession<R extends pg.QueryResultRow>(
    session: AdvisorySession,
    operation: string,
    statement: (client: pg.Client) => Promise<pg.QueryResult<R>>,
  ): Promise<R[] | undefined> {
    try {
      return (await this.#db.run(operation, () => serially(session, statement), false)).rows;
    } catch (error) {
      if (!isConnectionFailure((error as BackendError).cause) && !session.lost.signal.aborted) {
        throw error;
      }
      this.#sessionLost(session, (error as BackendError).cause);
      return undefined;
    }
  }

  /**
   * A refusal; with `delayLeftMs` (the server's answer for a key in its lock-delay, ms as text)
   * its `holderTtlMs`, so that the waiter attempts again when the delay ends (no notice comes
   * then).
   */
  #notGranted(request: AttemptRequest, mark: number, delayLeftMs?: string | null): NotGranted {
    const holder = delayLeftMs == null ? {} : { holderTtlMs: Math.max(0, Number(delayLeftMs)) };
    const listener = this.#db.listener;
    if (listener === undefined) return { granted: false, ...holder };
    const { key, owner } = request;
    return {
      granted: false,
      ...holder,
      waitForChange: (signal, maxMs) => listener.wait(key, owner, mark, signal, maxMs),
    };
  }

  /** (Re)start the TTL of a held lock: unless renewed in time, it is given back. */
  #armExpiry(key: string, holding: Holding, ttlMs: number): void {
    clearTimeout(holding.expiry);
    holding.expiry = setTimeout(() => {
      if (this.#held.get(key) !== holding) return;
      holding.expired = true;
      void this.#unlock(key, holding, true).then(() => this.#forget(key, holding));
    }, ttlMs);
    holding.expiry.unref();
  }

  /**
   * Best-effort unlock of `holding`'s lock; if the server cannot be told, drop the connection.
   * `expired`: the TTL ran out (no release), so the row keeps the grant's lock-delay from now on
   * (`advisoryExpire`); else (a withdrawal) the row goes with any delay.
   */
  async #unlock(key: string, holding: Holding, expired = false): Promise<void> {
    const session = holding.session ?? this.#session;
    if (session === undefined || session.lost.signal.aborted) return;
    try {
      await serially(session, (client) =>
        client.query(
          prepared(expired ? this.#db.sql.advisoryExpire : this.#db.sql.advisoryRelease, [
            key,
            holding.owner,
            (holding.token ?? -1n).toString(),
            lockIdOf(key).toString(),
            this.#db.sql.channel,
          ]),
        ),
      );
    } catch (error) {
      this.#sessionLost(session, error);
    }
  }

  #forget(key: string, holding: Holding): void {
    clearTimeout(holding.expiry);
    if (this.#held.get(key) === holding) this.#held.delete(key);
  }

  #getSession(): Promise<AdvisorySession> {
    if (this.#refused !== undefined) return Promise.reject(this.#refused);
    if (this.#session !== undefined) return Promise.resolve(this.#session);
    this.#opening ??= this.#db
      .connectDedicated()
      .then((client) => this.#checkOwnSession(client))
      .then((client) => {
        const session: AdvisorySession = {
          client,
          tail: Promise.resolve(),
          lost: new AbortController(),
        };
        client.on('error', (error) => this.#sessionLost(session, error));
        client.on('end', () =>
          this.#sessionLost(session, new Error('connection to the server ended')),
        );
        if (this.#db.closed) {
          void client.end().catch(() => undefined);
          throw new Error('backend is closed');
        }
        this.#session = session;
        return session;
      })
      .finally(() => {
        this.#opening = undefined;
      });
    return this.#opening;
  }

  /**
   * Refuse a lock connection that is no session of its own (a transaction-mode pooler between it
   * and the server, see session-check.ts), before any lock is taken on it: the connection is
   * ended and this backend's attempts fail from then on.
   */
  async #checkOwnSession(client: pg.Client): Promise<pg.Client> {
    let found: string | undefined;
    try {
      found = await findTransactionPooler(client, this.#db.pool, this.#commandTimeoutMs);
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    if (found === undefined) return client;
    await client.end().catch(() => undefined);
    this.#refused = new BackendError(
      this.name,
      'attempt',
      new Error(
        `advisory mode needs a server session of its own, but the lock connection goes through ` +
          `a transaction-mode pooler (${found}). Connect advisory mode to the server itself or ` +
          `through a session-mode pooler, or use lease mode behind this pooler ` +
          `(?mode=lease&pooler=transaction&listenUrl=<the server's own URL, percent-encoded>, ` +
          `or notifications=false instead of listenUrl). No lock was taken.`,
      ),
    );
    throw this.#refused;
  }

  /** The connection is gone and the server has dropped its locks: every lease on it is lost. */
  #sessionLost(session: AdvisorySession, cause: unknown): void {
    if (session.lost.signal.aborted) return;
    if (this.#session === session) this.#session = undefined;
    session.lost.abort(new BackendError(this.name, 'advisory-lock connection', cause));
    for (const [key, holding] of [...this.#held]) {
      if (holding.session === session) this.#forget(key, holding);
    }
    void session.client.end().catch(() => undefined);
  }
}

/** A row of `advisoryAttempt`'s answer (sql.ts). */
interface AttemptRow {
  readonly ok: boolean;
  readonly token: string | null;
  readonly remaining_ms: string | null;
}

/** `advisoryAttempt`'s parameters for `requests` (arrays of one length, sql.ts). */
function attemptArrays(requests: readonly AttemptRequest[]): unknown[] {
  return [
    requests.map((request) => request.key),
    requests.map((request) => request.owner),
    requests.map((request) => lockIdOf(request.key).toString()),
    requests.map((request) => request.ttlMs),
    requests.map((request) => request.lockDelayMs ?? null),
  ];
}

/** Queue `statement` behind the ones already sent on the session's connection. */
function serially<T>(session: AdvisorySession, statement: (client: pg.Client) => Promise<T>) {
  const run = session.tail.then(() => statement(session.client));
  session.tail = run.catch(() => undefined);
  return run;
}

/** Does `holding` belong to `lease`? */
function stateOf(holding: Holding | undefined, lease: LeaseRef): 'yes' | 'not-held' | 'not-owner' {
  if (
    holding === undefined ||
    holding.token === undefined ||
    holding.session === undefined ||
    holding.expired
  ) {
    return 'not-held';
  }
  return holding.owner === lease.owner && holding.token === lease.fencingToken
    ? 'yes'
    : 'not-owner';
}
