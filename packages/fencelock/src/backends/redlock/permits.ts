/**
 * A semaphore's permits on Redlock (`AttemptRequest.permits`, `LeaseRef.permits`): every
 * operation runs the single-node backend's semaphore script on every node
 * (`semaphore-acquire.lua`, `-renew`, `-release`, `-abandon`, with its keys, `semaphoreKeys`),
 * and the answers are voted on with the permit quorum q = ⌊nodes · permits / (permits + 1)⌋ + 1
 * (`permitQuorumOf`), not a majority: each node holds at most `permits` live permits, so
 * permits + 1 holders on q nodes each would need more than all the nodes hold.
 *
 * - Acquire: granted on q nodes; the token is the highest the granting nodes issued, settled on
 *   q of them (`settle-permit-token.lua`) when fewer agree on it (nodes' tokens come from their
 *   clocks, so a grant nearly always takes that second round). A lost vote withdraws the permit
 *   on every node; a waiter keeps its place in every node's line with its ticket
 *   (`withdraw-permit-on-node.lua`); a single attempt leaves nothing. Refused on more than
 *   nodes − q nodes for another permit count: `PermitsMismatchError`, and nothing stays. Fewer
 *   than q answers: `no-quorum`.
 * - Waiting: a release on a node publishes the ids of the waiters the freed permit lets in on
 *   the semaphore's channel there; each waiter listens on every node (`LineWaits`).
 * - Renew: renewed on q nodes. Release: `released` once this permit is deleted on nodes − q + 1
 *   (no quorum can hold it then); the release of one permit (1 permit, odd nodes) is the lock's
 *   majority.
 */
import type {
  AttemptRequest,
  AttemptResult,
  LeaseRef,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { PermitsMismatchError, QuorumError } from '../../errors.js';
import { fenceTtlMs } from '../redis/fence-counter.js';
import { type SemaphoreKeys, semaphoreKeys } from '../redis/lock-keys.js';
import {
  semaphoreAbandonScript,
  semaphoreAcquireScript,
  semaphoreReleaseScript,
  semaphoreRenewScript,
} from '../redis/scripts.js';
import { REDLOCK_ENTRY_TTL_MS } from '../waiting-line.js';
import type { LineWaits } from './line-waits.js';
import { type NodeResult, outcomesOf, permitQuorumOf, type Vote } from './quorum.js';
import type { RestartWatch } from './restarts.js';
import { settlePermitTokenScript, withdrawPermitOnNodeScript } from './scripts.js';
import type { NodeVoter } from './voter.js';

/** One node's answer to `semaphore-acquire.lua`: granted, not yet, or another count in use. */
type AcquireReply = [1, string] | [0, number] | [-1, number];

/** The permit operations of one Redlock backend, on its voter, lines and restart watch. */
export class RedlockPermits {
  readonly #voter: NodeVoter;
  readonly #line: LineWaits;
  readonly #restarts: RestartWatch;
  readonly #prefix: string;
  /** Per-node timeout of a withdrawal, ms. */
  readonly #nodeTimeoutMs: number;
  /** Per-node timeout of a release, which grants nothing, ms. */
  readonly #releaseTimeoutMs: number;

  constructor(
    voter: NodeVoter,
    line: LineWaits,
    restarts: RestartWatch,
    settings: {
      readonly prefix: string;
      readonly nodeTimeoutMs: number;
      readonly releaseTimeoutMs: number;
    },
  ) {
    this.#voter = voter;
    this.#line = line;
    this.#restarts = restarts;
    this.#prefix = settings.prefix;
    this.#nodeTimeoutMs = settings.nodeTimeoutMs;
    this.#releaseTimeoutMs = settings.releaseTimeoutMs;
  }

  /** The Redis keys of semaphore `key` on every node (as the single-node backend's). */
  keysOf(key: string): SemaphoreKeys {
    return semaphoreKeys(this.#prefix, key);
  }

  /** Votes a permit of a semaphore of `permits` needs (`permitQuorumOf`). */
  quorumFor(permits: number): number {
    return permitQuorumOf(this.#voter.nodes.length, permits);
  }

  /**
   * Acquire a permit on every node; granted on the permit quorum, else withdrawn everywhere.
   * @returns `{ granted: false, reason: 'no-quorum', error: QuorumError }` when fewer than the
   *   quorum answered, or the token could not be settled on it.
   * @throws PermitsMismatchError when more than nodes − quorum nodes refused for another count.
   */
  async attempt(request: AttemptRequest, permits: number): Promise<AttemptResult> {
    const k = this.keysOf(request.key);
    const quorum = this.quorumFor(permits);
    const waiting = request.willWait !== false;
    // A release message that names this owner while the vote runs is kept for its next wait.
    if (waiting) this.#line.inLine(k.channel, request.owner);
    const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.fence] as const;
    const args = [
      request.owner,
      request.ttlMs,
      permits,
      waiting ? REDLOCK_ENTRY_TTL_MS : 0,
      fenceTtlMs(request.ttlMs),
      waiting ? this.#line.ticketOf(request) : '0',
    ] as const;
    const acquiring = this.#voter.run(
      this.#voter.timeoutFor(request.ttlMs),
      (client) => semaphoreAcquireScript.run(client, keys, args),
      (results) => this.#voter.decided(quorum, grantsOf(results).length, results.length),
    );
    const early = await acquiring.early;
    if (grantsOf(early).length >= quorum) return this.#granted(request, permits, acquiring, early);
    const all = await acquiring.all;
    const inUse = all.flatMap((r) => (r.status === 'ok' && r.value[0] === -1 ? [r.value[1]] : []));
    if (inUse.length > this.#voter.nodes.length - quorum) {
      // Another count is in use on too many nodes for a quorum: nothing of this attempt stays.
      this.#line.leftLine(k.channel, request.owner);
      await this.#withdraw(request, permits, 'everything').catch(() => undefined);
      throw new PermitsMismatchError(request.key, permits, Number(inUse[0]));
    }
    // No quorum: withdraw the permits on every node (where the reply was lost too) before the
    // core waits; a waiter keeps its place in the lines.
    await this.#withdraw(request, permits, waiting ? 'grant' : 'everything').catch(() => undefined);
    return this.#line.refused(all, quorum, 'acquire permit', request, k.channel, waiting);
  }

  /**
   * The permit quorum granted: the highest token of the granting nodes, settled on a quorum of
   * them unless a quorum issued it already.
   */
  async #granted(
    request: AttemptRequest,
    permits: number,
    acquiring: Vote<AcquireReply>,
    early: readonly NodeResult<AcquireReply>[],
  ): Promise<AttemptResult> {
    const grants = grantsOf(early);
    const token = maxOf(grants.map((g) => g.token));
    const settling = grants.filter((g) => g.token === token).length < this.quorumFor(permits);
    if (settling) {
      const unsettled = await this.#settle(request, permits, token);
      if (unsettled) return { granted: false, reason: 'no-quorum', error: unsettled };
    }
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    void acquiring.all.then((all) => this.#afterGrant(request, token, all, settling));
    const on = (results: readonly NodeResult<AcquireReply>[]) =>
      grantsOf(results).map((g) => g.node);
    this.#restarts.granted(request.owner, request.key, request.ttlMs, on(early));
    void acquiring.all.then((all) => this.#restarts.alsoOn(request.owner, on(all)));
    return { granted: true, token, ttlMs: request.ttlMs };
  }

  /**
   * Once every node answered a granted attempt, in the background: nodes that granted after the
   * vote was decided, or did not answer in time (the script may still run there, before anything
   * sent after it), carry their own token: the combined one is written there (never withdrawing
   * the permit), unless the settle round ran (`settled`: it was sent to every node after the
   * grant, so it ran there after it). Nodes that did not grant a waiter keep its line entry,
   * which would stand ahead of the others there until it expires: it is taken out. Never rejects.
   */
  async #afterGrant(
    request: AttemptRequest,
    token: bigint,
    all: readonly NodeResult<AcquireReply>[],
    settled: boolean,
  ): Promise<void> {
    if (this.#voter.closed) return;
    const late =
      !settled &&
      (all.some((r) => r.status === 'timeout') || grantsOf(all).some((g) => g.token !== token));
    const queuedOn = new Set(
      all.flatMap((r) =>
        r.status === 'timeout' || (r.status === 'ok' && r.value[0] === 0) ? [r.node] : [],
      ),
    );
    const k = this.keysOf(request.key);
    const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
    await Promise.all([
      late ? this.#settleVote(request, token, () => false).all : undefined,
      request.willWait !== false && queuedOn.size > 0
        ? this.#voter.run(
            this.#nodeTimeoutMs,
            (client, node) =>
              queuedOn.has(node.name)
                ? semaphoreAbandonScript.run(client, keys, [request.owner, '1'])
                : Promise.resolve(0 as const),
            () => false,
          ).all
        : undefined,
    ]).catch(() => undefined);
  }

  /**
   * Write the combined token on every node where this owner holds a live permit; needs the
   * permit quorum.
   * @returns undefined when settled, else the failed vote (the permit is then withdrawn).
   */
  async #settle(
    request: AttemptRequest,
    permits: number,
    token: bigint,
  ): Promise<QuorumError | undefined> {
    const quorum = this.quorumFor(permits);
    const settled = (r: NodeResult<1 | 0>) => r.status === 'ok' && r.value === 1;
    const settling = this.#settleVote(request, token, (results) =>
      this.#voter.decided(quorum, results.filter(settled).length, results.length),
    );
    const early = await settling.early;
    if (early.filter(settled).length >= quorum) return undefined;
    const all = await settling.all;
    const what = request.willWait !== false ? 'grant' : 'everything';
    await this.#withdraw(request, permits, what).catch(() => undefined);
    return new QuorumError(
      request.key,
      'acquire permit (settle token)',
      outcomesOf(all, (v) => v === 0),
    );
  }

  /** Run the settle script on every node (1 where this owner's permit now carries `token`). */
  #settleVote(
    request: AttemptRequest,
    token: bigint,
    decided: (results: readonly NodeResult<1 | 0>[]) => boolean,
  ): Vote<1 | 0> {
    const k = this.keysOf(request.key);
    return this.#voter.run(
      this.#voter.timeoutFor(request.ttlMs),
      (client) =>
        settlePermitTokenScript.run(
          client,
          [k.holders, k.tokens, k.fence],
          [request.owner, String(token), fenceTtlMs(request.ttlMs)],
        ),
      decided,
    );
  }

  /**
   * Extend a permit on every node; renewed on the permit quorum.
   * @throws QuorumError when fewer than the quorum answered.
   */
  async renew(lease: LeaseRef, permits: number, ttlMs: number): Promise<RenewResult> {
    const k = this.keysOf(lease.key);
    const quorum = this.quorumFor(permits);
    const renewed = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value === 1;
    const renewing = this.#voter.run(
      this.#voter.timeoutFor(ttlMs),
      (client) =>
        semaphoreRenewScript.run(
          client,
          [k.holders, k.tokens, k.permits],
          [lease.owner, String(lease.fencingToken), ttlMs],
        ),
      (results) => this.#voter.decided(quorum, results.filter(renewed).length, results.length),
    );
    if ((await renewing.early).filter(renewed).length >= quorum) {
      this.#restarts.renewed(lease.owner, ttlMs);
      return { ok: true, ttlMs };
    }
    const all = await renewing.all;
    const answers = answersOf(all);
    if (answers.length < quorum) {
      throw new QuorumError(
        lease.key,
        'renew permit',
        outcomesOf(all, (v) => v === -1),
      );
    }
    return { ok: false, reason: answers.includes(-1) ? 'not-owner' : 'not-held' };
  }

  /**
   * Compare-and-delete a permit on every node, each waking the waiters its freed permit lets in.
   * `released` once deleted on nodes − quorum + 1 (no quorum can hold it then).
   * @throws QuorumError when fewer than that answered.
   */
  async release(lease: LeaseRef, permits: number): Promise<ReleaseOutcome> {
    const k = this.keysOf(lease.key);
    const enough = this.#voter.nodes.length - this.quorumFor(permits) + 1;
    const released = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value === 1;
    const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
    const early = await this.#voter.run(
      this.#releaseTimeoutMs,
      (client) =>
        semaphoreReleaseScript.run(client, keys, [lease.owner, String(lease.fencingToken)]),
      // Done once enough deleted it (the rest finish in the background); any other verdict
      // waits for every node, so that a QuorumError is only for want of answers.
      (results) => results.filter(released).length >= enough,
    ).early;
    this.#restarts.ended(lease.owner);
    const answers = answersOf(early);
    if (answers.filter((a) => a === 1).length >= enough) return 'released';
    if (answers.length < enough) {
      throw new QuorumError(
        lease.key,
        'release permit',
        outcomesOf(early, (v) => v === -1),
      );
    }
    return answers.includes(-1) ? 'not-owner' : 'not-held';
  }

  /**
   * Drop this owner's permit on every node, whatever its token, and its line entries.
   * @throws QuorumError when no node answered.
   */
  async abandon(request: AttemptRequest, permits: number): Promise<void> {
    this.#restarts.ended(request.owner);
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    await this.#withdraw(request, permits, 'everything');
  }

  /**
   * Take this owner out of the semaphore's line on every node, leaving any permit it holds.
   * @throws QuorumError when no node answered.
   */
  async leaveQueue(request: AttemptRequest, permits: number): Promise<void> {
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    await this.#withdraw(request, permits, 'place');
  }

  /**
   * Withdraw this owner on every node: `grant` drops its permit and leaves it standing in the
   * line with its ticket (a lost vote of a waiter, `withdraw-permit-on-node.lua`); `place` takes
   * it out of the line only; `everything` does both (`semaphore-abandon.lua`). Each node wakes
   * the waiters this lets in.
   * @throws QuorumError when no node answered.
   */
  async #withdraw(
    request: AttemptRequest,
    permits: number,
    what: 'grant' | 'place' | 'everything',
  ): Promise<void> {
    const k = this.keysOf(request.key);
    const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
    const ticket = what === 'grant' ? this.#line.ticketOf(request) : '0';
    const all = await this.#voter.run(
      this.#nodeTimeoutMs,
      (client) =>
        what === 'grant'
          ? withdrawPermitOnNodeScript.run(client, keys, [
              request.owner,
              permits,
              ticket,
              REDLOCK_ENTRY_TTL_MS,
            ])
          : semaphoreAbandonScript.run(client, keys, [request.owner, what === 'place' ? '1' : '0']),
      () => false,
    ).all;
    if (!all.some((r) => r.status === 'ok')) {
      throw new QuorumError(
        request.key,
        what === 'place' ? 'leave line' : 'abandon permit',
        outcomesOf(all, () => false),
      );
    }
  }
}

/** The nodes that granted, with the token each issued. */
function grantsOf(
  results: readonly NodeResult<AcquireReply>[],
): { readonly node: string; readonly token: bigint }[] {
  return results.flatMap((r) =>
    r.status === 'ok' && r.value[0] === 1 ? [{ node: r.node, token: BigInt(r.value[1]) }] : [],
  );
}

/** The codes of the nodes that answered. */
function answersOf<T>(results: readonly NodeResult<T>[]): T[] {
  return results.flatMap((r) => (r.status === 'ok' ? [r.value] : []));
}

/** The largest of `values` (0n for none). */
function maxOf(values: readonly bigint[]): bigint {
  let max = 0n;
  for (const value of values) if (value > max) max = value;
  return max;
}
