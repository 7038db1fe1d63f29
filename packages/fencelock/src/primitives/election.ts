/**
 * Leader election: a queue of candidates on one name whose oldest live candidate leads, with the
 * leader's fencing token as its term. The shape of etcd's `concurrency.Election` (Campaign,
 * Proclaim, Resign, Leader, Observe) and of Curator's `LeaderLatch`; unlike theirs, the term is a
 * fencing token that resources can check (`createFence`, the fenced stores of `fencelock/fencing`),
 * strictly greater than every earlier leader's of that name.
 *
 * An election is a lock on the name's election object (a different object on the engine from
 * the lock and the semaphore of the same name): a campaign waits in that object's line as an
 * acquire does (in arrival order where the engine keeps a line), its grant is the leadership, a
 * crashed or paused leader's grant ends by its TTL or its session, and the next candidate in
 * line is granted. The engine keeps the leader's value with the grant (`proclaim` replaces it by
 * compare-and-set of owner and term), so `leader()` and the observers read owner, term and value
 * in one engine operation.
 */

import type { Backend, ElectedLeader, ReleaseOutcome } from '../core/backend.js';
import { assertElectionGranted, type Candidacy, validateElectionValue } from '../core/candidacy.js';
import { heldLease, holdWhile } from '../core/hold.js';
import { Lease, type LeaseContext, type LeaseGrant } from '../core/lease.js';
import type { Lock } from '../core/lock.js';
import { InvalidArgumentError, NotLockOwnerError } from '../errors.js';
import { type LockOptions, type ResolvedLockOptions, resolveLockOptions } from '../options.js';
import { checkObserveOptions, type ObserveOptions, observeLeader } from './election-observer.js';

/** Options of a campaign: a lock's, without reentrancy or read mode. */
export type CampaignOptions = Omit<LockOptions, 'reentrant' | 'mode'>;

/** The option names a campaign takes. */
export const CAMPAIGN_OPTION_NAMES: ReadonlySet<string> = new Set([
  'ttlMs',
  'waitMs',
  'autoRenew',
  'maxHoldMs',
  'signal',
  'retry',
  'session',
  'lockDelayMs',
]);

/**
 * A leader of an election as `leader()` and `observe()` report it: owner id, term (the fencing
 * token of its grant), the value it published, and the TTL its grant had left when read, ms.
 */
export type ElectionLeader = ElectedLeader;

/** What an election needs from its locker. */
export interface ElectionContext {
  /** A lock handle on the election's name for a campaign, options resolved. */
  readonly handle: (options: ResolvedLockOptions, candidacy: Candidacy) => Lock;
  /** The locker's backend (loaded on first use). */
  readonly backend: () => Promise<Backend>;
  /** Aborted when the locker closes: observers end. */
  readonly closing: AbortSignal;
}

/**
 * The lease of a leader: `fencingToken` is its term (pass it to the resources it writes),
 * `signal` aborts when the leadership is lost, `proclaim` replaces the published value, and
 * `resign` (or `release`, or `await using`) hands over to the next candidate at once.
 */
export class Leadership extends Lease {
  readonly #backend: Backend;
  #value: string;

  /** @internal made by the election when a campaign is granted. */
  constructor(ctx: LeaseContext, grant: LeaseGrant, value: string) {
    super(ctx, grant);
    this.#backend = ctx.backend;
    this.#value = value;
  }

  /** The leader's term: its fencing token, strictly greater than every earlier leader's. */
  get term(): bigint {
    return this.fencingToken;
  }

  /** The value this leader published last (its campaign's, or its last `proclaim`'s). */
  get value(): string {
    return this.#value;
  }

  /**
   * Publish a new value while leading: stored by compare-and-set of owner and term on the
   * engine, so a leader that lost its grant cannot overwrite its successor's (etcd's Proclaim).
   * Observers see it as a change with the same term.
   * @param value a well-formed string without U+0000, at most 64 KiB of UTF-8.
   * @throws InvalidArgumentError for a bad value, before any network call.
   * @throws NotLockOwnerError after `resign()`.
   * @throws LockLostError when the leadership was lost, or the engine no longer has it (the
   *   signal then aborts).
   * @throws BackendError when the engine cannot answer.
   */
  async proclaim(value: string): Promise<void> {
    const checked = validateElectionValue(value);
    if (this.signal.aborted) throw this.signal.reason;
    if (this.holdCount === 0) {
      throw new NotLockOwnerError(this.key, 'proclaim', 'the leadership was resigned');
    }
    const outcome = await (this.#backend as Required<Backend>).proclaim(this, checked);
    if (outcome !== 'proclaimed') {
      this.lose(outcome, undefined, 'proclaim');
      throw this.signal.reason;
    }
    this.#value = checked;
  }

  /**
   * Step down: release the grant (compare-and-delete of owner and term), so that the next
   * candidate in line leads at once (etcd's Resign). The same as `release()`.
   * @returns as `release()`.
   */
  resign(): Promise<ReleaseOutcome> {
    return this.release();
  }
}

/**
 * A leader election on one name. Create with `locker.election(name)`; it holds no state of its
 * own and makes no network call until used.
 */
export class Election {
  /** The election's name (its object on the engine is apart from the lock of that key). */
  readonly name: string;
  readonly #defaults: ResolvedLockOptions;
  readonly #ctx: ElectionContext;

  /** @internal use `locker.election()`. */
  constructor(name: string, defaults: ResolvedLockOptions, ctx: ElectionContext) {
    this.name = name;
    this.#defaults = defaults;
    this.#ctx = ctx;
  }

  /**
   * Stand as a candidate publishing `value`, and wait until this candidate leads (by default
   * without a time limit, as etcd's Campaign): the oldest live candidate leads, the others wait
   * in line, woken by the engine when the leader resigns or its grant ends.
   * @param value what the leader publishes (an address, an id): a well-formed string without
   *   U+0000, at most 64 KiB of UTF-8.
   * @param options a lock's options over the locker's (`ttlMs`, `waitMs`, `autoRenew`,
   *   `maxHoldMs`, `signal`, `retry`, `session`).
   * @returns the `Leadership` (a `Lease` whose fencing token is the term).
   * @throws InvalidArgumentError for a bad value or option, or on a store without elections,
   *   before any network call.
   * @throws LockTimeoutError when `waitMs` passes or `signal` aborts first.
   * @throws BackendError (QuorumError on Redlock) when the engine cannot answer.
   */
  campaign(value: string, options?: CampaignOptions): Promise<Leadership> {
    try {
      return this.#handle(value, options).acquire() as Promise<Leadership>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * One attempt: the leadership, or null when another candidate leads or others wait first.
   * @throws as `campaign`, except LockTimeoutError.
   */
  tryCampaign(value: string, options?: CampaignOptions): Promise<Leadership | null> {
    try {
      return this.#handle(value, options).tryAcquire() as Promise<Leadership | null>;
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Campaign, run `fn(leadership)` while leading, then resign (also when `fn` throws): Curator's
   * `LeaderSelector.takeLeadership`.
   * @returns what `fn` returns.
   * @throws LockLostError as soon as the leadership is lost (`leadership.signal` aborts with
   *   it; `fn` should watch it and stop), or when `fn` finished but the leadership ran out.
   * @throws `fn`'s own error, rethrown after resigning; as `campaign` otherwise.
   */
  async withLeadership<T>(
    value: string,
    fn: (leadership: Leadership) => Promise<T> | T,
    options?: CampaignOptions,
  ): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'a function', fn);
    const leadership = (await this.#handle(value, options).acquire()) as Leadership;
    return holdWhile(heldLease(leadership), () => fn(leadership));
  }

  /**
   * The current leader as the engine holds it (one engine read), or null when nobody leads.
   * @throws InvalidArgumentError on a store without elections.
   * @throws BackendError when the engine cannot answer.
   */
  async leader(): Promise<ElectionLeader | null> {
    const backend = await this.#ctx.backend();
    assertElectionGranted(backend);
    return (backend as Required<Backend>).leader(this.name);
  }

  /**
   * The election's leaders as they change: first the current one (or null when nobody leads),
   * then each change — a new leader (a greater term), a new value of the same leader, or null
   * when the leader left and nobody leads yet. Event-driven where the engine notifies (how per
   * engine in docs/primitives/election.md); terms never go back. Changes that follow each other
   * faster than one engine read may arrive as their last state only. Ends when `signal` aborts,
   * the caller breaks, or the locker closes.
   *
   * ```ts
   * for await (const leader of election.observe({ signal })) console.log(leader?.value);
   * ```
   * @throws InvalidArgumentError at once for bad options; at the first iteration on a store
   *   without elections. BackendError when the engine cannot answer (the iteration ends).
   */
  observe(options?: ObserveOptions): AsyncIterable<ElectionLeader | null> {
    const { signal } = checkObserveOptions(options);
    return observeLeader(this.#ctx.backend, this.name, signal, this.#ctx.closing);
  }

  #handle(value: string, options: CampaignOptions | undefined): Lock {
    const checked = validateElectionValue(value);
    const resolved = resolveLockOptions(this.#defaults, options, CAMPAIGN_OPTION_NAMES);
    return this.#ctx.handle(resolved, {
      value: checked,
      lease: (ctx, grant) => new Leadership(ctx, grant, checked),
    });
  }
}
