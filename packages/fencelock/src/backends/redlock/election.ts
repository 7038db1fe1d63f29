/**
 * Leader elections on Redlock (`AttemptRequest.election`, `LeaseRef.election`): an election is a
 * third object of its key on every node, apart from the lock and the semaphore of that key
 * (`electionKeys`, under `<prefix>:{<key>}:election:`), voted on by a majority as a lock is.
 *
 * Layout on each node: `leader`, a hash (owner, term, value) with the grant's TTL, so that the
 * value lives and dies with the grant; `term`, the node's last term, which never expires; the
 * line (`queue`, `waiters`) and the release channel (`released`) of `line.lua`, as a lock's;
 * `changed`, the watchers' channel; and `delay`, a leadership's lock-delay (`<owner>:<D>`, PX =
 * its TTL + D, as a lock's: backend.ts, scripts/line.lua).
 *
 * - Campaign (`campaign-on-node.lua`): a lock's grant, in the order of the line, storing the
 *   value. Granted on a majority; the term is the one a majority of the nodes issued, else the
 *   highest issued, settled on a majority (`settle-term-on-node.lua`) before the grant is
 *   answered. So a majority never shows the new leader with a term other than its final one, and
 *   `leader` reads it with one term only. A lost vote withdraws the grant on every node (a
 *   waiter keeps its place).
 * - Terms: a node issues max(its last term + 1, its clock in whole ms as µs), and its counter
 *   never expires. Any two majorities share a node, so a grant's term is above the previous one
 *   (1) whenever a node of the new majority kept its counter, however long the election was idle
 *   (no TTL to outlive), and (2) where every such node lost it (restarted empty, or from a
 *   snapshot older than the previous grant), as long as the nodes' clocks do not step back and
 *   differ by less than the time between the two grants: the lock tokens' condition.
 * - Renew, resign: by owner and term, on a majority (a lock's votes). Proclaim: compare-and-set
 *   of the value by owner and term on every node (`proclaim-on-node.lua`); `proclaimed` once a
 *   majority stored it.
 * - Leader: one read-only script call per node (`leader-on-node.lua`, all at once): the (owner,
 *   term, value) a majority of the nodes shows, with the time until fewer than a majority still
 *   hold it.
 * - Watch (election-watch.ts): pub/sub on every node, armed on a majority.
 */
import type { Redis } from 'ioredis';
import type {
  AttemptRequest,
  AttemptResult,
  ElectedLeader,
  ElectionWatch,
  LeaseRef,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import type { RenewalRequest } from '../../core/renewal-batch.js';
import { QuorumError } from '../../errors.js';
import { REDLOCK_ENTRY_TTL_MS } from '../waiting-line.js';
import type { ElectionWatches } from './election-watch.js';
import type { LineWaits } from './line-waits.js';
import { type NodeResult, outcomesOf, quorumOf, type Vote } from './quorum.js';
import type { RestartWatch } from './restarts.js';
import {
  campaignOnNodeScript,
  leaderOnNodeScript,
  proclaimOnNodeScript,
  renewLeadersOnNodeScript,
  resignOnNodeScript,
  settleTermOnNodeScript,
  withdrawCandidateOnNodeScript,
} from './scripts.js';
import type { NodeVoter } from './voter.js';

/** The Redis keys of one election on every node (apart from the lock and semaphore of its key). */
export interface ElectionKeys {
  /** Hash: owner, term, value of the leader; PX = the grant's TTL. */
  readonly leader: string;
  /** The election's last term on this node; never expires. */
  readonly term: string;
  /** Sorted set: waiting candidates by ticket (`line.lua`). */
  readonly queue: string;
  /** Hash: candidate → entry expiry (ms, TIME). */
  readonly waiters: string;
  /** Release channel: a resignation names the head of the line. */
  readonly channel: string;
  /** Watchers' channel: every change of the leader or its value is published here. */
  readonly changed: string;
  /**
   * `<owner>:<D>` of the last leadership granted with a lock-delay of D ms, PX = its TTL + D
   * (scripts/line.lua): while it outlives the leadership, nobody is granted the election here.
   */
  readonly delay: string;
}

/** The keys of election `key` under `prefix`: the `{key}` hash tag of its lock, names of its own. */
export function electionKeys(prefix: string, key: string): ElectionKeys {
  const base = `${prefix}:{${key}}:election`;
  return {
    leader: `${base}:leader`,
    term: `${base}:term`,
    queue: `${base}:queue`,
    waiters: `${base}:waiters`,
    channel: `${base}:released`,
    changed: `${base}:changed`,
    delay: `${base}:delay`,
  };
}

/** One node's answer to a campaign: granted with its term, or not yet for up to `ms`. */
type CampaignReply = [1, string] | [0, number];

/**
 * One node's leader: `[owner, term, value, PTTL ms, candidates]` (the leader and the node's live
 * line), or `[]` when nobody leads there.
 */
type LeaderReply = [string, string, string, number, number] | [];

/** The election operations of one Redlock backend, on its voter, lines and restart watch. */
export class RedlockElections {
  readonly #voter: NodeVoter;
  readonly #line: LineWaits;
  readonly #restarts: RestartWatch;
  readonly #watches: ElectionWatches;
  readonly #prefix: string;
  readonly #quorum: number;
  /** Per-node timeout of a withdrawal, ms. */
  readonly #nodeTimeoutMs: number;
  /** Per-node timeout of a release, a proclaim and a read, which grant nothing, ms. */
  readonly #slowTimeoutMs: number;

  constructor(
    voter: NodeVoter,
    line: LineWaits,
    restarts: RestartWatch,
    watches: ElectionWatches,
    settings: {
      readonly prefix: string;
      readonly nodeTimeoutMs: number;
      readonly slowTimeoutMs: number;
    },
  ) {
    this.#voter = voter;
    this.#line = line;
    this.#restarts = restarts;
    this.#watches = watches;
    this.#prefix = settings.prefix;
    this.#quorum = quorumOf(voter.nodes.length);
    this.#nodeTimeoutMs = settings.nodeTimeoutMs;
    this.#slowTimeoutMs = settings.slowTimeoutMs;
  }

  /** The Redis keys of election `key` on every node. */
  keysOf(key: string): ElectionKeys {
    return electionKeys(this.#prefix, key);
  }

  /**
   * Campaign on every node; granted on a majority with the highest term issued (settled on a
   * majority when fewer issued it), else withdrawn everywhere (a waiter keeps its place).
   * @returns `{ granted: false, reason: 'no-quorum', error: QuorumError }` when fewer than a
   *   majority answered, or the term could not be settled on a majority.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    const k = this.keysOf(request.key);
    const value = request.election?.value ?? '';
    const waiting = request.willWait !== false;
    // A release message that names this owner while the vote runs is kept for its next wait.
    if (waiting) this.#line.inLine(k.channel, request.owner);
    const ticket = waiting ? this.#line.ticketOf(request) : '0';
    const keys = [k.leader, k.term, k.queue, k.waiters, k.changed, k.delay] as const;
    const args = [
      request.owner,
      request.ttlMs,
      ticket,
      REDLOCK_ENTRY_TTL_MS,
      value,
      request.lockDelayMs ?? 0,
    ] as const;
    const campaigning = this.#voter.run(
      this.#voter.timeoutFor(request.ttlMs),
      (client) => campaignOnNodeScript.run(client, keys, args),
      (results) => this.#voter.decided(this.#quorum, grantsOf(results).length, results.length),
    );
    const early = await campaigning.early;
    if (grantsOf(early).length >= this.#quorum) {
      // The term a majority of the nodes issued, if any (from every node's answer when the first
      // ones do not tell): else the highest issued, settled on a majority.
      let grants = grantsOf(early);
      let agreed = majorityTerm(grants, this.#quorum);
      if (agreed === undefined) {
        grants = grantsOf(await campaigning.all);
        agreed = majorityTerm(grants, this.#quorum);
      }
      const settling = agreed === undefined;
      const term = agreed ?? maxOf(grants.map((g) => g.term));
      const unsettled = settling ? await this.#settle(request, term) : undefined;
      if (unsettled) return { granted: false, reason: 'no-quorum', error: unsettled };
      this.#line.leftLine(k.channel, request.owner);
      // Nodes that issued another term, or did not answer in time (the script may still run
      // there), are settled to this one in the background (never withdrawing the grant), unless
      // the settle round, sent to every node after the grant, already did.
      void campaigning.all.then((all) => {
        const late =
          all.some((r) => r.status === 'timeout') || grantsOf(all).some((g) => g.term !== term);
        if (settling || !late || this.#voter.closed) return;
        return this.#settleVote(request, term, () => false).all;
      });
      const on = (results: readonly NodeResult<CampaignReply>[]) =>
        grantsOf(results).map((g) => g.node);
      this.#restarts.granted(request.owner, request.key, request.ttlMs, on(early));
      void campaigning.all.then((all) => this.#restarts.alsoOn(request.owner, on(all)));
      return { granted: true, token: term, ttlMs: request.ttlMs };
    }
    // No majority: withdraw the grants on every node (where the reply was lost too) before the
    // core waits; a waiter keeps its place in the lines.
    const all = await campaigning.all;
    if (!waiting) this.#line.leftLine(k.channel, request.owner);
    await this.#withdraw(request, waiting ? 'grant' : 'everything').catch(() => undefined);
    return this.#line.refused(all, this.#quorum, 'campaign', request, k.channel, waiting);
  }

  /**
   * One vote over every node on renewing the leaderships of `batch` (one script call per node,
   * `renew-leaders-on-node.lua`), each decided on its own majority.
   */
  async renewGroup(
    batch: readonly RenewalRequest[],
    timeoutMs: number,
  ): Promise<(RenewResult | Error)[]> {
    const keys = batch.flatMap((r) => {
      const k = this.keysOf(r.lease.key);
      return [k.leader, k.delay];
    });
    const args = batch.flatMap((r) => [r.lease.owner, String(r.lease.fencingToken), r.ttlMs]);
    return this.#voter.renewBatch(
      batch,
      this.#quorum,
      timeoutMs,
      (client) => renewLeadersOnNodeScript.run(client, keys, args),
      (r) => this.#restarts.renewed(r.lease.owner, r.ttlMs),
      (key, votes) => this.#verdict(key, 'renew leadership', votes),
    );
  }

  /**
   * Compare-and-delete the leadership (and its value) on every node by owner and term; each node
   * wakes the head of its line and tells the watchers. `released` once a majority deleted it.
   * @throws QuorumError when fewer than a majority answered.
   */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const k = this.keysOf(lease.key);
    const released = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value === 1;
    const early = await this.#voter.run(
      this.#slowTimeoutMs,
      (client) =>
        resignOnNodeScript.run(
          client,
          [k.leader, k.queue, k.waiters, k.channel, k.changed, k.delay],
          [lease.owner, String(lease.fencingToken)],
        ),
      (results) => results.filter(released).length >= this.#quorum,
    ).early;
    this.#restarts.ended(lease.owner);
    return this.#verdict(lease.key, 'resign', early);
  }

  /**
   * Delete this candidate's leadership on every node, whatever its term, and its line entries.
   * @throws QuorumError when no node answered.
   */
  async abandon(request: AttemptRequest): Promise<void> {
    this.#restarts.ended(request.owner);
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    await this.#withdraw(request, 'everything');
  }

  /**
   * Take this candidate out of the election's line on every node, leaving any leadership.
   * @throws QuorumError when no node answered.
   */
  async leaveQueue(request: AttemptRequest): Promise<void> {
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    await this.#withdraw(request, 'place');
  }

  /**
   * Compare-and-set the value on every node by owner and term. `proclaimed` once a majority
   * stored it; `not-held` / `not-owner` once a majority answered that this owner and term do
   * not lead there (the value cannot be on a majority then). Anything between (a majority
   * neither stored nor refused: nodes failed or did not answer in time) is a QuorumError, with
   * nothing rolled back: a node that did not answer may still store the value after any
   * rollback, so a rollback could not restore a known state either. The value is then the old or
   * the new one, as after any write whose reply was lost; proclaiming again (idempotent) settles
   * it, and `leader` reports a value only where a majority of the nodes shows it.
   * @throws QuorumError as said.
   */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    const k = this.keysOf(lease.key);
    const stored = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value === 1;
    const refused = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value !== 1;
    const early = await this.#voter.run(
      this.#slowTimeoutMs,
      (client) =>
        proclaimOnNodeScript.run(
          client,
          [k.leader, k.changed],
          [lease.owner, String(lease.fencingToken), value],
        ),
      (results) =>
        results.filter(stored).length >= this.#quorum ||
        results.filter(refused).length >= this.#quorum,
    ).early;
    if (early.filter(stored).length >= this.#quorum) return 'proclaimed';
    const refusals = early.flatMap((r) => (refused(r) && r.status === 'ok' ? [r.value] : []));
    if (refusals.length >= this.#quorum) return refusals.includes(-1) ? 'not-owner' : 'not-held';
    throw new QuorumError(
      lease.key,
      'proclaim',
      outcomesOf(early, (v) => v !== 1),
    );
  }

  /**
   * The leader a majority of the nodes shows: one read-only script call per node, all at once
   * (`leader-on-node.lua`), done as soon as one (owner, term, value) has a majority, or none can.
   * `ttlMs` is the majority-th longest PTTL among the nodes that show it (until fewer than a
   * majority hold it), `candidates` the majority-th largest count among them: at least that many
   * stand on a majority of the nodes (a lower bound while an entry is on some nodes only, as the
   * read ends once a majority shows the leader). Null when no (owner, term, value) is on a
   * majority: nobody leads, or a grant, term or proclaim is still settling (a vote under way, or
   * one that failed half-way).
   * @throws QuorumError when fewer than a majority answered.
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    const k = this.keysOf(key);
    const n = this.#voter.nodes.length;
    const reading = this.#voter.run(
      this.#slowTimeoutMs,
      (client: Redis) => leaderOnNodeScript.run(client, [k.leader, k.queue, k.waiters], []),
      (results) => {
        const answered = results.filter((r) => r.status === 'ok').length;
        const left = n - results.length;
        const most = tally(results).reduce((max, g) => Math.max(max, g.ttls.length), 0);
        return (
          most >= this.#quorum ||
          (answered >= this.#quorum && most + left < this.#quorum) ||
          answered + left < this.#quorum
        );
      },
    );
    const results = await reading.early;
    if (results.filter((r) => r.status === 'ok').length < this.#quorum) {
      // Every node's outcome for the report (the rest answer by the per-node timeout).
      throw new QuorumError(
        key,
        'read leader',
        outcomesOf(await reading.all, (v) => v.length > 0),
      );
    }
    const found = tally(results).find((g) => g.ttls.length >= this.#quorum);
    if (found === undefined) return null;
    const ttlMs = largestOnQuorum(found.ttls, this.#quorum);
    if (ttlMs <= 0) return null;
    const candidates = largestOnQuorum(found.candidates, this.#quorum);
    return { owner: found.owner, term: found.term, value: found.value, ttlMs, candidates };
  }

  /** Subscribe to the election's changes on every node (election-watch.ts). */
  watch(key: string, onChange: () => void): Promise<ElectionWatch> {
    return this.#watches.watch(key, this.keysOf(key).changed, onChange);
  }

  /**
   * Write the combined term on every node where this owner leads; needs a majority.
   * @returns undefined when settled, else the failed vote (the grant is then withdrawn).
   */
  async #settle(request: AttemptRequest, term: bigint): Promise<QuorumError | undefined> {
    const settled = (r: NodeResult<1 | 0>) => r.status === 'ok' && r.value === 1;
    const settling = this.#settleVote(request, term, (results) =>
      this.#voter.decided(this.#quorum, results.filter(settled).length, results.length),
    );
    const early = await settling.early;
    if (early.filter(settled).length >= this.#quorum) return undefined;
    const all = await settling.all;
    const waiting = request.willWait !== false;
    if (!waiting) this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
    await this.#withdraw(request, waiting ? 'grant' : 'everything').catch(() => undefined);
    return new QuorumError(
      request.key,
      'campaign (settle term)',
      outcomesOf(all, (v) => v === 0),
    );
  }

  /** Run the settle-term script on every node (1 where this owner now leads with `term`). */
  #settleVote(
    request: AttemptRequest,
    term: bigint,
    decided: (results: readonly NodeResult<1 | 0>[]) => boolean,
  ): Vote<1 | 0> {
    const k = this.keysOf(request.key);
    return this.#voter.run(
      this.#voter.timeoutFor(request.ttlMs),
      (client) =>
        settleTermOnNodeScript.run(
          client,
          [k.leader, k.term, k.changed],
          [request.owner, String(term)],
        ),
      decided,
    );
  }

  /**
   * Run the withdraw script on every node for this candidate: `grant` deletes its leadership
   * whatever the term and keeps it in the line with its ticket (a lost vote of a waiter); `place`
   * takes it out of the line only; `everything` does both.
   * @throws QuorumError when no node answered.
   */
  async #withdraw(request: AttemptRequest, what: 'grant' | 'place' | 'everything'): Promise<void> {
    const k = this.keysOf(request.key);
    const args = [
      request.owner,
      what === 'place' ? '1' : '0',
      what === 'grant' ? '1' : '0',
      what === 'grant' ? this.#line.ticketOf(request) : '0',
      REDLOCK_ENTRY_TTL_MS,
    ] as const;
    const all = await this.#voter.run(
      this.#nodeTimeoutMs,
      (client) =>
        withdrawCandidateOnNodeScript.run(
          client,
          [k.leader, k.queue, k.waiters, k.channel, k.changed, k.delay],
          args,
        ),
      () => false,
    ).all;
    if (!all.some((r) => r.status === 'ok')) {
      throw new QuorumError(
        request.key,
        what === 'place' ? 'leave line' : 'withdraw candidate',
        outcomesOf(all, () => false),
      );
    }
  }

  /** released / not-owner / not-held from every node's 1 / -1 / 0; QuorumError without a majority. */
  #verdict(key: string, operation: string, all: readonly NodeResult<1 | 0 | -1>[]): ReleaseOutcome {
    const answers = all.flatMap((r) => (r.status === 'ok' ? [r.value] : []));
    if (answers.filter((a) => a === 1).length >= this.#quorum) return 'released';
    if (answers.length < this.#quorum) {
      throw new QuorumError(
        key,
        operation,
        outcomesOf(all, (v) => v === -1),
      );
    }
    return answers.includes(-1) ? 'not-owner' : 'not-held';
  }
}

/** The nodes that granted, with the term each issued. */
function grantsOf(
  results: readonly NodeResult<CampaignReply>[],
): { readonly node: string; readonly term: bigint }[] {
  return results.flatMap((r) =>
    r.status === 'ok' && r.value[0] === 1 ? [{ node: r.node, term: BigInt(r.value[1]) }] : [],
  );
}

/**
 * The nodes' leaders grouped by (owner, term, value), each with the PTTLs and candidate counts of
 * the nodes that show it.
 */
function tally(results: readonly NodeResult<LeaderReply>[]): {
  readonly owner: string;
  readonly term: bigint;
  readonly value: string;
  readonly ttls: number[];
  readonly candidates: number[];
}[] {
  const groups = new Map<
    string,
    { owner: string; term: bigint; value: string; ttls: number[]; candidates: number[] }
  >();
  for (const r of results) {
    if (r.status !== 'ok' || r.value.length === 0) continue;
    const [owner, term, value, pttl, candidates] = r.value;
    const id = JSON.stringify([owner, term, value]);
    const group = groups.get(id) ?? {
      owner,
      term: BigInt(term),
      value,
      ttls: [],
      candidates: [],
    };
    group.ttls.push(Number(pttl));
    group.candidates.push(Number(candidates));
    groups.set(id, group);
  }
  return [...groups.values()];
}

/** The largest value that at least `quorum` of `values` reach (its `quorum`-th largest). */
function largestOnQuorum(values: readonly number[], quorum: number): number {
  return [...values].sort((a, b) => b - a)[quorum - 1]!;
}

/**
 * The term at least `quorum` of the granting nodes issued, if any. It is above every earlier
 * term: those nodes form a majority, which shares a node with the majority that settled the
 * previous term, and that node issued it above its counter, which holds the previous term.
 */
function majorityTerm(
  grants: readonly { readonly term: bigint }[],
  quorum: number,
): bigint | undefined {
  const counts = new Map<bigint, number>();
  for (const { term } of grants) counts.set(term, (counts.get(term) ?? 0) + 1);
  for (const [term, count] of counts) if (count >= quorum) return term;
  return undefined;
}

/** The largest of `values` (0n for none). */
function maxOf(values: readonly bigint[]): bigint {
  let max = 0n;
  for (const value of values) if (value > max) max = value;
  return max;
}
