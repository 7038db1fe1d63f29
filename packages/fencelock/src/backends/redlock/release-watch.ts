/**
 * The release notifications of a Redlock: every node publishes the head of a key's line on the
 * key's release channel when the key is freed there (`release-on-node.lua`,
 * `withdraw-on-node.lua`), and the nodes order their lines alike, so each names the same head.
 * One registry of the single-node backend (`ReleaseWaiters`, one subscriber connection) per node;
 * a waiter wakes on the first node's message. Subscribers are opened on the first wait only (an
 * uncontended locker opens none). A node that is down leaves its subscription pending until it
 * is back; the other nodes' messages, and the core's recheck, still wake its waiters.
 */
import type { Redis } from 'ioredis';
import { ReleaseWaiters } from '../redis/release-waiters.js';

/** The waiters of this backend on every node's release channels. */
export class ReleaseWatch {
  readonly #clients: readonly Redis[];
  #nodes: ReleaseWaiters[] | undefined;
  #closed = false;

  constructor(clients: readonly Redis[]) {
    this.#clients = clients;
  }

  /** `owner` is in the line of `channel`'s key and attempts now (see `ReleaseWaiters.inLine`). */
  inLine(channel: string, owner: string): void {
    if (this.#nodes) for (const node of this.#nodes) node.inLine(channel, owner);
  }

  /** `owner` left the line of `channel`'s key (granted or withdrawn). */
  leftLine(channel: string, owner: string): void {
    if (this.#nodes) for (const node of this.#nodes) node.leftLine(channel, owner);
  }

  /**
   * Wait until a release message of any node names `owner`, or `maxMs`, or `signal` aborts; the
   * waits on the other nodes end then too. Never rejects.
   */
  async wait(channel: string, owner: string, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.#closed || signal.aborted) return;
    this.#nodes ??= this.#clients.map((client) => new ReleaseWaiters(subscriberTemplate(client)));
    const ended = new AbortController();
    const end = () => ended.abort();
    signal.addEventListener('abort', end, { once: true });
    try {
      await Promise.race(this.#nodes.map((n) => n.wait(channel, owner, ended.signal, maxMs)));
    } finally {
      signal.removeEventListener('abort', end);
      ended.abort();
    }
  }

  /** Wake every waiter now, then quit the subscriber connections (within 1 s). */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all((this.#nodes ?? []).map((n) => n.close()));
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
