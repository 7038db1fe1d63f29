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
 * (its late answer is ignored). One timer for the whole vote, and one reaction per node: a vote
 * runs twice per acquire + release pair, so this is the backend's hot path.
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
  const byNode: (NodeResult<T> | undefined)[] = new Array(nodes.length);
  let resolveEarly!: (results: readonly NodeResult<T>[]) => void;
  let resolveAll!: (results: readonly NodeResult<T>[]) => void;
  const early = new Promise<readonly NodeResult<T>[]>((resolve) => {
    resolveEarly = resolve;
  });
  const all = new Promise<readonly NodeResult<T>[]>((resolve) => {
    resolveAll = resolve;
  });
  if (nodes.length === 0) {
    resolveEarly(results);
    resolveAll(results);
    return { early, all };
  }
  let isDecided = false;
  const settle = (i: number, result: NodeResult<T>) => {
    if (byNode[i] !== undefined) return;
    byNode[i] = result;
    results.push(result);
    if (!isDecided && (results.length === nodes.length || decided(results))) {
      isDecided = true;
      resolveEarly(results.slice());
    }
    if (results.length === nodes.length) {
      clearTimeout(timer);
      resolveAll(byNode as NodeResult<T>[]);
    }
  };
  const timer = setTimeout(() => {
    nodes.forEach((node, i) => {
      settle(i, { node: nameOf(node), status: 'timeout' });
    });
  }, timeoutMs);
  nodes.forEach((node, i) => {
    let pending: Promise<T>;
    try {
      pending = op(node);
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (value) => settle(i, { node: nameOf(node), status: 'ok', value }),
      (error: unknown) => settle(i, { node: nameOf(node), status: 'error', error }),
    );
  });
  return { early, all };
}

/** Majority of `n` nodes. */
export function quorumOf(n: number): number {
  return Math.floor(n / 2) + 1;
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
