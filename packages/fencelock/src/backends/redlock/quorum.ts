/**
 * One operation on every Redlock node at once, each bounded by the per-node timeout, with the
 * vote decided as soon as its outcome is known (node-redlock's `_attemptOperation` idea) while
 * the outcome of every node is still collected for reports (`QuorumError.nodes`).
 */
import type { NodeOutcome } from '../../errors.js';

/** What one node answered. */
export type NodeResult<T> =
  | { readonly node: string; readonly status: 'ok'; readonly value: T }
  | { readonly node: string; readonly status: 'error'; readonly error: unknown }
  | { readonly node: string; readonly status: 'timeout' };

/** A vote in progress. */
export interface Vote<T> {
  /** Resolves with the results known when `decided` first returned true, or with all of them. */
  readonly early: Promise<readonly NodeResult<T>[]>;
  /** Resolves with every node's result (each settles by the per-node timeout at the latest). */
  readonly all: Promise<readonly NodeResult<T>[]>;
}

/**
 * Run `op` on every node; a node that does not answer within `timeoutMs` counts as `timeout`
 * (its late answer is ignored).
 * @param decided called with the results so far after each one arrives.
 */
export function vote<N, T>(
  nodes: readonly N[],
  nameOf: (node: N) => string,
  op: (node: N) => Promise<T>,
  timeoutMs: number,
  decided: (results: readonly NodeResult<T>[]) => boolean,
): Vote<T> {
  const results: NodeResult<T>[] = [];
  let resolveEarly!: (results: readonly NodeResult<T>[]) => void;
  const early = new Promise<readonly NodeResult<T>[]>((resolve) => {
    resolveEarly = resolve;
  });
  const each = nodes.map(async (node) => {
    const name = nameOf(node);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<NodeResult<T>>((resolve) => {
      timer = setTimeout(() => resolve({ node: name, status: 'timeout' }), timeoutMs);
    });
    const answered = op(node).then(
      (value): NodeResult<T> => ({ node: name, status: 'ok', value }),
      (error: unknown): NodeResult<T> => ({ node: name, status: 'error', error }),
    );
    const result = await Promise.race([answered, timeout]);
    clearTimeout(timer);
    results.push(result);
    if (decided(results)) resolveEarly([...results]);
    return result;
  });
  const all = Promise.all(each).then((list) => {
    resolveEarly([...results]);
    return list;
  });
  return { early, all };
}

/** Majority of `n` nodes. */
export function quorumOf(n: number): number {
  return Math.floor(n / 2) + 1;
}

/**
 * Votes a semaphore's permit needs among `nodes` nodes so that at most `permits` holders are
 * valid at once: the least q with (permits + 1) · q > nodes · permits, that is
 * q = ⌊nodes · permits / (permits + 1)⌋ + 1. Each node grants at most `permits` live permits of a
 * key, so all nodes together hold at most nodes · permits; permits + 1 holders granted on q nodes
 * each would need (permits + 1) · q of them. A majority is not enough once permits > 1 (5 nodes, 2
 * permits: 3 holders on 3 nodes each take 9 of the 10). It is a majority for 1 permit (the
 * lock's quorum), more for more permits (5 nodes: 3, 4, 4 for 1, 2, 3 permits), and every node
 * from permits = nodes − 1 on (then no node may be down). Any two such quorums share a node
 * (each is a majority at least), which keeps fencing tokens rising as for locks.
 * @param nodes how many nodes vote, ≥ 1.
 * @param permits the semaphore's permit count, ≥ 1.
 */
export function permitQuorumOf(nodes: number, permits: number): number {
  return Math.floor((nodes * permits) / (permits + 1)) + 1;
}

/** The per-node outcomes for a `QuorumError`, with `locked` for nodes held by another owner. */
export function outcomesOf<T>(
  results: readonly NodeResult<T>[],
  isLocked: (value: T) => boolean,
): NodeOutcome[] {
  return results.map((r) => {
    if (r.status === 'timeout') return { node: r.node, outcome: 'timeout' };
    if (r.status === 'error') return { node: r.node, outcome: 'error', error: r.error };
    return { node: r.node, outcome: isLocked(r.value) ? 'locked' : 'ok' };
  });
}
