/**
 * Owner-addressed grants, for entry points that keep no lock state of their own (the sidecar):
 * the caller chooses the owner id, and any process on the same store can renew, release or
 * inspect the grant by key, owner and fencing token. No `Lease`, no watchdog, no reentrancy.
 *
 * The subtle part is withdrawal. The same owner may be acquiring the same key again already, and
 * on the engine its new grant is the same row, key or node as a stale one (a repeated attempt by
 * the holder keeps its token), so a late withdrawal would delete the grant it was just told it
 * holds. The bookkeeping here (`startOwnerRun`) tells whether a run is still the latest of its
 * key and owner in this process.
 */
import { BackendError, FencelockError, InvalidArgumentError } from '../errors.js';
import {
  checkOptionNames,
  isOptionsObject,
  MAX_TIMER_MS,
  type ResolvedLockOptions,
  type RetryOptions,
  resolveLockOptions,
  validateFencingToken,
  validateKey,
  validateOwnerId,
  validateTtl,
} from '../options.js';
import type { Withdrawal } from './acquire-loop.js';
import type {
  AttemptRequest,
  Backend,
  Granted,
  LeaseRef,
  LockInfo,
  LockMode,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from './backend.js';
import { assertElectionGranted, type Candidacy, validateElectionValue } from './candidacy.js';
import { publish } from './events.js';
import { assertPermitsGranted, validatePermits } from './permits.js';

/**
 * A grant made to a caller-chosen owner (`locker.acquireForOwner`): no `Lease` object, no
 * watchdog, nothing kept in this process. The engine ends it `ttlMs` after the grant unless the
 * owner renews it (`locker.renewForOwner`); any process on the same store can renew, release or
 * inspect it by key, owner and fencing token.
 */
export interface OwnerGrant {
  /** Locked key. */
  readonly key: string;
  /** The owner id the caller chose (hex, >= 128 bits). */
  readonly owner: string;
  /** Fencing token of the grant; the same token when the owner already held the key. */
  readonly fencingToken: bigint;
  /** Lease length the engine applied, ms (may be rounded up to the engine's granularity). */
  readonly ttlMs: number;
  /** For a semaphore's permit, the semaphore's permit count; absent for a lock. */
  readonly permits?: number;
  /** `'read'` for a read grant (shared with other readers); absent for a write grant or a permit. */
  readonly mode?: 'read';
  /** True for a leadership of the election `key`: `fencingToken` is the term. */
  readonly election?: true;
}

/** Options of the owner-addressed acquires (`acquireForOwner`, `tryAcquireForOwner`). */
export interface OwnerAcquireOptions {
  /**
   * Lease length, ms (required; fractions round up). No watchdog renews it: the engine ends the
   * lease this long after the grant unless `renewForOwner` extends it.
   */
  readonly ttlMs: number;
  /**
   * How long `acquireForOwner` waits for the key, ms (`0`: one attempt). Ignored by
   * `tryAcquireForOwner`. @default the locker's `waitMs`
   */
  readonly waitMs?: number;
  /** Cancels a pending `acquireForOwner`; it then rejects with `LockTimeoutError`. */
  readonly signal?: AbortSignal;
  /** Backoff while waiting. @default the locker's `retry` */
  readonly retry?: RetryOptions;
  /**
   * Take one permit of the semaphore `key` with this many permits (1 to 10,000) instead of the
   * lock `key` (see `locker.semaphore`). Renew and release it with the same `permits`.
   */
  readonly permits?: number;
  /**
   * `'read'`: a read grant of `key`, shared with other readers and excluding writers (the
   * read-write rules of `locker.acquire(key, { mode: 'read' })`, without reentrancy or
   * downgrade: each owner is its own contender). Only on stores whose backend grants read locks
   * (not PostgreSQL's advisory mode); not with `permits`. Renew it as any grant; release it with
   * its fencing token. @default 'write'
   */
  readonly mode?: LockMode;
  /**
   * Stand as a candidate of the election `key` publishing `value` (see `locker.election`)
   * instead of taking the lock `key`: the grant is the leadership, its fencing token the term.
   * Renew, proclaim and release it with `election: true`. Not with `permits` or `mode: 'read'`.
   */
  readonly election?: { readonly value: string };
  /**
   * Lock-delay of the grant, ms (see `LockOptions.lockDelayMs`): kept by the engine when the
   * grant ends without a release. Not with `permits` or `mode: 'read'`. @default 0
   */
  readonly lockDelayMs?: number;
}

/**
 * Options of the owner-addressed multi-key acquires (`acquireAllForOwner`,
 * `tryAcquireAllForOwner`): an owner-addressed acquire's, without `permits`; `waitMs` and
 * `signal` bound the whole acquire, `mode` applies to every key.
 */
export type OwnerAcquireAllOptions = Omit<OwnerAcquireOptions, 'permits' | 'election'>;

/** Which lease `releaseForOwner` releases: key and owner, and the fencing token if known. */
export interface OwnerReleaseRef {
  readonly key: string;
  readonly owner: string;
  /**
   * The grant's fencing token. Without it, the engine's current holder is read first and
   * released by compare-and-delete of its token, only if it is `owner` (Dapr's unlock carries no
   * token). Required for a permit.
   */
  readonly fencingToken?: bigint;
  /** For a semaphore's permit, the semaphore's permit count (as acquired); absent for a lock. */
  readonly permits?: number;
  /**
   * `'read'` for a read grant: the fencing token is then required (a key's readers are many
   * owners, so there is no single holder to look the token up from). The release itself finds
   * the grant by owner and token whatever the mode. @default 'write'
   */
  readonly mode?: LockMode;
  /** True for a leadership (acquired with `election`); the fencing token (term) is then required. */
  readonly election?: boolean;
}

/**
 * Outcome of `renewForOwner`: `renewed` with the lease length the engine applied (ms), or why
 * not: `not-held` (the key has no holder) or `not-owner` (another owner or another grant holds it).
 */
export type OwnerRenewOutcome =
  | { readonly outcome: 'renewed'; readonly ttlMs: number }
  | { readonly outcome: 'not-held' | 'not-owner' };

/** What the owner-addressed operations need from their locker. */
export interface OwnerGrantContext {
  /** The backend, loaded on first use. */
  readonly backend: () => Promise<Backend>;
  /** The store's name in events. */
  readonly store: string;
  readonly driftFactor: number;
}

const OWNER_ACQUIRE_OPTION_NAMES: ReadonlySet<string> = new Set([
  'ttlMs',
  'waitMs',
  'signal',
  'retry',
  'permits',
  'mode',
  'election',
  'lockDelayMs',
]);

/** The option names of `acquireAllForOwner` (no `permits`, no `election`). */
const OWNER_ACQUIRE_ALL_OPTION_NAMES: ReadonlySet<string> = new Set(
  [...OWNER_ACQUIRE_OPTION_NAMES].filter((name) => name !== 'permits' && name !== 'election'),
);

/**
 * Check an owner-addressed acquire (key, owner, options; `ttlMs` is required) and resolve its
 * lock options over `defaults`: no watchdog, reentrancy, cap or session; `mode` as asked.
 * @returns the validated key and the options.
 * @throws InvalidArgumentError before any network call.
 */
export function ownerLockOptions(
  defaults: ResolvedLockOptions,
  key: string,
  owner: string,
  options: OwnerAcquireOptions,
): {
  key: string;
  options: ResolvedLockOptions;
  permits: number | undefined;
  candidacy: Candidacy | undefined;
} {
  const k = validateKey(key);
  validateOwnerId(owner);
  return { key: k, ...resolveOwnerOptions(defaults, options, OWNER_ACQUIRE_OPTION_NAMES) };
}

/**
 * Check an owner-addressed multi-key acquire before any network call: the owner id of each key
 * (`ownerOf(key)`, distinct per key) and the options (`ttlMs` required, no `permits`).
 * @param keys the keys, validated, deduplicated and sorted (`validateKeys`).
 * @returns each key's owner id, and the lock options.
 * @throws InvalidArgumentError naming `owner` or the option.
 */
export function ownerAllLockOptions(
  defaults: ResolvedLockOptions,
  keys: readonly string[],
  ownerOf: (key: string) => string,
  options: OwnerAcquireAllOptions,
): { owners: ReadonlyMap<string, string>; options: ResolvedLockOptions } {
  if (typeof ownerOf !== 'function') {
    throw new InvalidArgumentError('owner', 'a function (key) => owner id', ownerOf);
  }
  const owners = new Map<string, string>();
  const seen = new Set<string>();
  for (const key of keys) {
    const owner = validateOwnerId(ownerOf(key), `owner(${JSON.stringify(key)})`);
    if (seen.has(owner)) {
      throw new InvalidArgumentError(
        'owner',
        'a distinct owner id per key (etcd and ZooKeeper track a contender by its owner id)',
        owner,
      );
    }
    seen.add(owner);
    owners.set(key, owner);
  }
  const { options: resolved } = resolveOwnerOptions(
    defaults,
    options,
    OWNER_ACQUIRE_ALL_OPTION_NAMES,
  );
  return { owners, options: resolved };
}

/** The options of an owner-addressed acquire (`ttlMs` required) over `defaults`. */
function resolveOwnerOptions(
  defaults: ResolvedLockOptions,
  options: OwnerAcquireOptions,
  names: ReadonlySet<string>,
): { options: ResolvedLockOptions; permits: number | undefined; candidacy: Candidacy | undefined } {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', 'an options object with ttlMs', options);
  }
  if (options.ttlMs === undefined) {
    throw new InvalidArgumentError(
      'ttlMs',
      `a number of milliseconds in (0, ${MAX_TIMER_MS}]`,
      undefined,
    );
  }
  checkOptionNames(options, names);
  const { permits, election, ...lockOptions } = options;
  const resolved = resolveLockOptions(defaults, lockOptions, names);
  const mode = options.mode === undefined ? 'write' : resolved.mode;
  if (permits !== undefined && mode === 'read') {
    throw new InvalidArgumentError(
      'mode',
      "'write' with permits (a semaphore's permit has no read mode)",
      mode,
    );
  }
  const candidacy = election === undefined ? undefined : checkCandidacy(election, permits, mode);
  if (permits !== undefined && resolved.lockDelayMs > 0 && options.lockDelayMs !== undefined) {
    throw new InvalidArgumentError(
      'lockDelayMs',
      "0 with permits (a semaphore's permit carries no lock-delay)",
      options.lockDelayMs,
    );
  }
  return {
    candidacy,
    permits: permits === undefined ? undefined : validatePermits(permits),
    options: {
      ...resolved,
      autoRenew: false,
      reentrant: false,
      mode,
      maxHoldMs: undefined,
      session: undefined,
    },
  };
}

/**
 * Check the `election` option of an owner-addressed acquire: `{ value }`, without `permits` or
 * read mode.
 * @throws InvalidArgumentError naming `election`, `election.value` or the clashing option.
 */
function checkCandidacy(election: unknown, permits: unknown, mode: LockMode): Candidacy {
  if (!isOptionsObject(election)) {
    throw new InvalidArgumentError('election', 'an object { value }', election);
  }
  checkOptionNames(election, CANDIDACY_NAMES, 'options.election');
  if (permits !== undefined) {
    throw new InvalidArgumentError('permits', 'no permits with election', permits);
  }
  if (mode === 'read') {
    throw new InvalidArgumentError('mode', "'write' with election", mode);
  }
  return {
    value: validateElectionValue((election as { value?: unknown }).value, 'election.value'),
  };
}

const CANDIDACY_NAMES: ReadonlySet<string> = new Set(['value']);

/** The answer of an owner-addressed acquire for a grant. */
export function ownerGrantOf(request: AttemptRequest, result: Granted): OwnerGrant {
  return {
    key: request.key,
    owner: request.owner,
    fencingToken: result.token,
    ttlMs: result.ttlMs,
    ...(request.permits === undefined ? {} : { permits: request.permits }),
    ...(request.mode === 'read' ? { mode: 'read' as const } : {}),
    ...(request.election === undefined ? {} : { election: true as const }),
  };
}

/** Owner-addressed acquires in progress per backend: `owner`, `key` → latest number, live count. */
const ownerRuns = new WeakMap<Backend, Map<string, { latest: number; live: number }>>();

/** One owner-addressed acquire, as registered by `startOwnerRun`. */
export interface OwnerRun {
  /** True until another acquire of the same key and owner starts on the same backend. */
  isLatest(): boolean;
  /** Keep the entry for a withdrawal this run leaves behind (ended by its own `end()`). */
  keep(): void;
  /** The run (or a kept withdrawal) ended. */
  end(): void;
}

/**
 * Register an owner-addressed acquire of `key` by `owner`: `isLatest()` stays true until another
 * one of the same key and owner starts on the same backend. The entry lives while any run (or a
 * withdrawal a run left behind, `keep()` … `end()`) does.
 */
export function startOwnerRun(backend: Backend, key: string, owner: string): OwnerRun {
  let runs = ownerRuns.get(backend);
  if (runs === undefined) {
    runs = new Map();
    ownerRuns.set(backend, runs);
  }
  const id = `${owner}\u0000${key}`;
  const entry = runs.get(id) ?? { latest: 0, live: 0 };
  runs.set(id, entry);
  entry.latest += 1;
  entry.live += 1;
  const number = entry.latest;
  return {
    isLatest: () => entry.latest === number,
    keep: () => {
      entry.live += 1;
    },
    end: () => {
      entry.live -= 1;
      if (entry.live === 0 && runs.get(id) === entry) runs.delete(id);
    },
  };
}

/**
 * How an owner-addressed acquire withdraws after it gave up. It withdraws the grant (`abandon`)
 * only where grants live in this locker's engine session (`capabilities.sessions`: etcd,
 * ZooKeeper; there they would never run out by themselves, and no other process shares the
 * entry), and only while no later acquire of the same key and owner has started here. Elsewhere
 * the grant runs out by its TTL, or its owner releases or re-acquires it by name; but a
 * given-up waiter still leaves the engine's line (`leaveQueue`, never touching a grant, where
 * `capabilities.queue`), so that it does not hold up the others until its entry expires —
 * unless a newer acquire has started, whose place in line that entry now is.
 */
export function ownerWithdrawal(backend: Backend, request: AttemptRequest): Withdrawal {
  const run = startOwnerRun(backend, request.key, request.owner);
  const { sessions, queue } = backend.capabilities;
  const now = (): Promise<void> => {
    if (!run.isLatest()) return Promise.resolve();
    if (sessions) return backend.abandon(request);
    if (queue && backend.leaveQueue) return backend.leaveQueue(request);
    return Promise.resolve();
  };
  return {
    now,
    whenAnswered: (pending) => {
      // The run stays known until the answer lands: withdraw then, whatever it says (an error
      // may be a grant whose reply was lost after the withdrawal made at the deadline).
      run.keep();
      return pending
        .then(now, now)
        .catch(() => undefined)
        .finally(() => run.end());
    },
    end: () => run.end(),
  };
}

/**
 * Owner-addressed renewal (see `Locker.renewForOwner`): compare-and-set on the engine; publishes
 * a `renew` event.
 * @throws InvalidArgumentError for a bad key, owner, token or `ttlMs`, before any network call.
 * @throws BackendError when the engine cannot answer.
 */
export async function renewForOwner(
  ctx: OwnerGrantContext,
  lease: LeaseRef,
  ttlMs: number,
): Promise<OwnerRenewOutcome> {
  const ref = validateLeaseRef(lease, true);
  validateTtl(ttlMs);
  const backend = await ctx.backend();
  const ttl = validateTtl(ttlMs, 'ttlMs', backend.maxTtlMs);
  const base = { backend: backend.name, store: ctx.store, key: ref.key, owner: ref.owner };
  const fencingToken = ref.fencingToken as bigint;
  if (ref.permits !== undefined) assertPermitsGranted(backend);
  if (ref.election) assertElectionGranted(backend);
  let result: RenewResult;
  try {
    result = await backend.renew(
      { ...base, fencingToken, permits: ref.permits, election: ref.election },
      ttl,
    );
  } catch (error) {
    publish('renew', () => ({ ...base, fencingToken, ok: false, error }));
    throw wrapEngineError(backend, `renew of "${ref.key}"`, error);
  }
  publish('renew', () => ({
    ...base,
    fencingToken,
    ok: result.ok,
    ...(result.ok ? { ttlMs: result.ttlMs } : {}),
  }));
  return result.ok ? { outcome: 'renewed', ttlMs: result.ttlMs } : { outcome: result.reason };
}

/**
 * Owner-addressed release (see `Locker.releaseForOwner`): compare-and-delete of owner and token;
 * without a token, the current holder is read first and released only if it is the owner.
 * Publishes a `release` event when a release reaches the engine.
 * @throws InvalidArgumentError for a bad key, owner or token, before any network call.
 * @throws BackendError when the engine cannot answer.
 */
export async function releaseForOwner(
  ctx: OwnerGrantContext,
  lease: OwnerReleaseRef,
): Promise<ReleaseOutcome> {
  const ref = validateLeaseRef(lease, false);
  const backend = await ctx.backend();
  let fencingToken = ref.fencingToken;
  if (ref.permits !== undefined) {
    assertPermitsGranted(backend);
    if (fencingToken === undefined) {
      throw new InvalidArgumentError('fencingToken', "the permit's fencing token", undefined);
    }
  }
  if (ref.mode === 'read' && fencingToken === undefined) {
    throw new InvalidArgumentError('fencingToken', "the read grant's fencing token", undefined);
  }
  if (ref.election) {
    assertElectionGranted(backend);
    if (fencingToken === undefined) {
      throw new InvalidArgumentError('fencingToken', "the leadership's term", undefined);
    }
  }
  if (fencingToken === undefined) {
    let info: LockInfo;
    try {
      info = await backend.inspect(ref.key);
    } catch (error) {
      throw wrapEngineError(backend, `release of "${ref.key}"`, error);
    }
    if (info.holder === null) return 'not-held';
    if (info.holder.owner !== ref.owner) return 'not-owner';
    fencingToken = info.holder.fencingToken;
  }
  const target = { key: ref.key, owner: ref.owner, fencingToken };
  const base = { backend: backend.name, store: ctx.store, ...target };
  try {
    const outcome = await backend.release({
      ...target,
      permits: ref.permits,
      election: ref.election,
    });
    publish('release', () => ({ ...base, outcome }));
    return outcome;
  } catch (error) {
    publish('release', () => ({ ...base, outcome: 'error', error }));
    throw wrapEngineError(backend, `release of "${ref.key}"`, error);
  }
}

/**
 * Check the key, owner and (required or optional) fencing token of an owner-addressed call.
 * @throws InvalidArgumentError
 */
function validateLeaseRef(
  ref: unknown,
  tokenRequired: boolean,
): {
  key: string;
  owner: string;
  fencingToken: bigint | undefined;
  permits: number | undefined;
  mode: LockMode | undefined;
  election: boolean;
} {
  if (typeof ref !== 'object' || ref === null) {
    throw new InvalidArgumentError('lease', 'an object { key, owner, fencingToken }', ref);
  }
  const r = ref as Partial<LeaseRef>;
  const key = validateKey(r.key);
  const owner = validateOwnerId(r.owner);
  const fencingToken =
    r.fencingToken === undefined && !tokenRequired
      ? undefined
      : validateFencingToken(r.fencingToken);
  const permits = r.permits === undefined ? undefined : validatePermits(r.permits);
  const { mode } = ref as { mode?: unknown };
  if (mode !== undefined && mode !== 'write' && mode !== 'read') {
    throw new InvalidArgumentError('mode', "'write' or 'read'", mode);
  }
  const { election } = ref as { election?: unknown };
  if (election !== undefined && typeof election !== 'boolean') {
    throw new InvalidArgumentError('election', 'a boolean', election);
  }
  if (election === true && (permits !== undefined || mode === 'read')) {
    throw new InvalidArgumentError('election', 'no election with permits or read mode', election);
  }
  return { key, owner, fencingToken, permits, mode, election: election === true };
}

/**
 * Owner-addressed proclaim (see `Locker.proclaimForOwner`): compare-and-set of the leadership's
 * value on the engine, by owner and term.
 * @returns `proclaimed`, or `not-held` / `not-owner` (nothing stored).
 * @throws InvalidArgumentError for a bad key, owner, term or value, or on a store without
 *   elections, before any network call.
 * @throws BackendError when the engine cannot answer.
 */
export async function proclaimForOwner(
  ctx: OwnerGrantContext,
  lease: LeaseRef,
  value: string,
): Promise<ProclaimOutcome> {
  const ref = validateLeaseRef({ ...(lease as object), election: true }, true);
  const checked = validateElectionValue(value);
  const backend = await ctx.backend();
  assertElectionGranted(backend);
  const target = { key: ref.key, owner: ref.owner, fencingToken: ref.fencingToken as bigint };
  try {
    return await (backend as Required<Backend>).proclaim({ ...target, election: true }, checked);
  } catch (error) {
    throw wrapEngineError(backend, `proclaim of "${ref.key}"`, error);
  }
}

/** Engine errors keep their type; anything else becomes a BackendError with it as `cause`. */
function wrapEngineError(backend: Backend, operation: string, error: unknown): Error {
  return error instanceof FencelockError ? error : new BackendError(backend.name, operation, error);
}
