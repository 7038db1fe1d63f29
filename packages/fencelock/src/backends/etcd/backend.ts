/**
 * etcd backend (the `etcd3` package). The recipe of etcd's `concurrency` package (`Mutex`,
 * which waits for the deletion of older keys), with a fencing token, read-write modes and
 * per-acquisition owners:
 *
 * - Every contender puts `<namespace>/locks/<key>/<w|r>-<lease hex>-<owner>` bound to its
 *   session's lease, in one transaction that also lists the contenders under the key in
 *   create-revision order. The fencing token is the create revision of the contender's key.
 * - A writer holds the lock when no key is older than its own; a reader when no writer's key is.
 *   Otherwise it watches only its predecessor (the newest older key that blocks it) for
 *   deletion, so a release wakes one waiter (no herd), and asks again when that key is gone.
 *   The rule is `queueVerdict` (src/core/predecessor.ts), shared with the ZooKeeper backend.
 * - Release deletes the contender's key only if its create revision still equals the token.
 * - Renewal confirms that the key still has that create revision (the session's keepalive keeps
 *   the lease itself alive). The renewals of one turn are confirmed together, reading every key
 *   in one transaction: a process holding 10,000 leases sends a few dozen requests per renew
 *   interval, not 10,000.
 *
 * - Listing (`list`, listing.ts): a page is one Range over the folders of one part (locks, then
 *   semaphores) from the cursor to the end of the prefix's byte range, `pageSize × 4` keys at
 *   most, whole folders only; who holds is the rule above; the TTLs come from the leases.
 *
 * - Several locks at once (`attemptAll`, the first round of `acquireAll`): one transaction puts
 *   every contender key only while no line holds a key that would refuse it (no key in a writer's
 *   folder, no writer's key in a reader's), and otherwise reads every line and writes nothing.
 *   Keys that are no contenders, or a downgrade, then cost a second transaction, which commits
 *   only if no line was written since the first one read it (attempt-all.ts). The tokens are the
 *   transaction's revision.
 *
 * The owner id is part of the key (not only the lease id, as in etcd's `Mutex`), so two handles
 * in one process never share a lock by accident. Keys under the lock's folder that this backend
 * did not write (another shape, or bound to no lease) are ignored everywhere: see
 * contender-key.ts.
 *
 * Semaphores (`AttemptRequest.permits` = N) keep their own line, apart from the lock of the same
 * key: `<namespace>/semaphores/<key>/p-<lease hex>-<owner>`, bound to the session's lease, whose
 * value is N (permit-key.ts). Nothing else is stored: the keys go with their release or lease.
 * - Joining the line is a put conditional on the folder (permit-requests.ts): every key there
 *   holds N, or no key was created since a read that found no other count. So the contenders of
 *   a line always agree on N, and an attempt with another count gets `PermitsMismatchError`
 *   having written nothing. A single attempt (`tryAcquire`) puts its key only when fewer than N
 *   contenders are in line, so it never joins the line.
 * - A contender with fewer than N keys older than its own holds a permit; its fencing token is
 *   its key's create revision (permit-line.ts). Release, renewal and abandon are the lock's, on
 *   this folder.
 * - Waiting, without a herd: the first waiter (exactly N older keys, all holders) watches the
 *   folder (one watcher) for the deletion of one of its holders; that event is its grant
 *   (`Granted.handedAt`, no further request). Every later waiter watches its predecessor's key
 *   only, for its deletion or a write to it. A waiter that gets its permit announces it by
 *   touching its key (a put keeping value and lease: same create revision, same token), and the
 *   keys of the later contenders its read shows holding permits too; each touch wakes the one
 *   waiter behind that key, which asks again and finds a permit or that it is now first waiter.
 *   So a release wakes the waiter it lets in and the one that moves up to first, not everyone.
 *
 * Leader elections (`AttemptRequest.election`, election.ts) follow etcd's `concurrency.Election`
 * with this backend's contender keys: a candidate puts
 * `<namespace>/elections/<key>/c-<lease hex>-<owner>` (election-key.ts), bound to the session's
 * lease, whose value is the candidate's value; the election's line is apart from the lock and
 * the semaphore of the same key. The oldest candidate key leads, exactly as a writer's key holds
 * a lock (campaign, predecessor watch, renewal, resign and abandon are the lock's, on that
 * folder), and its create revision is the term: a cluster revision, which never goes back, so
 * terms grow also after the election was idle. `proclaim` puts a new value only while the key
 * has the term as its create revision (keeping its lease); `leader` reads the folder's oldest key
 * (one Range) and its lease's TTL; `watchElection` is one watch on the folder.
 *
 * Lock-delay (`AttemptRequest.lockDelayMs`, lock-delay.ts) of a write lock or a leadership: the
 * grant writes a marker `<dir>w-delay` (`<dir>c-delay`: no contender's name) holding its token, on a
 * second lease whose TTL is the holder's lease TTL + the delay + the holder's keepalive deadline
 * (whole seconds, rounded up), kept alive just before the holder's (a companion of the session,
 * or a lease of its own renewed with the holder's without the watchdog) and moved with the key. A release or an abandon of the live grant deletes it in the
 * same transaction (a nested one, guarded by its value); a grant that ends otherwise leaves it
 * until its lease expires, and meanwhile a contender its line would grant is answered "not
 * granted" (`holderTtlMs` the marker lease's TTL), keeps its place, and watches the marker's
 * deletion. `inspect`, `leader` and `list` show no holder for a lock or election in its delay.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Etcd3, type IKeyValue, type IRequestOp, type ITxnResponse, type PutBuilder } from 'etcd3';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  BackendSession,
  ElectedLeader,
  ElectionWatch,
  Granted,
  LeaseRef,
  ListPage,
  ListRequest,
  LockInfo,
  NotGranted,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { monotonicNow } from '../../core/clock.js';
import { queueVerdict } from '../../core/predecessor.js';
import { RenewalBatcher, type RenewalRequest } from '../../core/renewal-batch.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { BackendError, InvalidArgumentError, type Unreachable } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import { type UnreachableReason, unreachableAt } from '../unreachable.js';
import {
  attemptAllTxn,
  freeLineGuard,
  type LineAttempt,
  lineVerdicts,
  unchangedGuards,
} from './attempt-all.js';
import { type ContenderEntry, contenderKey, contenderOf, contendersOf } from './contender-key.js';
import { ElectionPrefixWatch, proclaimOp, readLeader, rebindCandidateOp } from './election.js';
import { candidateKey, candidatesOf } from './election-key.js';
import { KeepaliveRoute } from './keepalive-route.js';
import { prefixEnd } from './key-range.js';
import { type WatchTarget, type WatchTest, waitForWatchEvent } from './line-watch.js';
import { listPage, listStart } from './listing.js';
import {
  clearMarkerOp,
  DELAY_TTL_FLOOR_MS,
  delayInForce,
  markerKeyOf,
  markerReadOp,
  markerSeconds,
  putMarkerOp,
} from './lock-delay.js';
import { permitContenderKey, permitContendersOf, permitCountValue } from './permit-key.js';
import { grantsToAnnounce, hasSuccessor, permitVerdict } from './permit-line.js';
import { announceGrants, joinPermitLine } from './permit-requests.js';
import { EtcdSession } from './session.js';
import type { EtcdUrlConfig } from './url.js';

/**
 * How long a waiter trusts its watch before asking again, ms. The watch on the predecessor (or a
 * semaphore's folder) is reliable (etcd resumes it from the last revision after a reconnect); the
 * recheck only bounds the cost of a bug, an unexpected stream end, or a touch announcing a
 * permit that the engine did not answer.
 */
const RECHECK_AFTER_MS = 30_000;

/**
 * Deadline of each try of the unary requests made inside `run`, ms. The client's call options
 * read it (each try of a request, on another member after a timeout, gets a fresh deadline), so
 * a renewal fits several tries into its lease's TTL instead of one `dialTimeoutMs`.
 */
const tryDeadline = new AsyncLocalStorage<number>();

/** Per-try deadline of a renewal of a `ttlMs` lease: three tries fit in half the TTL. */
function renewTryMs(ttlMs: number, timeoutMs: number): number {
  return Math.min(timeoutMs, Math.max(500, ttlMs / 6));
}

/**
 * Most renewals confirmed in one transaction (one read per key): etcd refuses a transaction with
 * more operations than its `--max-txn-ops`, 128 by default.
 */
const RENEW_BATCH_LIMIT = 128;

/**
 * Most single attempts `attemptAll` makes in one transaction (one compare, one put and one read
 * per key): etcd's default `--max-txn-ops`. Above it, the core attempts key by key.
 */
const ATTEMPT_ALL_LIMIT = 128;

/**
 * Most transactions of one `attemptAll` whose reads found every key free: after the first (which
 * needs no read), each fails only because a line was written since the previous read.
 */
const ATTEMPT_ALL_TRIES = 4;

/**
 * etcd's refusals of a transaction beyond its limits (`--max-txn-ops`, `--max-request-bytes`, or
 * the gRPC message size derived from it), made before anything is applied.
 */
const TXN_TOO_LARGE = /too many operations|request is too large|larger than max/i;

/**
 * A line of contender keys: a lock's (`w-`/`r-` keys), a semaphore's (`p-` keys) or an
 * election's (`c-` keys).
 */
interface Line {
  /** The folder its contender keys are under. */
  readonly dir: string;
  /** A semaphore's line (keys read with their values, the permit counts), or a lock's. */
  readonly permits: boolean;
  /** An election's line (candidate keys, whose values are the candidates'). */
  readonly election?: boolean;
}

interface Contender {
  readonly key: string;
  /** The line the key is in. */
  readonly line: Line;
  /**
   * The value the key carries: the lock's mode, the semaphore's permit count, or the candidate's
   * value (its campaign's, then its last proclaim's).
   */
  value: string;
  /** The session whose lease carries the key now (a renewal may move the key to another). */
  session: EtcdSession;
  /** Aborted when the session carrying the key is lost: the grant's `lost` signal. */
  readonly lost: AbortController;
  /**
   * A permit contender was answered "not granted" at least once: a later waiter may be watching
   * its key, so its grant is announced by a touch of the key (see `#attemptPermit`).
   */
  waited: boolean;
  /** The lock-delay marker the contender's grant wrote (lock-delay.ts), while it holds. */
  delay?: DelayMarker;
}

/** A grant's lock-delay marker (lock-delay.ts) as this backend wrote it. */
interface DelayMarker {
  /** The grant's fencing token: the marker's value. */
  readonly token: bigint;
  /** The grant's lock-delay, ms. */
  readonly delayMs: number;
  /** The lease the marker is on. */
  readonly lease: EtcdSession;
  /**
   * The lease is the marker's own (the holder's lease is not kept alive): renewed before each
   * renewal of the holder's, revoked by a release; else a companion of the holder's session.
   */
  readonly own: boolean;
}

/** The etcd backend. Build it with `createEtcdBackend`. */
export class EtcdBackend implements Backend {
  readonly name = 'etcd';
  readonly maxTtlMs = MAX_TIMER_MS;
  /** Read-write locks; grants live in the locker's etcd lease; contender keys form the line. */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write', 'read'] as const),
    sessions: true,
    queue: true,
    batchRenew: true,
    permits: true,
    attemptAll: true,
    list: true,
    election: true,
    lockDelay: true,
  });
  readonly #client: Etcd3;
  readonly #ownsClient: boolean;
  readonly #namespace: string;
  readonly #timeoutMs: number;
  /** The members' addresses for errors (`host:port,…`). */
  readonly #address: string;
  /** Why the cluster was last found unreachable (for calls its circuit breaker stops). */
  #lastUnreachable: UnreachableReason | undefined;
  /** One session per lease TTL in whole seconds. */
  readonly #sessions = new Map<number, Promise<EtcdSession>>();
  /** Sessions opened for the user (`openSession`), until they end. */
  readonly #userSessions = new Set<EtcdSession>();
  /** Keys this backend wrote, by owner. */
  readonly #contenders = new Map<string, Contender>();
  readonly #renewals = new RenewalBatcher((batch) => this.#sendRenewals(batch), RENEW_BATCH_LIMIT);
  /** Requests this backend runs after answering (touches of permit keys), until they settle. */
  readonly #background = new Set<Promise<void>>();
  /** Election subscriptions (`watchElection`) not stopped yet; `close()` stops them. */
  readonly #electionWatches = new Set<ElectionWatch>();
  #closed = false;

  readonly #route: KeepaliveRoute;

  /**
   * @param route where session keepalives go (one client per member); defaults to `client`.
   */
  constructor(
    client: Etcd3,
    ownsClient: boolean,
    namespace: string,
    timeoutMs: number,
    route?: KeepaliveRoute,
    address = 'etcd',
  ) {
    this.#address = address;
    this.#route = route ?? new KeepaliveRoute([client], false);
    this.#client = client;
    this.#ownsClient = ownsClient;
    this.#namespace = namespace;
    this.#timeoutMs = timeoutMs;
  }

  /** The folder under which the contenders for the lock `key` are written. */
  dirOf(key: string): string {
    return `${this.#namespace}/locks/${encodeURIComponent(key)}/`;
  }

  /**
   * The folder under which the contenders for the semaphore `key` are written: apart from the
   * lock of the same key, so that the two never meet.
   */
  semaphoreDirOf(key: string): string {
    return `${this.#namespace}/semaphores/${encodeURIComponent(key)}/`;
  }

  /**
   * The folder under which the candidates of the election `key` are written: apart from the lock
   * and the semaphore of the same key.
   */
  electionDirOf(key: string): string {
    return `${this.#namespace}/elections/${encodeURIComponent(key)}/`;
  }

  /**
   * The line of `key`: an election's when `election` is set (a candidate's request or a
   * leadership), a semaphore's when `permits` is set (a permit's request or lease), else the
   * lock's.
   */
  #lineOf(key: string, permits: number | undefined, election = false): Line {
    if (election) return { dir: this.electionDirOf(key), permits: false, election: true };
    return permits === undefined
      ? { dir: this.dirOf(key), permits: false }
      : { dir: this.semaphoreDirOf(key), permits: true };
  }

  /**
   * The lock-delay marker key of `line` (lock-delay.ts): `<dir>w-delay`, or `<dir>c-delay` for
   * an election. Semaphores' lines have none (permits carry no delay).
   */
  #markerOf(line: Line): string {
    return markerKeyOf(line.dir, line.election === true);
  }

  /**
   * The session (etcd lease) grants for `ttlMs` live in: `ceil(ttlMs / 1000)` seconds, raised
   * by the server to its minimum TTL if lower. Opened on first use, shared by all such locks.
   */
  session(ttlMs: number): Promise<EtcdSession> {
    const seconds = ttlSeconds(ttlMs);
    const existing = this.#sessions.get(seconds);
    if (existing) return existing;
    const opening = EtcdSession.openShared(this.#client, this.#route, seconds, this.#timeoutMs);
    this.#sessions.set(seconds, opening);
    opening.then(
      (session) => {
        this.#watchSession(session);
        // A lost session is replaced by a new one on the next acquire.
        session.signal.addEventListener('abort', () => {
          if (this.#sessions.get(seconds) === opening) this.#sessions.delete(seconds);
        });
      },
      () => this.#sessions.delete(seconds),
    );
    return opening;
  }

  /**
   * A lease of `ttlMs` (rounded up to whole seconds) kept alive for the user until closed,
   * orphaned or lost; locks acquired in it put their keys under it.
   * @throws BackendError when the cluster does not answer.
   */
  async openSession(ttlMs: number): Promise<BackendSession> {
    this.#assertOpen('open session');
    const session = await EtcdSession.openShared(
      this.#client,
      this.#route,
      ttlSeconds(ttlMs),
      this.#timeoutMs,
    );
    if (this.#closed) {
      await session.revoke();
      this.#assertOpen('open session');
    }
    this.#watchSession(session);
    this.#userSessions.add(session);
    session.signal.addEventListener('abort', () => this.#userSessions.delete(session), {
      once: true,
    });
    return session;
  }

  /** Put this contender's key (if absent) and list the queue in one transaction; granted when nothing blocks it. */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    try {
      return await this.#attempt(request);
    } catch (error) {
      // The contender's lease was gone (revoked by hand, expired unnoticed): its session is now
      // lost, so queue again once on a fresh session instead of failing the acquire. A session
      // the user opened is not replaced: the acquire fails.
      if (!isLeaseNotFound(error) || request.session !== undefined) throw this.#outward(error);
      this.#forget(request.owner);
      return this.#attempt(request);
    }
  }

  /**
   * A session's failure (a `BackendError` of `session.ts`) in the one form of an unreachable
   * engine when it is one; other errors unchanged.
   */
  #outward(error: unknown): unknown {
    if (!(error instanceof BackendError) || error.unreachable !== undefined) return error;
    const unreachable = this.#unreachable(error.cause);
    return unreachable
      ? new BackendError(this.name, error.operation, error.cause, unreachable)
      : error;
  }

  /**
   * Whether `error` says the cluster is unreachable. etcd3's circuit breaker, open after
   * failures, fails calls at once without reaching a member: the reason last seen stands.
   */
  #unreachable(error: unknown): Unreachable | undefined {
    if (error instanceof Error && /circuit breaker is open/i.test(error.message)) {
      return {
        address: this.#address,
        ...(this.#lastUnreachable ?? { reason: 'connection-closed' }),
      };
    }
    const found = unreachableAt(this.#address, [error], this.#timeoutMs);
    if (found) this.#lastUnreachable = found;
    return found;
  }

  async #attempt(request: AttemptRequest): Promise<AttemptResult> {
    this.#assertOpen('acquire');
    if (request.permits !== undefined) return this.#attemptPermit(request, request.permits);
    const line = this.#lineOf(request.key, undefined, request.election !== undefined);
    // Every contender waits in line on a kept-alive session (the user's, or the shared one), so
    // that its place outlasts its ttlMs; a grant without the watchdog then moves to a lease of
    // its own.
    const contender = await this.#contenderFor(request, line, () => this.session(request.ttlMs));
    const { key, session: contenderSession } = contender;
    this.#contenders.set(request.owner, contender);
    const list = this.#listOp(line);
    const marker = markerReadOp(this.#markerOf(line));
    const txn = await this.#callOnLease(contenderSession, 'acquire', () =>
      this.#client
        .if(key, 'Create', '==', 0)
        .then(
          this.#client.put(key).value(contender.value).lease(contenderSession.leaseId),
          list,
          marker,
        )
        .else(list, marker)
        .commit(),
    );
    const entries = this.#lineEntriesOf(rangeOf(txn, txn.succeeded ? 1 : 0), line);
    const mine = entries.find((entry) => entry.key === key);
    if (mine === undefined) {
      // Our key vanished (its lease expired between two attempts): start again as a new contender.
      this.#forget(request.owner);
      throw new BackendError(this.name, 'acquire', new Error('contender key vanished'));
    }
    const token = mine.order;
    const verdict = queueVerdict(
      entries,
      { owner: request.owner, mode: request.mode, order: token },
      request.heldWriter,
    );
    if (verdict.outcome === 'downgrade-blocked') {
      await this.abandon(request);
      throw downgradeBlocked(request.key);
    }
    const revision = BigInt(txn.header.revision);
    if (verdict.outcome === 'granted') {
      const delay = rangeOf(txn, txn.succeeded ? 2 : 1)[0];
      if (delayInForce(delay, token)) return this.#delayed(delay!, revision, true);
      return this.#granted(request, contender, token);
    }
    return this.#behind(verdict.predecessor.key, revision);
  }

  /**
   * The answer to a contender its line grants while the lock-delay of an earlier grant is in
   * force (the marker `marker`, of another token): `holderTtlMs` the marker lease's remaining
   * TTL (whole seconds rounded down, at least `DELAY_TTL_FLOOR_MS`), and a wait on the marker's
   * deletion after `revision` (its lease expiring), after which it asks again. `queued`: whether
   * its key stays in line.
   * @throws BackendError when the cluster does not answer.
   */
  async #delayed(marker: IKeyValue, revision: bigint, queued: boolean): Promise<NotGranted> {
    const ttl = await this.#call('acquire', () =>
      this.#client.leaseClient.leaseTimeToLive({ ID: marker.lease }).catch((error: unknown) => {
        // An older server answers a lease that ended with an error instead of TTL -1.
        if (/lease not found/i.test(String(error))) return { TTL: '-1' };
        throw error;
      }),
    );
    return {
      ...this.#waiting({ key: marker.key.toString() }, revision, () => 'wake'),
      holderTtlMs: Math.max(DELAY_TTL_FLOOR_MS, Number(ttl.TTL) * 1000),
      queued,
    };
  }

  /**
   * The owner's contender in `line`: the one this backend knows while its session lives (a waiter
   * keeps its key, and so its place in line, across attempts), else a new one, not yet written,
   * on the user's session or else on `session()`.
   */
  async #contenderFor(
    request: AttemptRequest,
    line: Line,
    session: () => Promise<EtcdSession>,
  ): Promise<Contender> {
    const known = this.#contenders.get(request.owner);
    if (known?.session.alive === true) return known;
    const carrier = request.session ? this.#userSession(request.session) : await session();
    const { permits, election } = request;
    if (election !== undefined) {
      return {
        key: candidateKey(line.dir, carrier.leaseHex, request.owner),
        line,
        value: election.value,
        session: carrier,
        lost: new AbortController(),
        waited: false,
      };
    }
    return {
      key:
        permits === undefined
          ? contenderKey(line.dir, request.mode, carrier.leaseHex, request.owner)
          : permitContenderKey(line.dir, carrier.leaseHex, request.owner),
      line,
      value: permits === undefined ? request.mode : permitCountValue(permits),
      session: carrier,
      lost: new AbortController(),
      waited: false,
    };
  }

  /**
   * Single attempts at several locks in one etcd transaction, every key granted or none
   * (attempt-all.ts): every contender key is put only while no line holds a contender that would
   * refuse it, under the lease its single attempt would be granted on (the shared session's; with
   * `autoRenew: false` a lease of its own, granted just before); otherwise nothing is written and
   * the lines read in the same transaction answer. Keys under a folder that are no contenders,
   * and a downgrade (the caller's own write lock in line), cost a second transaction, guarded by
   * the first one's read. Nothing is queued.
   * @returns the answers in the order of `requests`; null above `ATTEMPT_ALL_LIMIT` requests, or
   *   when the server refuses so large a transaction (`--max-txn-ops`, `--max-request-bytes`;
   *   nothing was written): the core then attempts key by key.
   * @throws InvalidArgumentError (`downgradeBlocked`) for a downgrade another writer blocks,
   *   BackendError when the cluster does not answer (the core then abandons every request).
   */
  async attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    if (requests.length > ATTEMPT_ALL_LIMIT) return null;
    try {
      return await this.#attemptAll(requests);
    } catch (error) {
      // As `attempt`: a shared session whose lease is gone is replaced once.
      if (!isLeaseNotFound(error) || requests.some((request) => request.session !== undefined)) {
        throw this.#outward(error);
      }
      for (const request of requests) this.#forget(request.owner);
      return this.#attemptAll(requests);
    }
  }

  async #attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    this.#assertOpen('acquire');
    // Owners in line already (a repeated call) are answered from a read of their lines.
    const repeated = requests.some((r) => this.#contenders.get(r.owner)?.session.alive === true);
    const contenders = await this.#contendersFor(requests);
    const attempts: LineAttempt[] = contenders.map((contender, i) => ({
      dir: contender.line.dir,
      key: contender.key,
      value: contender.value,
      leaseId: contender.session.leaseId,
      owner: requests[i]!.owner,
      mode: requests[i]!.mode,
      heldWriter: requests[i]!.heldWriter,
      marker: this.#markerOf(contender.line),
    }));
    const sessions = [...new Set(contenders.map((contender) => contender.session))];
    let guards = repeated ? undefined : attempts.map(freeLineGuard);
    for (let tries = 1; ; tries++) {
      let txn: ITxnResponse;
      try {
        // The lines read with values: a lock-delay marker's is its grant's token.
        txn = await this.#callOnLeases(sessions, 'acquire', () =>
          this.#client.kv.txn(
            attemptAllTxn(attempts, guards, (a) => this.#listOp({ dir: a.dir, permits: true })),
          ),
        );
      } catch (error) {
        // More operations or bytes than this server takes in one transaction: nothing written.
        if (!TXN_TOO_LARGE.test(String((error as BackendError).cause))) throw error;
        for (const request of requests) this.#forget(request.owner);
        return null;
      }
      const revision = BigInt(txn.header.revision);
      if (guards !== undefined && txn.succeeded) {
        // A key put by an earlier sending of this transaction keeps that put's create revision.
        return Promise.all(
          contenders.map((contender, i) => {
            const previous = txn.responses[i]?.response_put?.prev_kv;
            const token = previous ? BigInt(previous.create_revision) : revision;
            return this.#granted(requests[i]!, contender, token);
          }),
        );
      }
      const lines = attempts.map((_, i) => rangeOf(txn, i));
      const verdict = lineVerdicts(attempts, lines, revision);
      // Lines that would grant, but a lock-delay is in force (a marker of another grant): refused.
      const markers = attempts.map((attempt, i) =>
        lines[i]!.find((kv) => kv.key.toString() === attempt.marker),
      );
      const delayed =
        verdict.outcome === 'granted' || verdict.outcome === 'free'
          ? markers.map((marker, i) =>
              delayInForce(
                marker,
                verdict.outcome === 'granted' ? verdict.tokens[i]! : revision + 1n,
              ),
            )
          : [];
      if (delayed.some(Boolean)) {
        await this.#withdrawAll(requests, contenders, verdict.outcome === 'granted');
        return Promise.all(
          attempts.map((_, i) =>
            delayed[i] ? this.#delayed(markers[i]!, revision, false) : { granted: false as const },
          ),
        );
      }
      if (verdict.outcome === 'granted') {
        const { tokens } = verdict;
        return Promise.all(
          contenders.map((contender, i) => this.#granted(requests[i]!, contender, tokens[i]!)),
        );
      }
      if (verdict.outcome === 'vanished' || (repeated && verdict.outcome === 'free')) {
        // Keys gone between two calls (a lease ended, a key deleted): as `attempt`, fail.
        for (const request of requests) this.#forget(request.owner);
        throw new BackendError(this.name, 'acquire', new Error('contender key vanished'));
      }
      if (verdict.outcome === 'free' && tries < ATTEMPT_ALL_TRIES) {
        guards = unchangedGuards(attempts, revision);
        continue;
      }
      const refused = verdict.outcome === 'refused' ? verdict : undefined;
      await this.#withdrawAll(requests, contenders, refused?.inLine === true);
      const blocked = refused?.verdicts.findIndex((v) => v.outcome === 'downgrade-blocked') ?? -1;
      if (blocked >= 0) throw downgradeBlocked(requests[blocked]!.key);
      // Not granted: each key answered as its single attempt would be, without a place in line.
      return attempts.map((_, i) => {
        const line = refused?.verdicts[i];
        return line?.outcome === 'wait'
          ? { ...this.#behind(line.predecessor.key, revision), queued: false }
          : { granted: false };
      });
    }
  }

  /**
   * The contenders of `requests` (`attemptAll`), known to this backend from now on: new ones on
   * the lease their grant would live on (see `attemptAll`). When one cannot be had, the leases
   * granted for the others are revoked.
   */
  async #contendersFor(requests: readonly AttemptRequest[]): Promise<Contender[]> {
    const settled = await Promise.allSettled(
      requests.map((request) =>
        this.#contenderFor(request, this.#lineOf(request.key, undefined), () =>
          request.autoRenew
            ? this.session(request.ttlMs)
            : this.#singleUse(ttlSeconds(request.ttlMs)),
        ),
      ),
    );
    const contenders: Contender[] = [];
    for (const [i, result] of settled.entries()) {
      if (result.status === 'rejected') {
        settled.forEach((other, j) => {
          const fresh = other.status === 'fulfilled' && !this.#contenders.has(requests[j]!.owner);
          if (fresh && !other.value.session.shared) void other.value.session.revoke();
        });
        throw result.reason;
      }
      contenders[i] = result.value;
    }
    for (const [i, contender] of contenders.entries()) {
      this.#contenders.set(requests[i]!.owner, contender);
    }
    return contenders;
  }

  /**
   * Forget the contenders of `requests`, revoking leases of their own; when their keys are `inLine`
   * (a repeated call refused), delete them first, in one transaction.
   */
  async #withdrawAll(
    requests: readonly AttemptRequest[],
    contenders: readonly Contender[],
    inLine: boolean,
  ): Promise<void> {
    if (inLine) {
      await this.#call('abandon', () =>
        this.#client.kv.txn({
          success: contenders.map((contender) => ({
            request_delete_range: { key: Buffer.from(contender.key) },
          })),
        }),
      );
    }
    for (const request of requests) this.#forget(request.owner);
  }

  /** The answer to a lock's contender that `predecessor` (a key in line before it) blocks. */
  #behind(predecessor: string, revision: bigint): NotGranted {
    return this.#waiting({ key: predecessor }, revision, (event) =>
      event === 'delete' ? 'wake' : undefined,
    );
  }

  /**
   * The answer to a granted attempt: on the contender's session, or (no watchdog on a shared
   * session) on a lease of its own.
   */
  async #granted(
    request: AttemptRequest,
    contender: Contender,
    token: bigint,
  ): Promise<AttemptResult> {
    const held =
      request.autoRenew || !contender.session.shared
        ? contender.session
        : await this.#moveToSingleUse(request, contender, token);
    if (request.lockDelayMs !== undefined && !contender.line.permits) {
      await this.#markDelay(request, contender, held, token, request.lockDelayMs);
    }
    return {
      granted: true,
      token,
      ttlMs: held.grantedTtlMs,
      lost: contender.lost.signal,
      validUntil: held.validUntil,
    };
  }

  /**
   * Write the lock-delay marker of the grant `token` (lock-delay.ts), unless it is written
   * already (a repeated attempt by the holder keeps its first delay): on a companion lease of
   * `held` when that is kept alive, else on a lease of its own granted now (after `held`), of TTL
   * `markerSeconds(held's TTL, delayMs)`; the put is guarded by the contender key's create
   * revision. A lease found gone is replaced once.
   * @throws BackendError when the cluster does not answer, or the contender key vanished.
   */
  async #markDelay(
    request: AttemptRequest,
    contender: Contender,
    held: EtcdSession,
    token: bigint,
    delayMs: number,
  ): Promise<void> {
    if (contender.delay?.token === token) return;
    const marker = this.#markerOf(contender.line);
    for (let tries = 1; ; tries++) {
      const { lease, own } = await this.#delayLease(held, delayMs);
      let txn: ITxnResponse;
      try {
        txn = await this.#callOnLease(lease, 'acquire', () =>
          this.#client
            .if(contender.key, 'Create', '==', String(token))
            .then(putMarkerOp(marker, token, lease.leaseId))
            .commit(),
        );
      } catch (error) {
        if (own) void lease.revoke();
        if (isLeaseNotFound(error) && tries < 2) continue;
        throw error;
      }
      if (!txn.succeeded) {
        if (own) void lease.revoke();
        this.#forget(request.owner);
        throw new BackendError(this.name, 'acquire', new Error('contender key vanished'));
      }
      contender.delay = { token, delayMs, lease, own };
      return;
    }
  }

  /**
   * The lease for the lock-delay marker of a grant held on `held`: its companion of
   * `markerSeconds` when `held` is kept alive (a shared or user session), else a lease of its own,
   * not kept alive.
   */
  async #delayLease(
    held: EtcdSession,
    delayMs: number,
  ): Promise<{ lease: EtcdSession; own: boolean }> {
    const seconds = markerSeconds(held.grantedTtlMs, delayMs, held.keepaliveDeadlineMs);
    if (held.shared) return { lease: await held.companion(seconds), own: false };
    const lease = await EtcdSession.openSingleUse(
      this.#client,
      this.#route,
      seconds,
      this.#timeoutMs,
    );
    return { lease, own: true };
  }

  /**
   * The answer to a queued contender: wait on `target` after `revision` until `test` says the
   * event may let it in (`wake`: it asks again), or that it did (`granted`: `hand` gives the grant
   * the wait resolves with, or undefined to ask again instead).
   */
  #waiting(
    target: WatchTarget,
    revision: bigint,
    test: WatchTest<'wake' | 'granted'>,
    hand?: () => Granted | undefined,
  ): NotGranted {
    return {
      granted: false,
      queued: true,
      recheckAfterMs: RECHECK_AFTER_MS,
      waitForChange: async (signal, maxMs) => {
        if (this.#closed) return undefined;
        const answer = await waitForWatchEvent(this.#client, target, revision, test, signal, maxMs);
        return answer === 'granted' ? hand?.() : undefined;
      },
    };
  }

  /**
   * A semaphore's permit: join the semaphore's line (`joinPermitLine`), then `permitVerdict`
   * says granted (fewer than `permits` keys older than the contender's), first waiter or later
   * waiter. What wakes whom:
   * - the first waiter (exactly `permits` older keys, all holders) watches the semaphore's folder
   *   and is granted by the deletion of one of those holders (a release, an expired lease, an
   *   abandon): its wait resolves with the grant (`#handOver`);
   * - a later waiter watches its predecessor's key only and wakes on its deletion, or on a write
   *   to it that announces the predecessor's grant, then asks again (and is granted, or is first
   *   waiter now);
   * - a contender granted after waiting announces its grant, and those of the later contenders
   *   its read shows holding permits too (several permits freed at once), by touching their keys
   *   (`grantsToAnnounce`), in the background.
   * @throws PermitsMismatchError when the line's contenders use another permit count (nothing
   *   is written).
   */
  async #attemptPermit(request: AttemptRequest, permits: number): Promise<AttemptResult> {
    const line = this.#lineOf(request.key, permits);
    const contender = await this.#contenderFor(request, line, () => this.session(request.ttlMs));
    const { session } = contender;
    const joined = await joinPermitLine(
      (txn) => this.#callOnLease(session, 'acquire', () => this.#client.kv.txn(txn)),
      {
        semaphore: request.key,
        folder: { key: Buffer.from(line.dir), rangeEnd: prefixEnd(Buffer.from(line.dir)) },
        list: this.#listOp(line),
        key: contender.key,
        permits,
        leaseId: session.leaseId,
        waits: request.willWait !== false,
      },
    );
    // A single attempt that found every permit held: nothing written, nothing to withdraw.
    if (joined === undefined) return { granted: false };
    this.#contenders.set(request.owner, contender);
    const { entries, mine, revision } = joined;
    const token = mine.order;
    const verdict = permitVerdict(entries, token, permits);
    if (verdict.outcome === 'granted') {
      // Moving the key to a lease of its own (no watchdog) is a write to it as well.
      const moves = !request.autoRenew && contender.session.shared;
      if (contender.waited) {
        this.#announce(
          grantsToAnnounce(entries, token, permits).filter(
            (entry) => !(moves && entry.key === contender.key),
          ),
        );
      }
      return this.#granted(request, contender, token);
    }
    contender.waited = true;
    if (verdict.outcome === 'later-waiter') {
      return this.#waiting({ key: verdict.predecessor.key }, revision, () => 'wake');
    }
    // The first waiter: the deletion of one of its holders grants it a permit (no key can come
    // ahead of it), so the event itself is the grant. Keys created since the read are behind it.
    const holders = new Set(verdict.holders.map((entry) => entry.key));
    const inLine = new Set(entries.map((entry) => entry.key));
    let successor = hasSuccessor(entries, token);
    return this.#waiting(
      { prefix: line.dir },
      revision,
      (event, key) => {
        if (event === 'put') {
          if (!inLine.has(key)) successor = true;
          return undefined;
        }
        // Its own key gone (its session lost): ask again, which queues it anew.
        if (key === contender.key) return 'wake';
        return holders.has(key) ? 'granted' : undefined;
      },
      () => this.#handOver(request, contender, token, successor),
    );
  }

  /**
   * The permit a first waiter's watch saw freed, as the grant its wait resolves with
   * (`Granted.handedAt`: the core confirms it with a renewal at once), touching its key in the
   * background when someone may wait behind it. Undefined (the waiter asks again) when the
   * contender is no longer this backend's on a live session, or its grant must first move to a
   * lease of its own (no watchdog).
   */
  #handOver(
    request: AttemptRequest,
    contender: Contender,
    token: bigint,
    successor: boolean,
  ): Granted | undefined {
    const { session } = contender;
    if (this.#closed || this.#contenders.get(request.owner) !== contender || !session.alive) {
      return undefined;
    }
    if (!request.autoRenew && session.shared) return undefined;
    if (successor) this.#announce([{ key: contender.key, order: token }]);
    return {
      granted: true,
      token,
      ttlMs: session.grantedTtlMs,
      lost: contender.lost.signal,
      validUntil: session.validUntil,
      handedAt: monotonicNow(),
    };
  }

  /** Keep `work` (which never rejects) for `close()` to wait on. */
  #inBackground(work: Promise<void>): void {
    this.#background.add(work);
    void work.finally(() => this.#background.delete(work));
  }

  /** Announce the grants of `holders` (`announceGrants`), in the background. */
  #announce(holders: readonly { key: string; order: bigint }[]): void {
    if (holders.length === 0) return;
    this.#inBackground(
      announceGrants((txn) => this.#call('touch', () => this.#client.kv.txn(txn)), holders),
    );
  }

  /**
   * Confirm on the engine that the owner's key still has the lease's create revision (so a
   * deleted key is noticed at the next renewal), moving it to a lease of the asked TTL when that
   * differs; a lease of its own (no watchdog) also gets one keepalive. A shared session is kept
   * alive in the background for all its keys, so a key that stays on it needs only that read:
   * the renewals of one turn make it together (`#sendRenewals`).
   */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    return this.#staysOnSession(lease.owner, ttlMs) !== undefined
      ? this.#renewals.renew(lease, ttlMs)
      : this.#renewOne(lease, ttlMs);
  }

  /**
   * The owner's contender when its key stays on a live kept-alive session at `ttlMs` (the
   * session's TTL, or a session the user opened), so that renewing it is only a read.
   */
  #staysOnSession(owner: string, ttlMs: number): Contender | undefined {
    const contender = this.#contenders.get(owner);
    if (contender === undefined) return undefined;
    const { session } = contender;
    if (!session.alive || !session.shared) return undefined;
    return ttlSeconds(ttlMs) === session.requestedSeconds || this.#userSessions.has(session)
      ? contender
      : undefined;
  }

  /**
   * Renewals asked for in one turn: the keys that stay on their session are read in one
   * transaction and confirmed when their create revision is still the lease's token; any other
   * (its key gone or rewritten, moved since it was asked for, or alone) takes the single path,
   * which also tells `not-held` from `not-owner`.
   * @throws BackendError when the cluster does not answer (every renewal of the batch fails).
   */
  async #sendRenewals(batch: readonly RenewalRequest[]): Promise<(RenewResult | Error)[]> {
    const staying = batch.map((r) => this.#staysOnSession(r.lease.owner, r.ttlMs));
    const keys = staying.flatMap((c) => (c === undefined ? [] : [c.key]));
    let revisions = new Map<string, bigint>();
    if (keys.length > 1) {
      const shortestTtlMs = Math.min(
        ...staying.flatMap((c) => (c === undefined ? [] : [c.session.grantedTtlMs])),
      );
      try {
        revisions = await this.#createRevisions(keys, shortestTtlMs);
      } catch (error) {
        // A server whose --max-txn-ops is below the batch: confirm these one by one.
        if (!/too many operations/i.test(String((error as BackendError).cause))) throw error;
      }
    }
    return Promise.all(
      batch.map(async (renewal, i): Promise<RenewResult | Error> => {
        const contender = staying[i];
        if (
          contender?.session.alive &&
          revisions.get(contender.key) === renewal.lease.fencingToken
        ) {
          const { session } = contender;
          return { ok: true, ttlMs: session.grantedTtlMs, validUntil: session.validUntil };
        }
        return this.#renewOne(renewal.lease, renewal.ttlMs).catch((error: unknown) =>
          error instanceof Error ? error : new Error(String(error)),
        );
      }),
    );
  }

  /** The create revision of each of `keys` that exists, read in one transaction. */
  async #createRevisions(keys: readonly string[], ttlMs: number): Promise<Map<string, bigint>> {
    const txn = await this.#call('renew', () =>
      this.#viaRoute(renewTryMs(ttlMs, this.#timeoutMs), (via) =>
        via.kv.txn({
          success: keys.map((key) => ({
            request_range: { key: Buffer.from(key), keys_only: true },
          })),
        }),
      ),
    );
    const revisions = new Map<string, bigint>();
    txn.responses.forEach((response) => {
      const kv = response.response_range?.kvs[0];
      if (kv !== undefined) revisions.set(kv.key.toString(), BigInt(kv.create_revision));
    });
    return revisions;
  }

  /**
   * Run `send` through the keepalive route's member (the one answering keepalives), then the
   * next one: a renewal fits two tries of `tryMs` into a third of the TTL instead of landing on
   * a frozen member.
   */
  async #viaRoute<T>(tryMs: number, send: (via: Etcd3) => Promise<T>): Promise<T> {
    for (let tries = 1; ; tries++) {
      const via = this.#route.client;
      try {
        return await tryDeadline.run(tryMs, () => send(via));
      } catch (error) {
        this.#route.failed(via);
        if (tries >= 2) throw error;
      }
    }
  }

  async #renewOne(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const contender = this.#contenders.get(lease.owner);
    // The contender's own line when known (a reference to a handed permit may lack `permits`).
    const line = contender?.line ?? this.#lineOf(lease.key, lease.permits, lease.election);
    if (contender === undefined || !contender.session.alive) {
      return {
        ok: false,
        reason: (await this.#anyContender(line)) ? 'not-owner' : 'not-held',
      };
    }
    const seconds = ttlSeconds(ttlMs);
    const current = contender.session;
    const target =
      seconds === current.requestedSeconds || this.#userSessions.has(current)
        ? current
        : current.shared
          ? await this.session(ttlMs)
          : await this.#singleUse(seconds);
    const bind =
      target === current ? this.#client.get(contender.key) : this.#rebindOp(contender, target);
    // A key moving to another lease takes its lock-delay marker to a lease that outlives it.
    const { delay } = contender;
    const moved =
      target !== current && delay !== undefined
        ? await this.#delayLease(target, delay.delayMs)
        : undefined;
    const ops: IRequestOp[] =
      moved === undefined
        ? []
        : [putMarkerOp(this.#markerOf(line), delay!.token, moved.lease.leaseId)];
    const txn = await this.#call('renew', () =>
      this.#viaRoute(renewTryMs(target.grantedTtlMs, this.#timeoutMs), (via) =>
        via
          .if(contender.key, 'Create', '==', String(lease.fencingToken))
          .then(bind, ...ops)
          .else(this.#listOp(line))
          .commit(),
      ),
    );
    if (!txn.succeeded) {
      if (moved?.own === true) void moved.lease.revoke();
      if (target !== current && !target.shared) void target.revoke();
      const entries = this.#entriesOf(rangeOf(txn, 0), line);
      // Our key gone: forget it. Our key there with another revision (a wrong token): not ours.
      if (!entries.some((entry) => entry.key === contender.key)) this.#forget(lease.owner);
      return { ok: false, reason: entries.length > 0 ? 'not-owner' : 'not-held' };
    }
    if (target !== current) {
      contender.session = target;
      if (!current.shared) void current.revoke();
      if (moved !== undefined) {
        if (delay!.own) void delay!.lease.revoke();
        contender.delay = { ...delay!, lease: moved.lease, own: moved.own };
      }
    } else if (!current.shared) {
      // The marker's lease first: it must not end before the delay after the holder's does.
      if (delay?.own === true) await this.#call('renew', () => delay.lease.renewOnce());
      if (!(await current.renewOnce())) return { ok: false, reason: 'not-held' };
    }
    return { ok: true, ttlMs: target.grantedTtlMs, validUntil: target.validUntil };
  }

  /** Delete the owner's key only if its create revision equals the token; `not-owner` when others remain. */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const line =
      this.#contenders.get(lease.owner)?.line ??
      this.#lineOf(lease.key, lease.permits, lease.election);
    const key = await this.#keyOf(lease.owner, line);
    if (key === undefined) {
      this.#forget(lease.owner);
      return (await this.#anyContender(line)) ? 'not-owner' : 'not-held';
    }
    if (this.#ranOut(lease.owner, key)) return this.#releaseLate(lease, key, line);
    const txn = await this.#call('release', () =>
      this.#client
        .if(key, 'Create', '==', String(lease.fencingToken))
        .then(this.#client.delete().key(key), ...this.#clearDelayOps(line, lease.fencingToken))
        .else(this.#listOp(line))
        .commit(),
    );
    // Forget (and so revoke a lease of its own) only once the key is gone: a revoke landing
    // first would delete the key and turn 'released' into 'not-held'; a refused release (a wrong
    // token) must not cost the real holder its key. A release of a grant already gone leaves its
    // lock-delay marker alone.
    if (txn.succeeded) {
      this.#forgetReleased(lease.owner);
      return 'released';
    }
    const entries = this.#entriesOf(rangeOf(txn, 0), line);
    if (!entries.some((entry) => entry.key === key)) this.#forget(lease.owner);
    return entries.length > 0 ? 'not-owner' : 'not-held';
  }

  /**
   * Delete this contender's key (waiting or granted), whatever its revision. A live grant's
   * lock-delay marker goes with it (its create revision read first when this backend does not
   * know the contender): a withdrawn grant is released, not lost.
   */
  async abandon(request: AttemptRequest): Promise<void> {
    const line = this.#lineOf(request.key, request.permits, request.election !== undefined);
    const known = this.#contenders.get(request.owner);
    const key = await this.#keyOf(request.owner, line);
    if (key === undefined) {
      this.#forget(request.owner);
      return;
    }
    try {
      // A grant whose time ran out here is not live: its abandon leaves the delay in force.
      const live = known?.key === key && !this.#ranOut(request.owner, key);
      let token = live ? known.delay?.token : undefined;
      if (known?.key !== key && !line.permits) {
        const read = await this.#call('abandon', () =>
          this.#client.kv.range({ key: Buffer.from(key) }),
        );
        const kv = read.kvs[0];
        token = kv === undefined ? undefined : BigInt(kv.create_revision);
      }
      if (token === undefined) {
        await this.#call('abandon', () => this.#client.delete().key(key).exec());
        return;
      }
      const txn = await this.#call('abandon', () =>
        this.#client
          .if(key, 'Create', '==', String(token))
          .then(this.#client.delete().key(key), ...this.#clearDelayOps(line, token))
          .else(this.#client.delete().key(key))
          .commit(),
      );
      if (txn.succeeded) this.#forgetReleased(request.owner);
    } finally {
      this.#forget(request.owner);
    }
  }

  /**
   * Whether the grant of `owner` (its key `key`) carries a lock-delay and its time ran out here:
   * its session is lost, or its validity (counted from before the server's grant or last
   * keepalive of its lease) has passed, though etcd may not have expired the lease yet (its
   * expiry tick is 500 ms).
   */
  #ranOut(owner: string, key: string): boolean {
    const contender = this.#contenders.get(owner);
    return contender?.key === key && delayRanOut(contender);
  }

  /**
   * A release after the grant's time ran out (`#ranOut`): a late release, which deletes the key
   * if it is still there but leaves the lock-delay marker in force.
   * @returns `not-owner` when other contenders are in line, else `not-held`.
   */
  async #releaseLate(lease: LeaseRef, key: string, line: Line): Promise<ReleaseOutcome> {
    const txn = await this.#call('release', () =>
      this.#client
        .if(key, 'Create', '==', String(lease.fencingToken))
        .then(this.#client.delete().key(key), this.#listOp(line))
        .else(this.#listOp(line))
        .commit(),
    );
    this.#forget(lease.owner);
    const entries = this.#entriesOf(rangeOf(txn, txn.succeeded ? 1 : 0), line);
    return entries.some((entry) => entry.key !== key) ? 'not-owner' : 'not-held';
  }

  /** The deletion of `line`'s lock-delay marker while it records `token` (none for permits). */
  #clearDelayOps(line: Line, token: bigint): IRequestOp[] {
    return line.permits ? [] : [clearMarkerOp(this.#markerOf(line), token)];
  }

  /**
   * `#forget` after a release (or abandon) deleted the owner's live grant and its lock-delay
   * marker: the marker's own lease, if any, is revoked too.
   */
  #forgetReleased(owner: string): void {
    const delay = this.#contenders.get(owner)?.delay;
    this.#forget(owner);
    if (delay?.own === true) void delay.lease.revoke();
  }

  /** Oldest contender (owner, revision token, lease TTL) and the newest contender's revision. */
  async inspect(key: string): Promise<LockInfo> {
    const line = this.#lineOf(key, undefined);
    const { dir } = line;
    const read = await this.#call('inspect', () =>
      this.#client.kv.txn({ success: [this.#listOp(line), markerReadOp(this.#markerOf(line))] }),
    );
    const kvs = rangeOf(read, 0).filter((kv) => contenderOf(kv, dir) !== undefined);
    const first = kvs[0];
    const lastFencingToken = kvs.reduce(
      (max, kv) => (BigInt(kv.create_revision) > max ? BigInt(kv.create_revision) : max),
      0n,
    );
    if (first === undefined) return { key, holder: null, lastFencingToken };
    // A lock-delay in force (lock-delay.ts): the first contender waits for it, nobody holds.
    if (delayInForce(rangeOf(read, 1)[0], BigInt(first.create_revision))) {
      return { key, holder: null, lastFencingToken };
    }
    const ttl = await this.#call('inspect', () =>
      this.#client.leaseClient.leaseTimeToLive({ ID: first.lease }),
    );
    return {
      key,
      holder: {
        owner: contenderOf(first, dir)!.owner,
        fencingToken: BigInt(first.create_revision),
        ttlMs: Math.max(0, Number(ttl.TTL) * 1000),
      },
      lastFencingToken,
    };
  }

  /**
   * One page of the held locks, read locks and semaphores under `request.prefix` (listing.ts):
   * one Range of at most `pageSize × 4` keys over the part's folders from the cursor on (a
   * snapshot of every key of the page), a Range or two more only for a folder longer than that,
   * then one `LeaseTimeToLive` per distinct lease of the page's holders.
   * @throws InvalidArgumentError (`cursor`) before any engine call for a cursor this backend did
   *   not make for this prefix; BackendError when the cluster does not answer.
   */
  async list(request: ListRequest): Promise<ListPage> {
    const start = listStart(request);
    return listPage(
      {
        client: this.#client,
        namespace: this.#namespace,
        call: (run) => this.#call('list', run),
      },
      request,
      start,
    );
  }

  /**
   * The compare that makes a caller's own etcd transaction commit only while `lease` holds its
   * lock (etcd's `Mutex.IsOwner()`): the owner's key still has the lease's create revision.
   * @returns `{ key, createRevision }` for `client.if(key, 'Create', '==', createRevision)`.
   * Undefined when this backend has no key for the lease (released, or granted elsewhere).
   */
  ownerCompare(lease: LeaseRef): { key: string; createRevision: string } | undefined {
    const contender = this.#contenders.get(lease.owner);
    if (contender === undefined) return undefined;
    return { key: contender.key, createRevision: String(lease.fencingToken) };
  }

  /**
   * Replace the value of a held leadership (etcd's `Election.Proclaim`): one transaction puts
   * `value` into the leader's candidate key only if the key's create revision is still the term
   * (`lease.fencingToken`), keeping the lease the key is on; otherwise it reads the election's
   * folder, to answer as `renew` would. The put is an event of the election's watches.
   * @returns `proclaimed`; `not-owner` when other candidates are in the folder and this owner's
   *   key is gone or has another create revision; `not-held` when the folder is empty.
   * @throws BackendError when the cluster does not answer.
   */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    const line = this.#lineOf(lease.key, undefined, true);
    const key = await this.#keyOf(lease.owner, line);
    if (key === undefined) {
      return (await this.#anyContender(line)) ? 'not-owner' : 'not-held';
    }
    const txn = await this.#call('proclaim', () =>
      this.#client
        .if(key, 'Create', '==', String(lease.fencingToken))
        .then(proclaimOp(key, value))
        .else(this.#listOp(line))
        .commit(),
    );
    if (txn.succeeded) {
      const contender = this.#contenders.get(lease.owner);
      if (contender?.key === key) contender.value = value;
      return 'proclaimed';
    }
    const entries = this.#entriesOf(rangeOf(txn, 0), line);
    if (!entries.some((entry) => entry.key === key)) this.#forget(lease.owner);
    return entries.length > 0 ? 'not-owner' : 'not-held';
  }

  /**
   * The leader of the election `key` (etcd's `Election.Leader`, election.ts's `readLeader`): the
   * oldest candidate key of the election's folder, its owner, term (create revision) and value
   * read in one Range; then, at that revision, the lock-delay marker and the candidate keys
   * counted (two Ranges at once); then its lease's remaining TTL (`LeaseTimeToLive`, whole
   * seconds): three round trips. Candidates behind the oldest key are waiting, not leading; a key
   * whose lease ended is gone with it.
   * @throws BackendError when the cluster does not answer.
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    const line = this.#lineOf(key, undefined, true);
    return readLeader(this.#client, line.dir, this.#markerOf(line), (run) =>
      this.#call('leader', run),
    );
  }

  /**
   * Subscribe to the election `key` (election.ts's `ElectionPrefixWatch`): one etcd watch on the
   * election's folder, armed (created by etcd at its current revision) when this resolves; every
   * put and delete under the folder calls `onChange`: a candidate joining, a proclaim, a resign
   * or withdrawal, the end of the lease carrying a key (session revoked or expired, a grant
   * without the watchdog running out). `recheckAfterMs` is 30 s: the watch is reliable. Stopped
   * by `close()` too.
   * @throws BackendError when etcd refuses the watch or does not create it within the backend's
   *   timeout.
   */
  async watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    const watch = await this.#call('watch election', () =>
      ElectionPrefixWatch.arm(
        this.#client,
        this.electionDirOf(key),
        onChange,
        this.#timeoutMs,
        (w) => this.#electionWatches.delete(w),
      ),
    );
    if (this.#closed) {
      watch.stop();
      this.#assertOpen('watch election');
    }
    this.#electionWatches.add(watch);
    return watch;
  }

  /**
   * Stop every election watch, revoke every session this backend opened (etcd deletes their
   * keys), then close an owned client.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const watch of [...this.#electionWatches]) watch.stop();
    await Promise.allSettled(this.#background);
    const sessions = await Promise.allSettled(this.#sessions.values());
    this.#sessions.clear();
    await Promise.allSettled([...this.#userSessions].map((session) => session.revoke()));
    const singleUse = [...this.#contenders.values()].filter((c) => !c.session.shared);
    // The lock-delays of live grants on leases of their own end with them, as a release's would
    // (those of a kept-alive session go with its companion leases; a grant that ran out keeps its).
    const delays = singleUse.flatMap((c) =>
      c.delay?.own === true && !delayRanOut(c) ? [c.delay.lease] : [],
    );
    this.#contenders.clear();
    await Promise.allSettled(singleUse.map((c) => c.session.revoke()));
    await Promise.allSettled(delays.map((lease) => lease.revoke()));
    await Promise.allSettled(
      sessions.map((s) => (s.status === 'fulfilled' ? s.value.revoke() : undefined)),
    );
    this.#route.close();
    if (this.#ownsClient) this.#client.close();
  }

  /**
   * Without the watchdog a grant must end `ttlMs` after the grant, however long it waited in
   * line: put the granted key (same create revision, so the same token) onto a lease of its own
   * that nobody keeps alive, granted now.
   */
  async #moveToSingleUse(
    request: AttemptRequest,
    contender: Contender,
    token: bigint,
  ): Promise<EtcdSession> {
    const single = await this.#singleUse(ttlSeconds(request.ttlMs));
    let moved: ITxnResponse;
    try {
      moved = await this.#call('acquire', () =>
        this.#client
          .if(contender.key, 'Create', '==', String(token))
          .then(this.#rebindOp(contender, single))
          .commit(),
      );
    } catch (error) {
      void single.revoke();
      throw error;
    }
    if (!moved.succeeded) {
      void single.revoke();
      this.#forget(request.owner);
      throw new BackendError(this.name, 'acquire', new Error('contender key vanished'));
    }
    contender.session = single;
    return single;
  }

  /** The live user session behind `session`. */
  #userSession(session: BackendSession): EtcdSession {
    if (session instanceof EtcdSession && this.#userSessions.has(session)) return session;
    if (session.signal.aborted) {
      throw new BackendError(this.name, 'acquire', new Error(`session ${session.id} ended`));
    }
    throw new InvalidArgumentError('session', 'a session of this etcd store', session.id);
  }

  /** A lease of its own for one lock, not kept alive. */
  async #singleUse(seconds: number): Promise<EtcdSession> {
    const session = await EtcdSession.openSingleUse(
      this.#client,
      this.#route,
      seconds,
      this.#timeoutMs,
    );
    this.#watchSession(session);
    return session;
  }

  /** When `session` is lost, so are the grants whose keys it carries. */
  #watchSession(session: EtcdSession): void {
    session.signal.addEventListener(
      'abort',
      () => {
        for (const contender of this.#contenders.values()) {
          if (contender.session === session) contender.lost.abort(session.signal.reason);
        }
      },
      { once: true },
    );
  }

  /**
   * The put that moves `contender`'s key to `session`'s lease, for a transaction guarded by its
   * create revision: a candidate's keeps its value as it is on the engine (a proclaim may have
   * replaced it), a lock's or a permit's writes the value it always has.
   */
  #rebindOp(contender: Contender, session: EtcdSession): IRequestOp | PutBuilder {
    return contender.line.election === true
      ? rebindCandidateOp(contender.key, session.leaseId)
      : this.#client.put(contender.key).value(contender.value).lease(session.leaseId);
  }

  /** The lock's or the election's contenders among `kvs` (keys under `line`'s folder). */
  #lineEntriesOf(kvs: readonly IKeyValue[], line: Line): ContenderEntry[] {
    return line.election === true ? candidatesOf(kvs, line.dir) : contendersOf(kvs, line.dir);
  }

  /** Whether any contender key is in `line`. */
  async #anyContender(line: Line): Promise<boolean> {
    const kvs = await this.#list('lookup', line);
    return this.#entriesOf(kvs, line).length > 0;
  }

  /** The contenders among `kvs` (keys under `line`'s folder): keys, owners, create revisions. */
  #entriesOf(kvs: readonly IKeyValue[], line: Line): readonly { key: string; owner: string }[] {
    return line.permits ? permitContendersOf(kvs, line.dir) : this.#lineEntriesOf(kvs, line);
  }

  /**
   * The keys under `line`'s folder (names, create revisions and leases; values for a semaphore,
   * its permit counts), oldest first.
   */
  async #list(operation: string, line: Line): Promise<IKeyValue[]> {
    const { request_range: range } = this.#listOp(line);
    const response = await this.#call(operation, () => this.#client.kv.range(range!));
    return response.kvs;
  }

  /** Drop what this backend knows of `owner`, revoking a single-use lease (in the background). */
  #forget(owner: string): void {
    const contender = this.#contenders.get(owner);
    this.#contenders.delete(owner);
    if (contender !== undefined && !contender.session.shared) void contender.session.revoke();
  }

  /** The contender key of `owner` in `line`: known locally, or found by its owner id. */
  async #keyOf(owner: string, line: Line): Promise<string | undefined> {
    const known = this.#contenders.get(owner)?.key;
    if (known !== undefined) return known;
    const kvs = await this.#list('lookup', line);
    return this.#entriesOf(kvs, line).find((entry) => entry.owner === owner)?.key;
  }

  /** The range read of `line`'s folder, oldest first (keys only for a lock). */
  #listOp(line: Line): IRequestOp {
    return {
      request_range: {
        key: Buffer.from(line.dir),
        range_end: prefixEnd(Buffer.from(line.dir)),
        sort_order: 'Ascend',
        sort_target: 'Create',
        keys_only: !line.permits,
      },
    };
  }

  #assertOpen(operation: string): void {
    if (this.#closed) throw new BackendError(this.name, operation, new Error('backend is closed'));
  }

  /**
   * Like `#call`, for a request that writes under `session`'s lease: when etcd says the lease is
   * gone (revoked by hand, expired unnoticed), the session is lost at once and the caller's
   * attempt fails with BackendError; the next attempt starts on a new session.
   */
  #callOnLease<T>(session: EtcdSession, operation: string, run: () => Promise<T>): Promise<T> {
    return this.#callOnLeases([session], operation, run);
  }

  /**
   * `#callOnLease` for a request that writes under several leases: etcd does not say which one
   * is gone, so each is lost (`attemptAll` writes under one shared session, or leases of their
   * own granted for it).
   */
  async #callOnLeases<T>(
    sessions: readonly EtcdSession[],
    operation: string,
    run: () => Promise<T>,
  ): Promise<T> {
    try {
      return await this.#call(operation, run);
    } catch (error) {
      if (isLeaseNotFound(error)) for (const session of sessions) session.lose(error);
      throw error;
    }
  }

  async #call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    this.#assertOpen(operation);
    try {
      return await run();
    } catch (error) {
      throw new BackendError(this.name, operation, error, this.#unreachable(error));
    }
  }
}

/**
 * Whether `contender`'s grant carries a lock-delay and its time ran out here: its session is
 * lost, or its validity has passed (etcd may not have expired the lease yet).
 */
function delayRanOut(contender: Contender): boolean {
  if (contender.delay === undefined) return false;
  const { session } = contender;
  return !session.alive || monotonicNow() >= session.validUntil;
}

/** Lease TTL for `ttlMs`: whole seconds, rounded up (the server raises it to its minimum). */
function ttlSeconds(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

function rangeOf(txn: ITxnResponse, index: number): IKeyValue[] {
  return txn.responses[index]?.response_range?.kvs ?? [];
}

function isLeaseNotFound(error: unknown): boolean {
  return error instanceof BackendError && /lease not found/i.test(String(error.cause));
}

/** Create an etcd backend from a checked URL config. No connection is made until first use. */
export function createEtcdBackendFromConfig(config: EtcdUrlConfig): EtcdBackend {
  const clientFor = (hosts: readonly string[]) =>
    new Etcd3({
      hosts: [...hosts],
      dialTimeout: config.dialTimeoutMs,
      // A unary request never waits forever on a member that stopped answering; watch streams
      // are long-lived and get gRPC keepalive pings to notice a dead member instead (session
      // keepalives are short streams with deadlines of their own, see session.ts).
      defaultCallOptions: (context) =>
        context.isStream
          ? {}
          : { deadline: Date.now() + (tryDeadline.getStore() ?? config.dialTimeoutMs) },
      // Not below 5 s: etcd's default --grpc-keepalive-min-time, under which it answers pings
      // with GOAWAY (too many pings) and drops the connection.
      grpcOptions: { 'grpc.keepalive_time_ms': 5_000, 'grpc.keepalive_timeout_ms': 2_000 },
      ...(config.auth
        ? { auth: { username: config.auth.username, password: config.auth.password } }
        : {}),
    });
  // Session keepalives go to one member at a time, through a client of that member alone.
  const route = new KeepaliveRoute(
    config.endpoints.map((endpoint) => clientFor([endpoint])),
    true,
  );
  return new EtcdBackend(
    clientFor(config.endpoints),
    true,
    config.namespace,
    config.dialTimeoutMs,
    route,
    config.endpoints.map((endpoint) => new URL(endpoint).host).join(','),
  );
}
