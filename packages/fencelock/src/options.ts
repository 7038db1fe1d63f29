/**
 * Option types, their frozen defaults and their validation, in one place. Every public entry
 * point validates here before any network call and throws `InvalidArgumentError` naming the
 * argument, the allowed range and the value received.
 */
import type { LockMode } from './core/backend.js';
import type { Session } from './core/session.js';
import { InvalidArgumentError } from './errors.js';

/** Largest delay a Node.js timer accepts (2^31 − 1 ms, about 24.8 days). */
export const MAX_TIMER_MS = 2_147_483_647;
/** Longest accepted key, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 1024;

/** Backoff between attempts while waiting for a lock (full jitter, AWS Architecture Blog 2015). */
export interface RetryOptions {
  /** Upper bound of the first backoff, ms. @default 20 */
  readonly initialDelayMs?: number;
  /** Upper bound of any single backoff, ms. @default 500 */
  readonly maxDelayMs?: number;
  /** Growth of the upper bound per attempt. @default 2 */
  readonly factor?: number;
}

/** Options of one lock; per-call values merge over the locker's defaults. */
export interface LockOptions {
  /**
   * Lease length in ms. The engine drops the lease this long after the last grant or renewal.
   * Non-integers are rounded up to the next whole millisecond. @default 30000
   */
  readonly ttlMs?: number;
  /**
   * How long `acquire()` waits for the lock, ms (`Infinity`: until granted or aborted; `0`: one
   * attempt). @default Infinity
   */
  readonly waitMs?: number;
  /** Renew the lease every `ttlMs / 3` while it is held (the watchdog). @default true */
  readonly autoRenew?: boolean;
  /**
   * Hard cap on how long one lease may be held, ms, renewals included. Independent of `ttlMs`:
   * setting it never turns the watchdog off. @default undefined (no cap)
   */
  readonly maxHoldMs?: number;
  /**
   * A nested acquire of the same key in the same async context (inside `withLock`) or on the
   * same `Lock` handle returns the held lease and increments its hold count. @default false
   */
  readonly reentrant?: boolean;
  /**
   * `write` (exclusive) or `read` (shared with readers; waits only for earlier writers), on
   * stores whose backend lists the mode in `modes` (etcd). @default 'write'
   */
  readonly mode?: LockMode;
  /** Cancels a pending `acquire()`; it then rejects with `LockTimeoutError`. */
  readonly signal?: AbortSignal;
  /** Backoff while waiting. */
  readonly retry?: RetryOptions;
  /**
   * Acquire in this session (from `locker.openSession()`) instead of the locker's own: the lease
   * lives as long as the session, which keeps it alive; its TTL is the session's. Not with
   * `ttlMs` or `autoRenew: false`. Stores with sessions only (etcd, ZooKeeper).
   */
  readonly session?: Session;
  /**
   * Lock-delay (Chubby, Consul sessions' `LockDelay`), ms: recorded with this lease on the
   * engine; when the lease ends without a release (its TTL ran out, its session ended: the
   * holder was killed, paused or cut off), nobody is granted the key for this long after that
   * end, so that a resource that cannot check fencing tokens sees the old holder's writes drain
   * first. A release ends it at once. An integer from 0 to 60,000 (`MAX_LOCK_DELAY_MS`); only
   * exclusive grants carry it (write locks, elections' leaderships), not read grants or permits.
   * Other clients need not pass it. Stores with `capabilities.lockDelay`. @default 0
   */
  readonly lockDelayMs?: number;
}

/** Options of a locker. */
export interface LockerOptions extends Omit<LockOptions, 'signal' | 'session'> {
  /**
   * Clock drift allowance as a fraction of the TTL: a lease is believed valid only until
   * `start + ttlMs − (ttlMs × driftFactor + 2 ms)` (Redlock spec). @default 0.01
   */
  readonly driftFactor?: number;
  /**
   * The store's name in events and metrics (the `store` label): 1 to 200 characters. Give
   * lockers over different stores different names; keep the number of names small (one time
   * series each). @default the store URL without user info (so without its password) and
   * parameters, e.g. `redis://10.0.0.5:6379/0`; for a Backend instance, the backend's name
   */
  readonly name?: string;
}

/** Lock options with every default applied. */
export interface ResolvedLockOptions {
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly autoRenew: boolean;
  readonly maxHoldMs: number | undefined;
  readonly reentrant: boolean;
  readonly mode: LockMode;
  readonly signal: AbortSignal | undefined;
  readonly retry: Required<RetryOptions>;
  readonly session: Session | undefined;
  /** 0 for none. */
  readonly lockDelayMs: number;
}

/** Longest lock-delay, ms (Consul's limit for a session's `LockDelay` is the same 60 s). */
export const MAX_LOCK_DELAY_MS = 60_000;

/** Defaults of every option. */
export const DEFAULTS = Object.freeze({
  ttlMs: 30_000,
  waitMs: Number.POSITIVE_INFINITY,
  autoRenew: true,
  reentrant: false,
  driftFactor: 0.01,
  retry: Object.freeze({ initialDelayMs: 20, maxDelayMs: 500, factor: 2 }),
});

/**
 * Check a lock key: a well-formed string (no lone surrogate) of 1 to 1024 UTF-8 bytes, without
 * NUL (PostgreSQL text cannot hold it, and ZooKeeper paths may not contain it).
 * @throws InvalidArgumentError
 */
export function validateKey(key: unknown, argument = 'key'): string {
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    Buffer.byteLength(key) > MAX_KEY_BYTES ||
    LONE_SURROGATE.test(key) ||
    key.includes('\u0000')
  ) {
    throw new InvalidArgumentError(
      argument,
      `a well-formed string of 1 to ${MAX_KEY_BYTES} UTF-8 bytes without NUL`,
      key,
    );
  }
  return key;
}

/** A lone surrogate has no UTF-8 form: engines would store it as U+FFFD, and keys would alias. */
export const LONE_SURROGATE = /\p{Surrogate}/u;

/** An owner id: 32 to 128 lowercase hex digits (128 to 512 bits). */
const OWNER_ID = /^[0-9a-f]{32,128}$/;

/**
 * Check a caller-chosen owner id (owner-addressed operations): 32 to 128 lowercase hex digits,
 * i.e. at least 128 bits. Engines embed owner ids in key and node names (etcd keys, ZooKeeper
 * nodes), so nothing but hex is accepted.
 * @throws InvalidArgumentError naming `argument`.
 */
export function validateOwnerId(value: unknown, argument = 'owner'): string {
  if (typeof value !== 'string' || !OWNER_ID.test(value)) {
    throw new InvalidArgumentError(
      argument,
      'a string of 32 to 128 lowercase hex digits (>= 128 bits)',
      value,
    );
  }
  return value;
}

/** Largest fencing token accepted as input (2^128 − 1; engines issue far smaller ones). */
const MAX_FENCING_TOKEN = (1n << 128n) - 1n;

/**
 * Check a fencing token given back by a caller: a `bigint` in [1, 2^128 − 1].
 * @throws InvalidArgumentError naming `argument`.
 */
export function validateFencingToken(value: unknown, argument = 'fencingToken'): bigint {
  if (typeof value !== 'bigint' || value < 1n || value > MAX_FENCING_TOKEN) {
    throw new InvalidArgumentError(argument, 'a bigint in [1, 2^128 - 1]', value);
  }
  return value;
}

/** Whether `value` can be an options object: an object that is neither null nor an array. */
export function isOptionsObject(value: unknown): value is object {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Refuse an options object with a name outside `allowed` (a typo is an error, never ignored).
 * @param path how the object is named in errors: `options` gives `options.<name>`.
 * @throws InvalidArgumentError naming the first unknown `<path>.<name>`, allowed: "one of …".
 */
export function checkOptionNames(
  options: object,
  allowed: ReadonlySet<string>,
  path = 'options',
): void {
  for (const name of Object.keys(options)) {
    if (!allowed.has(name)) {
      throw new InvalidArgumentError(`${path}.${name}`, `one of ${[...allowed].join(', ')}`, name);
    }
  }
}

/**
 * The shortest lease anyone may ask for, ms: the library, the CLI (`--ttl`) and the sidecar
 * (`ttlMs`) share it. At 100 ms the default drift allowance (1 % + 2 ms) leaves 97 ms of
 * validity and the watchdog renews every 33 ms, still several loopback round trips; a shorter
 * lease is lost to scheduling noise. Even the largest `driftFactor` (0.5) leaves a lease of this
 * length 48 ms of validity, so no TTL in range is eaten by its drift allowance. Engines may grant
 * more than asked (etcd rounds up to whole seconds and its minimum, ZooKeeper to 2 × tickTime);
 * `lease.ttlMs` says what they granted. See docs/semantics.md, "The TTL rule".
 */
export const MIN_TTL_MS = 100;

/**
 * The rule every TTL (and `maxHoldMs`) meets, in the words `InvalidArgumentError.allowed` uses:
 * milliseconds from `MIN_TTL_MS` to `maxMs` (default `MAX_TIMER_MS`, the longest Node.js timer).
 * @returns e.g. "a number of milliseconds from 100 to 2147483647 (fractions round up)".
 */
export function ttlRule(maxMs = MAX_TIMER_MS): string {
  return `a number of milliseconds from ${MIN_TTL_MS} to ${maxMs} (fractions round up)`;
}

/**
 * Check a TTL in ms: a finite number in [`MIN_TTL_MS`, `maxMs`]; non-integers are rounded up.
 * @throws InvalidArgumentError stating the rule and the value received.
 */
export function validateTtl(value: unknown, argument = 'ttlMs', maxMs = MAX_TIMER_MS): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < MIN_TTL_MS || value > maxMs) {
    throw new InvalidArgumentError(argument, ttlRule(maxMs), value);
  }
  return Math.ceil(value);
}

function validateWait(value: unknown): number {
  if (value === Number.POSITIVE_INFINITY) return value;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > MAX_TIMER_MS) {
    throw new InvalidArgumentError(
      'waitMs',
      `a number of milliseconds in [0, ${MAX_TIMER_MS}] or Infinity`,
      value,
    );
  }
  return value;
}

function validateMode(value: unknown): LockMode {
  if (value !== 'write' && value !== 'read') {
    throw new InvalidArgumentError('mode', "'write' or 'read'", value);
  }
  return value;
}

function validateBoolean(value: unknown, argument: string): boolean {
  if (typeof value !== 'boolean') throw new InvalidArgumentError(argument, 'a boolean', value);
  return value;
}

function validatePositive(value: unknown, argument: string, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    throw new InvalidArgumentError(argument, `a number in [${min}, ${max}]`, value);
  }
  return value;
}

const RETRY_OPTION_NAMES = new Set(['initialDelayMs', 'maxDelayMs', 'factor']);

function validateRetry(value: unknown, base: Required<RetryOptions>): Required<RetryOptions> {
  if (value === undefined) return base;
  if (!isOptionsObject(value)) {
    throw new InvalidArgumentError(
      'retry',
      'an object { initialDelayMs, maxDelayMs, factor }',
      value,
    );
  }
  checkOptionNames(value, RETRY_OPTION_NAMES, 'retry');
  const r = value as RetryOptions;
  const initialDelayMs = validatePositive(
    r.initialDelayMs ?? base.initialDelayMs,
    'retry.initialDelayMs',
    1,
    MAX_TIMER_MS,
  );
  const maxDelayMs = validatePositive(
    r.maxDelayMs ?? Math.max(base.maxDelayMs, initialDelayMs),
    'retry.maxDelayMs',
    initialDelayMs,
    MAX_TIMER_MS,
  );
  const factor = validatePositive(r.factor ?? base.factor, 'retry.factor', 1, 100);
  return { initialDelayMs, maxDelayMs, factor };
}

const LOCK_OPTION_NAMES = new Set([
  'ttlMs',
  'waitMs',
  'autoRenew',
  'maxHoldMs',
  'reentrant',
  'mode',
  'signal',
  'retry',
  'session',
  'lockDelayMs',
]);

/**
 * Merge per-call options over a base (already resolved) and validate the result.
 * @throws InvalidArgumentError on an unknown option name or a value out of range.
 */
export function resolveLockOptions(
  base: ResolvedLockOptions,
  overrides: unknown,
  allowed: ReadonlySet<string> = LOCK_OPTION_NAMES,
): ResolvedLockOptions {
  if (overrides === undefined) return base;
  if (!isOptionsObject(overrides)) {
    throw new InvalidArgumentError('options', 'an options object', overrides);
  }
  checkOptionNames(overrides, allowed);
  const o = overrides as LockOptions;
  const ttlMs = o.ttlMs === undefined ? base.ttlMs : validateTtl(o.ttlMs);
  const maxHoldMs =
    o.maxHoldMs === undefined ? base.maxHoldMs : validateTtl(o.maxHoldMs, 'maxHoldMs');
  const signal = o.signal ?? base.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', 'an AbortSignal', signal);
  }
  const session = o.session ?? base.session;
  if (o.session !== undefined) validateSessionOptions(o);
  const mode = o.mode === undefined ? base.mode : validateMode(o.mode);
  const lockDelayMs =
    o.lockDelayMs === undefined ? base.lockDelayMs : validateLockDelay(o.lockDelayMs);
  if (o.lockDelayMs !== undefined && lockDelayMs > 0 && mode === 'read') {
    throw new InvalidArgumentError(
      'lockDelayMs',
      '0 with a read lock (only exclusive grants carry a lock-delay)',
      lockDelayMs,
    );
  }
  return {
    ttlMs,
    waitMs: o.waitMs === undefined ? base.waitMs : validateWait(o.waitMs),
    autoRenew:
      o.autoRenew === undefined ? base.autoRenew : validateBoolean(o.autoRenew, 'autoRenew'),
    maxHoldMs,
    reentrant:
      o.reentrant === undefined ? base.reentrant : validateBoolean(o.reentrant, 'reentrant'),
    mode,
    signal,
    retry: validateRetry(o.retry, base.retry),
    session,
    lockDelayMs,
  };
}

/** A lock-delay: an integer number of ms from 0 to `MAX_LOCK_DELAY_MS`. */
function validateLockDelay(value: unknown): number {
  if (
    typeof value !== 'number' ||
    !Number.isInteger(value) ||
    value < 0 ||
    value > MAX_LOCK_DELAY_MS
  ) {
    throw new InvalidArgumentError(
      'lockDelayMs',
      `an integer number of milliseconds from 0 to ${MAX_LOCK_DELAY_MS}`,
      value,
    );
  }
  return value;
}

/**
 * A session's TTL applies to its locks, and it keeps them alive. (That `session` is a `Session`
 * of this locker is checked by `Locker.lock`, which knows its sessions.)
 */
function validateSessionOptions(o: LockOptions): void {
  if (o.ttlMs !== undefined) {
    throw new InvalidArgumentError(
      'ttlMs',
      "no ttlMs with a session (the session's TTL applies)",
      o.ttlMs,
    );
  }
  if (o.autoRenew === false) {
    throw new InvalidArgumentError(
      'autoRenew',
      'true with a session (the session keeps its locks alive)',
      false,
    );
  }
}

/** The defaults as resolved options. */
export const DEFAULT_LOCK_OPTIONS: ResolvedLockOptions = Object.freeze({
  ttlMs: DEFAULTS.ttlMs,
  waitMs: DEFAULTS.waitMs,
  autoRenew: DEFAULTS.autoRenew,
  maxHoldMs: undefined,
  reentrant: DEFAULTS.reentrant,
  mode: 'write',
  signal: undefined,
  retry: DEFAULTS.retry,
  session: undefined,
  lockDelayMs: 0,
});

/**
 * Validate locker options: lock defaults plus `driftFactor`. (That the default `ttlMs` is longer
 * than its drift allowance is checked by `createLocker`, with the drift math of `core/clock`.)
 * @throws InvalidArgumentError
 */
export function resolveLockerOptions(options: unknown): {
  defaults: ResolvedLockOptions;
  driftFactor: number;
  name: string | undefined;
} {
  if (options !== undefined && !isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an options object', options);
  }
  const o = (options ?? {}) as LockerOptions & { signal?: unknown; session?: unknown };
  for (const perLock of ['signal', 'session'] as const) {
    if (o[perLock] !== undefined) {
      throw new InvalidArgumentError(
        `options.${perLock}`,
        'a per-lock option, not a locker option',
        perLock,
      );
    }
  }
  const { driftFactor: factor, name, ...lock } = o;
  const defaults = resolveLockOptions(DEFAULT_LOCK_OPTIONS, lock);
  const driftFactor =
    factor === undefined ? DEFAULTS.driftFactor : validatePositive(factor, 'driftFactor', 0, 0.5);
  if (name !== undefined && (typeof name !== 'string' || name.length === 0 || name.length > 200)) {
    throw new InvalidArgumentError('name', 'a string of 1 to 200 characters', name);
  }
  return { defaults, driftFactor, name };
}
