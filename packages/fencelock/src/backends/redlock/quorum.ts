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
