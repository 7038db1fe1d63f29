/**
 * The release notifications of a Redlock: every node publishes the head of a key's line on the
 * key's release channel when the key is freed there (`release-on-node.lua`,
 * `withdraw-on-node.lua`), and the nodes order their lines alike, so each names the same head.
 * A waiter listens on one node only: the first, in the order given, whose connection is up when
 * it starts waiting (through the single-node backend's registry, `ReleaseWaiters`, one
 * subscriber connection per node listened on). Listening on every node would deliver each
 * release to every waiter's process once per node: with 64 waiters over 5 nodes, 320 messages a
 * handoff, which cost more than the handoffs themselves. A message that does not come (the node
 * went down, or its line named another head for a moment) costs the core's recheck at most.
 * Subscribers are opened on the first wait only (an uncontended locker opens none).
 */
import type { Redis } from 'ioredis';
import { ReleaseWaiters } from '../redis/release-waiters.js';

/** The waiters of this backend on every node's release channels. */
export class ReleaseWatch {
  readonly #clients: readonly Redis[];
  /** The registry of each node listened on so far, by the node's index. */
  readonly #nodes: (ReleaseWaiters | undefined)[];
  #closed = false;

  constructor(clients: readonly Redis[]) {
    this.#clients = clients;
    this.#nodes = new Array(clients.length);
  }

  /** `owner` is in the line of `channel`'s key and attempts now (see `ReleaseWaiters.inLine`). */
  inLine(channel: string, owner: string): void {
    for (const node of this.#nodes) node?.inLine(channel, owner);
  }

  /** `owner` left the line of `channel`'s key (granted or withdrawn). */
  leftLine(channel: string, owner: string): void {
    for (const node of this.#nodes) node?.leftLine(channel, owner);
  }

  /**
   * Wait until a release message of the node listened on names `owner`, or `maxMs`, or `signal`
   * aborts. Never rejects.
   */
  wait(channel: string, owner: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.#closed || signal.aborted) return Promise.resolve();
    const up = this.#clients.findIndex((client) => client.status === 'ready');
    const index = up === -1 ? 0 : up;
    let node = this.#nodes[index];
    if (node === undefined) {
      node = new ReleaseWaiters(subscriberTemplate(this.#clients[index]!));
      this.#nodes[index] = node;
    }
    // Redlock's release scripts name the head only: no grant is handed over with the message.
    return node.wait(channel, owner, signal, maxMs).then(() => undefined);
  }

  /** Wake every waiter now, then quit the subscriber connections (within 1 s). */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#nodes.map((n) => n?.close()));
  }
}

/**
 * The client a node's subscriber connection is duplicated from: the node's options, except that
 * a SUBSCRIBE sent while the node is down waits for it (the offline queue, with no limit on
 * reconnections) instead of failing, which would wake the waiters at once, over and over. Never
 * connected itself (lazy).
 */
function subscriberTemplate(client: Redis): Redis {
  return client.duplicate({
    lazyConnect: true,
    enableOfflineQueue: true,
    maxRetriesPerRequest: null,
  });
}
