/**
 * Every error fencelock throws. Each class has a stable `code` (safe to match on across
 * versions), keeps the engine's error as `cause`, and carries context fields such as `key`.
 * Messages start with the domain (`fencelock:`), as etcd's sentinel errors do.
 */
import { isStoreUrl, redactStoreUrl, redactStoreUrlsIn } from './redact.js';

/** Stable machine-readable codes, one per error class. */
export type FencelockErrorCode =
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_LOCK_TIMEOUT'
  | 'ERR_LOCK_LOST'
  | 'ERR_NOT_LOCK_OWNER'
  | 'ERR_QUORUM'
  | 'ERR_BACKEND'
  | 'ERR_STALE_TOKEN'
  | 'ERR_PERMITS_MISMATCH';

/** Base class of every fencelock error. Check with `instanceof` or by `code`. */
export class FencelockError extends Error {
  /** Stable code of this error class. */
  readonly code: FencelockErrorCode;

  constructor(code: FencelockErrorCode, message: string, options?: { cause?: unknown }) {
    super(`fencelock: ${message}`, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/** Longest argument name an `InvalidArgumentError` repeats, characters. */
const MAX_ARGUMENT_CHARS = 100;

/**
 * Bad input, found before any network call. `argument` names the offending argument,
 * `allowed` describes the accepted range and `received` is what was passed.
 */
export class InvalidArgumentError extends FencelockError {
  readonly argument: string;
  readonly allowed: string;
  /** The value passed (objects and arrays as a short description). */
  readonly received: unknown;

  constructor(argument: string, allowed: string, received: unknown) {
    // A store URL's password never reaches a message or log line (`redactStoreUrlsIn`).
    const shown =
      typeof received !== 'string'
        ? received
        : // A whole store URL (quotes and spaces in a password included), or URLs in a text.
          isStoreUrl(received)
          ? redactStoreUrl(received)
          : redactStoreUrlsIn(received);
    // An argument's name can carry input too (`store parameter <name>`): cut and redacted.
    const redacted = redactStoreUrlsIn(argument);
    const named =
      redacted.length > MAX_ARGUMENT_CHARS ? `${redacted.slice(0, MAX_ARGUMENT_CHARS)}…` : redacted;
    super(
      'ERR_INVALID_ARGUMENT',
      `invalid ${named}: expected ${allowed}, received ${describe(shown)}`,
    );
    this.argument = named;
    this.allowed = allowed;
    // Objects are described, not kept: a whole client object would flood every log line.
    this.received = typeof shown === 'object' && shown !== null ? describe(shown) : shown;
  }
}

/** `acquire()` waited `waitMs` (or was aborted by its signal) without being granted the lock. */
export class LockTimeoutError extends FencelockError {
  readonly key: string;
  readonly waitedMs: number;
  /**
   * False when the acquire ran out of time with none of its attempts answered: the engine may be
   * unreachable or overloaded rather than the lock busy (e.g. PostgreSQL retrying a refused
   * connection within `commandTimeoutMs`). True otherwise, cancellations included.
   */
  readonly engineAnswered: boolean;
  /**
   * True when an attempt found the key held by another owner: the lock was busy. False when it
   * timed out for another reason (no answer, a grant that came too late to be of use), and when
   * it was cancelled (abort, locker closed, session ended): those do not say.
   */
  readonly sawHolder: boolean;

  constructor(
    key: string,
    waitedMs: number,
    options?: { cause?: unknown; reason?: string; engineAnswered?: boolean; sawHolder?: boolean },
  ) {
    super(
      'ERR_LOCK_TIMEOUT',
      `acquire of "${key}" ${options?.reason ?? 'timed out'} after ${Math.round(waitedMs)} ms`,
      options,
    );
    this.key = key;
    this.waitedMs = waitedMs;
    this.engineAnswered = options?.engineAnswered ?? true;
    this.sawHolder = options?.sawHolder ?? false;
  }
}

/** Why a lease was lost. */
export type LockLostReason =
  | 'expired' // could not be renewed before its validity ran out
  | 'not-owner' // the engine reports another owner holds the key
  | 'not-held' // the engine no longer has the key
  | 'max-hold' // the maxHoldMs cap was reached
  | 'session-lost'; // the engine session carrying the lease ended

/**
 * A lease ended while its holder still believed it held the lock. Used as `lease.signal.reason`
 * and thrown by `extend()` and `withLock()`.
 */
export class LockLostError extends FencelockError {
  readonly key: string;
  readonly fencingToken: bigint;
  readonly reason: LockLostReason;

  constructor(
    key: string,
    fencingToken: bigint,
    reason: LockLostReason,
    options?: { cause?: unknown; operation?: string },
  ) {
    const op = options?.operation ? `${options.operation}: ` : '';
    super(
      'ERR_LOCK_LOST',
      `${op}lease on "${key}" (token ${fencingToken}) lost: ${reason}`,
      options,
    );
    this.key = key;
    this.fencingToken = fencingToken;
    this.reason = reason;
  }
}

/** An operation needed the caller to own the lease, and it does not. */
export class NotLockOwnerError extends FencelockError {
  readonly key: string;
  readonly operation: string;

  constructor(key: string, operation: string, detail: string) {
    super('ERR_NOT_LOCK_OWNER', `${operation} of "${key}": ${detail}`);
    this.key = key;
    this.operation = operation;
  }
}

/**
 * A semaphore acquire asked for `requested` permits on a key whose holders or waiters use
 * `inUse`: the engine granted nothing and kept no entry of this contender. Users of one key must
 * agree on its permit count; change it only once the key is idle (no holder, nobody waiting).
 */
export class PermitsMismatchError extends FencelockError {
  readonly key: string;
  readonly requested: number;
  readonly inUse: number;

  constructor(key: string, requested: number, inUse: number) {
    super(
      'ERR_PERMITS_MISMATCH',
      `semaphore "${key}" asked for with ${requested} permits, but its holders and waiters use ${inUse}`,
    );
    this.key = key;
    this.requested = requested;
    this.inUse = inUse;
  }
}

/** Outcome of one node in a quorum operation (Redlock). */
export interface NodeOutcome {
  readonly node: string;
  readonly outcome: 'ok' | 'locked' | 'error' | 'timeout';
  readonly error?: unknown;
}

/** A quorum operation (Redlock) did not reach a majority. `nodes` lists every node's outcome. */
export class QuorumError extends FencelockError {
  readonly key: string;
  readonly nodes: readonly NodeOutcome[];

  constructor(key: string, operation: string, nodes: readonly NodeOutcome[]) {
    const summary = nodes
      .map((n) => {
        const why = n.error instanceof BackendError ? n.error.unreachable : undefined;
        return `${n.node}=${n.outcome}${why ? ` (${why.replace('-', ' ')})` : ''}`;
      })
      .join(', ');
    super('ERR_QUORUM', `${operation} of "${key}" reached no quorum (${summary})`);
    this.key = key;
    this.nodes = nodes;
  }
}

/**
 * Why an engine could not be used at all: it refused the connection (nothing listens there), the
 * connection closed before any answer, or nothing answered within `afterMs`.
 */
export type Unreachable =
  | { readonly address: string; readonly reason: 'connection-refused' | 'connection-closed' }
  | { readonly address: string; readonly reason: 'no-answer'; readonly afterMs: number };

/**
 * The engine was unreachable or answered with a protocol error; the engine's error is `cause`.
 * An unreachable engine is named in one form on every backend:
 * `<backend> <operation> failed: <host:port> unreachable: connection refused` (or
 * `connection closed`, or `no answer within <N> ms`), with `address` and `unreachable` set.
 */
export class BackendError extends FencelockError {
  readonly backend: string;
  readonly operation: string;
  /** The store's address (`host:port`, several comma-separated; never a password), when known. */
  readonly address: string | undefined;
  /** Set when the engine could not be reached at all (see the class comment). */
  readonly unreachable: Unreachable['reason'] | undefined;

  constructor(backend: string, operation: string, cause: unknown, unreachable?: Unreachable) {
    super(
      'ERR_BACKEND',
      `${backend} ${operation} failed: ${unreachable ? describeUnreachable(unreachable) : messageOf(cause)}`,
      { cause },
    );
    this.backend = backend;
    this.operation = operation;
    this.address = unreachable?.address;
    this.unreachable = unreachable?.reason;
  }
}

function describeUnreachable(u: Unreachable): string {
  const why =
    u.reason === 'no-answer'
      ? `no answer within ${Math.round(u.afterMs)} ms`
      : u.reason === 'connection-refused'
        ? 'connection refused'
        : 'connection closed';
  return `${u.address} unreachable: ${why}`;
}

/**
 * A fencing guard refused a write: the resource has already seen `currentToken`, newer than the
 * writer's `attemptedToken` (Kleppmann, "How to do distributed locking", 2016).
 */
export class StaleTokenError extends FencelockError {
  readonly resource: string;
  readonly attemptedToken: bigint;
  readonly currentToken: bigint;

  constructor(resource: string, attemptedToken: bigint, currentToken: bigint) {
    super(
      'ERR_STALE_TOKEN',
      `write to "${resource}" rejected: fencing token ${attemptedToken} is older than ${currentToken}`,
    );
    this.resource = resource;
    this.attemptedToken = attemptedToken;
    this.currentToken = currentToken;
  }
}

function describe(value: unknown): string {
  if (typeof value === 'string')
    return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' || typeof value === 'boolean' || value == null)
    return String(value);
  if (typeof value === 'function') return 'a function';
  return Array.isArray(value) ? 'an array' : `an object`;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
