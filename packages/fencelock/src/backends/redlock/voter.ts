/**
 * The Redlock nodes as one voter: runs a script on every node at once (`vote`, quorum.ts), each
 * bounded by a per-node timeout, connecting a node the backend opened on its first use, and
 * turning a node's failure into a `BackendError` that names it. Shared by the lock operations
 * (backend.ts) and the permit operations (permits.ts), which decide on the answers themselves.
 */
import type { Redis } from 'ioredis';
import type { ReleaseOutcome, RenewResult } from '../../core/backend.js';
import type { RenewalRequest } from '../../core/renewal-batch.js';
import { BackendError } from '../../errors.js';
import { unreachableAt } from '../unreachable.js';
import type { RedlockNode } from './node.js';
import { type NodeResult, type Vote, vote } from './quorum.js';

/** Runs votes over the nodes of one backend until closed. */
export class NodeVoter {
  readonly nodes: readonly RedlockNode[];
  /** The backend's name, for errors. */
  readonly #name: string;
  readonly #nodeTimeoutMs: number;
  readonly #connecting = new Map<RedlockNode, Promise<void>>();
  /** Nodes the backend opened whose first connection attempt has settled. */
  readonly #connected = new Set<RedlockNode>();
  /** Last connection error of each node since it was last ready, for the nodes' errors. */
  readonly #lastErrors = new Map<RedlockNode, Error>();
  #closed = false;

  /**
   * @param name the backend's name, for errors.
   * @param nodeTimeoutMs longest wait for one node's answer, ms.
   */
  constructor(name: string, nodes: readonly RedlockNode[], nodeTimeoutMs: number) {
    this.#name = name;
    this.nodes = nodes;
    this.#nodeTimeoutMs = nodeTimeoutMs;
    for (const node of nodes) {
      node.client.on('error', (error: Error) => this.#lastErrors.set(node, error));
      node.client.on('ready', () => this.#lastErrors.delete(node));
    }
  }

  /** Whether `close()` was called: `run` then throws. */
  get closed(): boolean {
    return this.#closed;
  }

  /** No vote starts after this. */
  close(): void {
    this.#closed = true;
  }

  /** Per-node timeout for a vote on a lease of `ttlMs`: at most a tenth of it, at least 5 ms. */
  timeoutFor(ttlMs: number): number {
    return Math.max(5, Math.min(this.#nodeTimeoutMs, ttlMs / 10));
  }

  /**
   * Whether a vote needing `quorum` yes answers of the nodes is decided: `quorum` said yes, or
   * too many answered otherwise for `quorum` to be possible.
   */
  decided(quorum: number, yes: number, answered: number): boolean {
    return yes >= quorum || answered - yes > this.nodes.length - quorum;
  }

  /**
   * Run a script on every node, each bounded by `timeoutMs`. A node's failure is a
   * `BackendError` naming the node (an unreachable one in the one form: `host:port unreachable:
   * connection refused`).
   * @param run the script on one node (its client, and the node for callers that pick nodes).
   * A vote that starts while the backend's first connections are under way waits for them up to
   * the configured per-node timeout at least, however short `timeoutMs` (a tenth of a short
   * lease's TTL): the core charges the time to the lease's validity, which counts from the start
   * of the attempt, so only a fresh backend's first vote is slower, never less safe.
   * @param decided called with the results so far after each one arrives (see `Vote.early`).
   * @throws BackendError once the voter is closed.
   */
  run<T>(
    timeoutMs: number,
    run: (client: Redis, node: RedlockNode) => Promise<T>,
    decided: (results: readonly NodeResult<T>[]) => boolean,
  ): Vote<T> {
    if (this.#closed) throw new BackendError(this.#name, 'use', new Error('backend is closed'));
    return vote(
      this.nodes,
      (node) => node.name,
      async (node) => {
        try {
          await this.#connect(node);
          return await run(node.client, node);
        } catch (error) {
          // A node still connecting (its socket accepted, no answer to the ready check) refuses
          // commands (no offline queue): it has not answered, which says more than the refusal.
          const status = node.client.status;
          const silent = status === 'connect' || status === 'connecting';
          const unreachable = unreachableAt(
            node.name,
            [error, this.#lastErrors.get(node), silent ? 'no answer within' : undefined],
            timeoutMs,
          );
          throw new BackendError(this.#name, `vote on ${node.name}`, error, unreachable);
        }
      },
      this.nodes.some((node) => node.owned && !this.#connected.has(node))
        ? Math.max(timeoutMs, this.#nodeTimeoutMs)
        : timeoutMs,
      decided,
    );
  }

  /**
   * One vote over every node on renewing `batch`, each node answering 1 (renewed), 0 (not held)
   * or -1 (another owner) for every lease in one script call, each lease decided on its own
   * `quorum`: renewed as soon as a quorum renewed it (`onRenewed` is told), else once every node
   * answered, by `verdictOf` (not-held / not-owner, or an error without a majority).
   * @param run the batch's script on one node.
   */
  async renewBatch(
    batch: readonly RenewalRequest[],
    quorum: number,
    timeoutMs: number,
    run: (client: Redis) => Promise<(1 | 0 | -1)[]>,
    onRenewed: (request: RenewalRequest) => void,
    verdictOf: (key: string, votes: readonly NodeResult<1 | 0 | -1>[]) => ReleaseOutcome,
  ): Promise<(RenewResult | Error)[]> {
    const renewedOn = (results: readonly NodeResult<(1 | 0 | -1)[]>[], i: number) =>
      results.filter((r) => r.status === 'ok' && r.value[i] === 1).length;
    const renewing = this.run(timeoutMs, run, (results) =>
      batch.every((_, i) => this.decided(quorum, renewedOn(results, i), results.length)),
    );
    const early = await renewing.early;
    const outcomes = batch.map((r, i): RenewResult | undefined => {
      if (renewedOn(early, i) < quorum) return undefined;
      onRenewed(r);
      return { ok: true, ttlMs: r.ttlMs };
    });
    if (outcomes.every((o) => o !== undefined)) return outcomes as RenewResult[];
    const all = await renewing.all;
    return batch.map((r, i) => {
      const decided = outcomes[i];
      if (decided !== undefined) return decided;
      // This lease's vote: each node's code for it.
      const votes = all.map(
        (n): NodeResult<1 | 0 | -1> =>
          n.status === 'ok' ? { node: n.node, status: 'ok', value: n.value[i] ?? 0 } : n,
      );
      try {
        const verdict = verdictOf(r.lease.key, votes);
        return { ok: false, reason: verdict === 'released' ? 'not-held' : verdict };
      } catch (error) {
        return error as Error;
      }
    });
  }

  /**
   * First use of a node the backend opened: connect (its commands never queue offline). Every
   * vote that starts while that first connection is under way waits for it: the client's status
   * leaves `wait` as soon as `connect()` is called, so it cannot tell them.
   */
  #connect(node: RedlockNode): Promise<void> | undefined {
    if (!node.owned) return undefined;
    let connecting = this.#connecting.get(node);
    if (connecting === undefined && node.client.status === 'wait') {
      connecting = node.client
        .connect()
        .catch(() => undefined)
        .finally(() => this.#connected.add(node));
      this.#connecting.set(node, connecting);
    }
    return connecting;
  }
}
