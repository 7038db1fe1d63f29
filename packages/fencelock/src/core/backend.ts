/**
 * The backend contract: the only thing an engine adapter implements. The core owns the wait
 * loop, deadlines, retries, renewal, reentrancy and events; a backend answers single questions
 * atomically on its engine.
 *
 * The shape follows Apache Curator's lock driver (`LockInternalsDriver` / `PredicateResults`):
 * an attempt is answered with either "granted, with this fencing token" or "not yet, and here is
 * what to wait on", so queue-based engines (etcd, ZooKeeper) can keep a waiter's place in line
 * while key-value engines (Redis, SQLite) simply report how long the current holder may still
 * hold the key.
 */

/**
 * Lock mode: `write` is exclusive (the default, and the only mode of a plain lock); `read` is
 * shared with other readers and waits only for earlier writers (Curator's read-write lock).
 */
export type LockMode = 'write' | 'read';

/** One contender's request for a key. All durations are milliseconds. */
export interface AttemptRequest {
  /** Validated lock key. */
  readonly key: string;
  /** Unique id of this contender (one per acquisition), >= 128 random bits, hex. */
  readonly owner: string;
  /** Requested lease length in whole milliseconds, >= 1 and <= the backend's `maxTtlMs`. */
  readonly ttlMs: number;
  /** Mode; always one of the backend's `capabilities.modes`. */
  readonly mode: LockMode;
  /**
   * Whether the core's watchdog will renew this lease. When false the grant must end `ttlMs`
   * after it unless `renew` is called: a session-based engine gives such a grant a lease of its
   * own that is not kept alive, instead of its shared session.
   */
  readonly autoRenew: boolean;
  /**
   * Whether the contender waits when not granted (`acquire`), or makes one attempt only
   * (`tryAcquire`). An engine with a waiting line may queue a waiting contender (Redis keeps a
   * FIFO of waiters per key) and must not queue a single attempt. Absent: treat as waiting.
   */
  readonly willWait?: boolean;
  /**
   * A session the user opened with this backend's `openSession`: the grant must live in it (and
   * `autoRenew` is then true). Absent: the backend picks its own session, if it has any.
   */
  readonly session?: BackendSession;
  /**
   * A `read` request made while the same caller holds the write lock of the key (a downgrade):
   * the owner of that write lock, whose entry must not block this reader.
   */
  readonly heldWriter?: string;
  /**
   * A semaphore's permit count (`locker.semaphore`): the request is for one of at most `permits`
   * concurrent grants of `key`, each with its own owner and fencing token, granted in arrival
   * order. Absent for a lock. Only sent to a backend with `capabilities.permits` (an integer from
   * 1 to `MAX_PERMITS`; `mode` is then `write` and `heldWriter` absent). A semaphore is a
   * different object on the engine from a lock of the same key. A backend that finds holders or
   * waiters of `key` using another count rejects with `PermitsMismatchError`, granting nothing.
   */
  readonly permits?: number;
  /**
   * A candidate of a leader election (`locker.election`): the request is for the election object
   * of `key`, a different object on the engine from the lock and the semaphore of the same key,
   * granted as an exclusive lock is (in arrival order where the engine keeps a line; the grant's
   * fencing token is the leader's term). The engine stores `election.value` with the grant (with
   * the line entry where the entry is the grant to be, as etcd's election does) and drops it with
   * the grant. Only sent to a backend with `capabilities.election` (`mode` is then `write`,
   * `permits` and `heldWriter` absent).
   */
  readonly election?: ElectionCandidacy;
  /**
   * Lock-delay of the grant, ms (1 to `MAX_LOCK_DELAY_MS`; absent: none), for an exclusive grant
   * only (`mode` write, no `permits`). The engine records it with the grant (and keeps it with
   * the grant through renewals and repeated attempts by the holder): when the grant ends without
   * a release — its TTL runs out, its session ends, or it is taken away — the engine grants the
   * key (the same object: lock or election) to nobody until `lockDelayMs` after that end, also to
   * contenders that pass no lock-delay of their own; an attempt meanwhile answers `held` with
   * `holderTtlMs` no longer than the delay left. A release (or `abandon`) that deletes the live
   * grant clears it; a release that finds the grant already gone does not. Chubby's lock-delay
   * (Burrows, OSDI 2006, section 2.4), Consul's session `LockDelay`. Only sent to a backend with
   * `capabilities.lockDelay`.
   */
  readonly lockDelayMs?: number;
}

/** What a candidate publishes while it leads: its value (see `AttemptRequest.election`). */
export interface ElectionCandidacy {
  /** A well-formed string without U+0000 of at most `MAX_ELECTION_VALUE_BYTES` UTF-8 bytes. */
  readonly value: string;
}

/**
 * An engine session opened for the user (an etcd lease, a ZooKeeper session): kept alive in the
 * background until closed, orphaned or lost. Grants made in it end when it ends.
 */
export interface BackendSession {
  /** Engine's id of the session, for messages (hex). */
  readonly id: string;
  /** TTL the engine granted, ms. */
  readonly ttlMs: number;
  /** Aborted, with the cause as reason, when the session ends (closed, revoked, expired, lost). */
  readonly signal: AbortSignal;
  /** End the session on the engine, which drops every grant in it. Idempotent; never rejects. */
  close(): Promise<void>;
  /** Stop keeping the session alive; the engine drops it, and its grants, after its TTL. */
  orphan(): void;
}

/** The engine granted the key. */
export interface Granted {
  readonly granted: true;
  /** Fencing token: strictly increasing over all grants of this key. */
  readonly token: bigint;
  /** Lease length the engine actually applied (may be rounded up to its granularity), ms. */
  readonly ttlMs: number;
  /**
   * For engines whose grants live in a session (etcd lease, ZooKeeper session): aborted by the
   * backend when the engine ends the grant by itself (the session expired or was revoked). The
   * core then declares the lease lost at once, with the signal's reason as `cause`.
   */
  readonly lost?: AbortSignal;
  /**
   * For engines whose grants live in a session: the session's own validity bound, on the
   * process's monotonic clock (`performance.now()`, drift already subtracted). The core never
   * believes the lease valid past it, even when `ttlMs` from the attempt would reach further.
   */
  readonly validUntil?: number;
  /**
   * For engines whose connection can drop while the session lives on (ZooKeeper SUSPENDED):
   * true while the grant may be lost and the engine cannot say. `lease.atRisk` reads it.
   */
  readonly atRisk?: () => boolean;
  /**
   * Set on a grant the engine handed to a waiting contender when the previous holder released
   * (Redis: the release script grants the head of the line and tells it by pub/sub), so that it
   * came from `waitForChange` with no attempt of its own: the monotonic time (`performance.now()`)
   * the notification was received, ms. `ttlMs` is then a short first TTL that counts from this
   * time (the engine started it at the release, a one-way message earlier), and the core confirms
   * the grant at once with `renew` to the requested TTL, whether or not the watchdog runs: a
   * `Lease` in the background (its validity counts from the receipt with the short TTL until
   * then, from the renewal's start with the full TTL after), an owner-addressed grant before it is
   * answered. A confirmation answered `not-held` or `not-owner` loses the lease (its signal
   * aborts), as any failed renewal does. A notification delayed past the short TTL makes the
   * local validity optimistic by that delay, as a process pause would; the fencing token still
   * rejects the stale writer.
   */
  readonly handedAt?: number;
}

/**
 * Why an attempt was not granted:
 * - `held`: another owner holds the key, or this contender is queued behind others (the answer
 *   of every engine; the default when `reason` is absent);
 * - `no-quorum`: a replicated engine (Redlock) reached no majority of its nodes either way, so
 *   nobody can say who holds the key. Nothing is granted and the backend has already withdrawn
 *   the attempt everywhere; `error` says what each node answered.
 */
export type NotGrantedReason = 'held' | 'no-quorum';

/** The key is held by someone else (or this contender is queued behind others), or undecided. */
export interface NotGranted {
  readonly granted: false;
  /** Why; absent means `held`. */
  readonly reason?: NotGrantedReason;
  /**
   * With `reason: 'no-quorum'`: the engine's error describing the failed vote (Redlock's
   * `QuorumError` with each node's outcome). The core retries such an attempt with backoff while
   * the caller waits; when the deadline passes before a decided answer, it rejects with the last
   * such error (not a timeout), and a single attempt (`tryAcquire`) rejects with it at once.
   */
  readonly error?: Error;
  /**
   * Upper bound, in ms, on how long the current holder can keep the key without renewing it
   * (Redis PTTL, SQLite expiry). The core never sleeps past it. Undefined when unknown.
   */
  readonly holderTtlMs?: number;
  /**
   * Resolves when something changed that may let this contender in (a release notification, or
   * the predecessor's deletion): with nothing (the core attempts again), or with a grant the
   * engine handed to this contender on that change (`Granted.handedAt` set; the core takes it as
   * the acquire's grant without another attempt). It must settle by itself no later than
   * `maxMs`, and promptly when `signal` aborts; it never rejects. Absent when the engine cannot
   * notify: the core then backs off.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: engines that only wake resolve `Promise<void>`.
  readonly waitForChange?: (signal: AbortSignal, maxMs: number) => Promise<Granted | void>;
  /**
   * Longest time the core should wait on `waitForChange` before attempting again, ms. A reliable
   * notification (an etcd or ZooKeeper watch on the predecessor) sets it high, so that waiters
   * stay quiet until their turn (no herd); absent, the core polls as for lossy pub/sub.
   */
  readonly recheckAfterMs?: number;
  /**
   * The attempt left an entry in the engine's queue (etcd, ZooKeeper): a contender that gives
   * up without being granted (a `tryAcquire` that answers null) must be withdrawn with
   * `abandon`, or it would block everyone behind it.
   */
  readonly queued?: boolean;
}

/** Answer to an attempt. */
export type AttemptResult = Granted | NotGranted;

/** Identifies a granted lease on the engine. */
export interface LeaseRef {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  /**
   * False once the lease was released or lost or its validity ran out (the core's leases have
   * it; plain references do not): a backend that defers renewals (`RenewalBatcher`) drops the
   * renewal of a lease that is no longer held by the time it would be sent.
   */
  readonly isHeld?: boolean;
  /** Set for a semaphore's permit (`AttemptRequest.permits` of its grant); else a lock's. */
  readonly permits?: number | undefined;
  /** Set for a leadership (`AttemptRequest.election` of its grant): the election object's. */
  readonly election?: boolean | undefined;
}

/** Result of a renewal. */
export type RenewResult =
  | {
      readonly ok: true;
      /** Lease length applied by the engine, ms. */
      readonly ttlMs: number;
      /** As `Granted.validUntil`. */
      readonly validUntil?: number;
    }
  | { readonly ok: false; readonly reason: 'not-held' | 'not-owner' };

/**
 * Result of a release: `released` (this owner's lease was deleted), `not-held` (the key has no
 * holder) or `not-owner` (another owner holds it; nothing was deleted).
 */
export type ReleaseOutcome = 'released' | 'not-held' | 'not-owner';

/** What the engine says about a key right now. */
export interface LockInfo {
  readonly key: string;
  /** Current holder, or null when the key is free. */
  readonly holder: {
    readonly owner: string;
    readonly fencingToken: bigint;
    /** Remaining engine TTL, ms. */
    readonly ttlMs: number;
  } | null;
  /**
   * Highest fencing token the engine can tell for this key: issued since the key was last idle
   * for a while (Redis and Redlock: their per-key counter expires 5 s after the TTL of its last
   * grant), of the contenders present now (etcd, ZooKeeper), or the holder's (PostgreSQL,
   * SQLite, whose tokens come from one counter for every key and keep nothing per key once it is
   * free); 0n if none.
   */
  readonly lastFencingToken: bigint;
}

/**
 * The leader of an election as the engine holds it now (`Backend.leader`): one consistent read
 * of the election object's holder and its value.
 */
export interface ElectedLeader {
  /** The leader's owner id (its `lease.owner`). */
  readonly owner: string;
  /** The leader's term: the fencing token of its grant. */
  readonly term: bigint;
  /** The value the leader campaigned with or last proclaimed. */
  readonly value: string;
  /** Remaining engine TTL of the leader's grant, ms (> 0). */
  readonly ttlMs: number;
  /**
   * The candidates in the election, the leader among them (>= 1): the leader and the candidates
   * waiting in line behind it, as Curator's `LeaderLatch.getParticipants` counts them; read in the
   * same snapshot as the leader (one script, revision, children read or statement). On Redlock,
   * the count a majority of the nodes shows.
   */
  readonly candidates: number;
}

/** Result of a proclaim: the value was stored, or the lease no longer holds the election. */
export type ProclaimOutcome = 'proclaimed' | 'not-held' | 'not-owner';

/**
 * A subscription to an election object's changes (`Backend.watchElection`), armed when handed
 * out.
 */
export interface ElectionWatch {
  /**
   * How long the core may rely on the notifications before it reads the leader again anyway,
   * ms: high where the engine's watch is reliable (etcd, ZooKeeper), low where notifications can
   * be lost (Redis pub/sub) or are not sent for every change.
   */
  readonly recheckAfterMs: number;
  /** End the subscription. Synchronous and idempotent; `onChange` is not called after it. */
  stop(): void;
}

/** One holder of a listed key: a lock's writer, one of its readers, or one semaphore permit. */
export interface ListedHolder {
  readonly owner: string;
  readonly fencingToken: bigint;
  /** Remaining engine TTL, ms. */
  readonly ttlMs: number;
}

/**
 * A held key as `list` reports it: a consistent snapshot of that key (its holders and line read
 * in one engine operation), though not of the whole listing.
 */
export interface ListedLock {
  readonly key: string;
  /**
   * `write`: one exclusive holder; `read`: readers share the key; `permits`: a semaphore's
   * permits (a different object on the engine from the lock of the same key, listed apart).
   */
  readonly mode: LockMode | 'permits';
  /** With `mode: 'permits'`: the semaphore's permit count. */
  readonly permits?: number;
  /** Every live holder, in the order of their tokens (oldest first); never empty. */
  readonly holders: readonly ListedHolder[];
  /** Contenders waiting in the key's line (0 where the engine keeps none). */
  readonly waiters: number;
}

/** One page of a listing: held keys under `prefix`, after `cursor`, at most `pageSize`. */
export interface ListRequest {
  /** Keys that start with this text (validated; '' for all). */
  readonly prefix: string;
  /** Where the previous page ended (its `cursor`); null for the first page. */
  readonly cursor: string | null;
  /** Most entries in the page, 1 to 1,000; the engine's work per page is bounded by it. */
  readonly pageSize: number;
}

/** A page of held keys, and where the next one starts (null: this was the last). */
export interface ListPage {
  readonly entries: readonly ListedLock[];
  readonly cursor: string | null;
}

/**
 * What a backend can do, stated once (the core decides by these facts and never probes for
 * optional members). Frozen; the same for every call of one backend instance.
 */
export interface BackendCapabilities {
  /**
   * Modes the backend grants; always includes `write`. With `read`, readers share the key and
   * wait only for earlier writers (read-write locks).
   */
  readonly modes: readonly LockMode[];
  /**
   * Grants live in an engine session of this backend (an etcd lease, a ZooKeeper session) rather
   * than in a TTL of their own: the engine ends them with the session, and no other process can
   * hold or share the same grant or queue entry. `openSession` must be implemented. (etcd,
   * ZooKeeper.)
   */
  readonly sessions: boolean;
  /**
   * The engine keeps a waiting line per key: a contender that waits keeps its place between
   * attempts, and `attempt` answers `queued: true` when it left an entry there (Redis's FIFO of
   * waiters, etcd's contender keys, ZooKeeper's sequential nodes). Without `sessions` the line
   * outlives this locker, and `leaveQueue` must be implemented. (Redis, etcd, ZooKeeper.)
   */
  readonly queue: boolean;
  /**
   * Renewals asked for in one turn of the event loop go to the engine as one request (see
   * `RenewalBatcher`: one statement on PostgreSQL, one script call per node on Redis and
   * Redlock, one transaction of key reads on etcd). The watchdog then lets a renewal run up to ttl/12 early together with others due
   * then. Elsewhere renewals keep their own times: bunching them would only make bursts.
   */
  readonly batchRenew: boolean;
  /**
   * The backend grants semaphore permits (`AttemptRequest.permits`): at most that many holders
   * of a key at once, in arrival order, each grant with its own fencing token from the key's one
   * strictly increasing sequence; waiting wakes the next waiter on a release.
   */
  readonly permits: boolean;
  /**
   * `attemptAll` is implemented: single attempts at several keys of one multi-key acquire go to
   * the engine as one operation that grants every key or none (one script call on Redis when
   * the keys share a node, one transaction on etcd, one statement on PostgreSQL, one transaction
   * on SQLite). Elsewhere the core makes one attempt per key and releases what it got.
   */
  readonly attemptAll: boolean;
  /**
   * `list` is implemented: the held keys of the store under a prefix, page by page, each page
   * bounded work on the engine (an index range on SQLite, an index walk on PostgreSQL, a key
   * range on etcd, the key nodes' lines on ZooKeeper).
   */
  readonly list: boolean;
  /**
   * Leader elections: `attempt` takes `AttemptRequest.election`, `renew` and `release` take
   * leases with `election: true`, and `proclaim`, `leader` and `watchElection` are implemented.
   */
  readonly election: boolean;
  /**
   * Lock-delay: `attempt` (and `attemptAll`) honour `AttemptRequest.lockDelayMs` as it says.
   */
  readonly lockDelay: boolean;
}

/**
 * A backend. Every method must be atomic on the engine for its key, and must reject with a
 * `BackendError` (engine error as `cause`) when the engine cannot answer; it never resolves with
 * a guess. Input is validated by the core before any method is called.
 */
export interface Backend {
  /** Short engine name for messages and events, e.g. `redis`. */
  readonly name: string;
  /** Largest `ttlMs` the engine accepts. */
  readonly maxTtlMs: number;
  /** What the backend can do: modes, sessions, waiting line, batched renewals. */
  readonly capabilities: BackendCapabilities;
  /**
   * Try to become the holder of `key` (idempotent for the same owner: a repeated attempt by the
   * current holder returns its existing token and refreshes its TTL, so a lost reply is safe).
   */
  attempt(request: AttemptRequest): Promise<AttemptResult>;
  /**
   * Single attempts at several keys (`acquireAll`'s first round), all granted in one engine
   * operation or none: answers in the order of `requests`, either every one `granted` or none
   * (each refused key answered as `attempt` would, the free ones `{ granted: false }` with no
   * `waitOn`). Nothing is queued. Idempotent per owner, like `attempt`. Required when
   * `capabilities.attemptAll` is true; the core calls it only then.
   * @param requests 2 to `MAX_MULTI_KEYS` requests for distinct keys, sorted by key, each with
   *   `willWait: false`, no `permits`, one `ttlMs` and `mode` for all, an owner of its own.
   * @returns null when these keys cannot be taken in one operation here (Redis Cluster keys in
   *   different hash slots): the core then attempts them one by one.
   * @throws BackendError as `attempt` does; whether anything was granted is then unknown, and
   *   the core abandons every request.
   */
  attemptAll?(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null>;
  /**
   * Extend a held lease to `ttlMs` from now, only if `owner` and `token` still hold it. A
   * session-based engine renews the session for all its grants in the background; its `renew`
   * confirms the grant and answers with the session's remaining validity as `ttlMs`.
   */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult>;
  /** Compare-and-delete by owner and token. Never deletes another owner's lease. */
  release(lease: LeaseRef): Promise<ReleaseOutcome>;
  /**
   * Withdraw a contender that gave up (timeout, abort, error, or a grant that came too late to
   * be valid): delete the key if `owner` holds it, whatever the token, and any waiter entry it
   * has. A reply lost after the engine applied an attempt leaves nothing behind this way.
   */
  abandon(request: AttemptRequest): Promise<void>;
  /**
   * Take a contender that gave up out of the engine's waiting line only, leaving any grant it
   * holds alone: for a caller-chosen owner whose grant may already serve a newer acquire of the
   * same owner, where `abandon` is not called. Required when `capabilities.queue` is true and
   * `capabilities.sessions` false; the core calls it only then (where line entries live in this
   * locker's session, `abandon` is used).
   */
  leaveQueue?(request: AttemptRequest): Promise<void>;
  /** Current state of `key`. */
  inspect(key: string): Promise<LockInfo>;
  /**
   * One page of the held keys (locks, read locks and semaphores) whose names start with
   * `request.prefix`, in the engine's order of keys; a key held both as a lock and as a
   * semaphore appears once as each. Keys with waiters but no live holder are left out. Required
   * when `capabilities.list` is true; the core calls it only then.
   * @throws BackendError when the engine cannot answer; InvalidArgumentError for a cursor this
   *   backend did not make.
   */
  list?(request: ListRequest): Promise<ListPage>;
  /**
   * Replace the value of a held leadership: store `value` with the election object's grant only
   * if `lease.owner` holds it with `lease.fencingToken` (compare-and-set on the engine), and
   * notify the election's watchers. Required when `capabilities.election` is true.
   * @param lease a leadership (`election: true`).
   * @param value as `ElectionCandidacy.value` (validated by the core).
   * @returns `proclaimed`, or `not-held` / `not-owner` as `renew` would answer (nothing stored).
   * @throws BackendError when the engine cannot answer.
   */
  proclaim?(lease: LeaseRef, value: string): Promise<ProclaimOutcome>;
  /**
   * The current leader of the election `key` (owner, term, value and remaining TTL read in one
   * engine operation), or null when nobody holds it. Line entries of candidates not yet granted
   * are not leaders. Required when `capabilities.election` is true.
   * @throws BackendError when the engine cannot answer.
   */
  leader?(key: string): Promise<ElectedLeader | null>;
  /**
   * Subscribe to the election object of `key`: `onChange` is called (perhaps spuriously, perhaps
   * once for several changes) after each change the engine can notify of: a grant, a proclaim, a
   * release or withdrawal, and the end of a grant held in a session (etcd, ZooKeeper). The expiry
   * of a grant's own TTL may go unnotified: the core reads the leader again when its TTL runs
   * out, and after `recheckAfterMs` in any case. Resolves once armed, so that every change after
   * it is notified. Required when `capabilities.election` is true.
   * @throws BackendError when the engine cannot arm it.
   */
  watchElection?(key: string, onChange: () => void): Promise<ElectionWatch>;
  /**
   * Open a session for the user. Required when `capabilities.sessions` is true (etcd,
   * ZooKeeper); the core calls it only then.
   * @param ttlMs requested TTL, ms (validated by the core); the engine may grant more.
   * @throws BackendError when the engine cannot answer.
   */
  openSession?(ttlMs: number): Promise<BackendSession>;
  /** Close connections and timers this backend opened. Clients passed in by the user stay open. */
  close(): Promise<void>;
}
