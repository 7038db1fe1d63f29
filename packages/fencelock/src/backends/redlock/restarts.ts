/**
 * The Redlock delayed-restart rule, checked: a node that crashed must stay down longer than the
 * longest TTL (or persist with `appendfsync always`), or the keys it lost let another client
 * win a majority while a lease is still held (Redis documentation, "Distributed locks with
 * Redis", on crash recovery). Each node's `run_id` (`INFO server`) is read whenever its
 * connection is (re)established; when it changed while a lease this backend granted on that node
 * may still be valid, a process warning (`FENCELOCK_REDLOCK_NODE_RESTARTED`) names the node and
 * the keys at risk.
 */
import type { RedlockNode } from './node.js';

/** Code of the process warning emitted for a node restarted under a live lease. */
export const NODE_RESTARTED_WARNING = 'FENCELOCK_REDLOCK_NODE_RESTARTED';

interface HeldLease {
  readonly key: string;
  /** Monotonic time after which the lease cannot be valid any more. */
  readonly until: number;
  readonly nodes: Set<string>;
}

/** Run ids of the nodes, and the leases granted on each. */
export class RestartWatch {
  readonly #runIds = new Map<string, string>();
  readonly #held = new Map<string, HeldLease>();
  readonly #detach: (() => void)[] = [];

  constructor(nodes: readonly RedlockNode[]) {
    for (const node of nodes) {
      const onReady = () => void this.#check(node);
      node.client.on('ready', onReady);
      this.#detach.push(() => node.client.off('ready', onReady));
    }
  }

  /** A lease of `owner` on `key`, granted on `nodes` for `ttlMs` from now. */
  granted(owner: string, key: string, ttlMs: number, nodes: Iterable<string>): void {
    this.#held.set(owner, { key, until: performance.now() + ttlMs, nodes: new Set(nodes) });
  }

  /** Nodes that granted `owner`'s lease after the vote was decided (ignored once it ended). */
  alsoOn(owner: string, nodes: Iterable<string>): void {
    const held = this.#held.get(owner);
    if (held) for (const node of nodes) held.nodes.add(node);
  }

  /** The lease was renewed for `ttlMs` from now. */
  renewed(owner: string, ttlMs: number): void {
    const held = this.#held.get(owner);
    if (held) this.#held.set(owner, { ...held, until: performance.now() + ttlMs });
  }

  /** The lease of `owner` ended (released or withdrawn). */
  ended(owner: string): void {
    this.#held.delete(owner);
  }

  /** Stop listening. */
  close(): void {
    for (const detach of this.#detach.splice(0)) detach();
    this.#held.clear();
  }

  async #check(node: RedlockNode): Promise<void> {
    let runId: string | undefined;
    try {
      runId = /run_id:(\w+)/.exec(await node.client.info('server'))?.[1];
    } catch {
      return; // gone again: the next 'ready' checks
    }
    if (runId === undefined) return;
    const previous = this.#runIds.get(node.name);
    this.#runIds.set(node.name, runId);
    if (previous === undefined || previous === runId) return;
    const now = performance.now();
    const atRisk = [...this.#held.values()].filter((h) => h.until > now && h.nodes.has(node.name));
    if (atRisk.length === 0) return;
    process.emitWarning(
      `fencelock: Redlock node ${node.name} restarted (run id ${previous} → ${runId}) while ` +
        `${atRisk.length} lease(s) granted on it may still be valid (keys: ${atRisk
          .map((h) => JSON.stringify(h.key))
          .join(', ')}); it lost their keys, so another client can win a majority. Keep a ` +
        'crashed node down longer than the longest TTL, or persist with appendfsync always.',
      { code: NODE_RESTARTED_WARNING },
    );
  }
}
