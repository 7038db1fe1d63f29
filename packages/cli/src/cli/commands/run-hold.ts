/**
 * What `fencelock run` holds while its command runs: one lock (write or read), one permit of a
 * semaphore (`--permits`), or every key of several (`locker.acquireAll`); and what
 * `fencelock elect` holds: the leadership of an election. All behind one shape, so that the
 * supervision of the command does not care which. Every lock operation is the public Locker
 * API's.
 */
import type { Leadership, Lease, Locker, MultiLease, ReleaseOutcome } from 'fencelock';

/** How `run` asks for its keys. */
export interface HoldRequest {
  /** The keys, as given (at least one; validated). Several keys are held all or none. */
  readonly keys: readonly string[];
  /** A semaphore's permit count (one key only), or undefined for a lock. */
  readonly permits: number | undefined;
  /** `read` for a shared lock (`--read`), else `write`. */
  readonly mode: 'write' | 'read';
  readonly ttlMs: number;
  /** Lock-delay of a write lock, ms (0: none); never with `permits` or `read`. */
  readonly lockDelayMs: number;
  readonly waitMs: number;
  /** Cancels the wait (a signal sent to fencelock). */
  readonly signal: AbortSignal;
}

/** What is held: one lease or several, seen alike. */
export interface Holding {
  /** Aborts with the `LockLostError` of the first lease lost. */
  readonly signal: AbortSignal;
  /** The command's environment entries that name the keys and their fencing tokens. */
  readonly env: Readonly<Record<string, string>>;
  /** For messages: `lease on "k" (token 7)`, or every key's. */
  readonly description: string;
  /** True until `release()` was called. */
  readonly held: boolean;
  /** Release everything: `released`, or the first other outcome in key order. */
  release(): Promise<ReleaseOutcome>;
}

/** For messages: `lock "k"`, `a permit of semaphore "k"`, `locks "a", "b"`. */
export function holdLabel(request: Omit<HoldRequest, 'signal'>): string {
  const quoted = request.keys.map((key) => JSON.stringify(key)).join(', ');
  if (request.permits !== undefined) return `a permit of semaphore ${quoted}`;
  const kind = request.mode === 'read' ? 'read lock' : 'lock';
  return request.keys.length === 1 ? `${kind} ${quoted}` : `${kind}s ${quoted}`;
}

/**
 * Wait for what `request` asks for.
 * @throws as `locker.acquire`, `semaphore.acquire` or `locker.acquireAll` do.
 */
export async function acquireHold(locker: Locker, request: HoldRequest): Promise<Holding> {
  const options = {
    ttlMs: request.ttlMs,
    waitMs: request.waitMs,
    autoRenew: true,
    signal: request.signal,
  };
  const [first] = request.keys as [string];
  if (request.permits !== undefined) {
    const semaphore = locker.semaphore(first, { permits: request.permits });
    return leaseHolding(await semaphore.acquire(options));
  }
  const lockOptions = { ...options, mode: request.mode, lockDelayMs: request.lockDelayMs };
  if (request.keys.length === 1) return leaseHolding(await locker.acquire(first, lockOptions));
  return multiHolding(await locker.acquireAll(request.keys, lockOptions));
}

/**
 * A leadership as `elect` holds it while its command runs: the command gets the election's name,
 * the term (also as `FENCELOCK_TOKEN`, the fencing token, as `run` passes it) and the value it
 * published; releasing it resigns, so the next candidate leads at once.
 */
export function leadershipHolding(leadership: Leadership): Holding {
  const term = leadership.term.toString();
  return leaseHolding(leadership, {
    env: {
      FENCELOCK_ELECTION: leadership.key,
      FENCELOCK_TERM: term,
      FENCELOCK_TOKEN: term,
      FENCELOCK_LEADER_VALUE: leadership.value,
    },
    description: `leadership of election ${JSON.stringify(leadership.key)} (term ${term})`,
  });
}

/** A single lease; `shown` replaces its default environment entries and description. */
function leaseHolding(
  lease: Lease,
  shown: Pick<Holding, 'env' | 'description'> = {
    env: { FENCELOCK_KEY: lease.key, FENCELOCK_TOKEN: lease.fencingToken.toString() },
    description: `lease on ${JSON.stringify(lease.key)} (token ${lease.fencingToken})`,
  },
): Holding {
  let held = true;
  return {
    signal: lease.signal,
    env: shown.env,
    description: shown.description,
    get held() {
      return held;
    },
    release() {
      held = false;
      return lease.release();
    },
  };
}

function multiHolding(all: MultiLease): Holding {
  let held = true;
  return {
    signal: all.signal,
    env: {
      FENCELOCK_KEYS: JSON.stringify(all.keys),
      FENCELOCK_TOKENS: JSON.stringify(all.leases.map((lease) => lease.fencingToken.toString())),
    },
    description: `leases on ${all.leases.map((l) => `${JSON.stringify(l.key)} (token ${l.fencingToken})`).join(', ')}`,
    get held() {
      return held;
    },
    async release() {
      held = false;
      const outcomes = await all.release();
      return outcomes.find((outcome) => outcome !== 'released') ?? 'released';
    },
  };
}
