/**
 * Watches of Redlock elections (`Backend.watchElection`): one subscriber connection per node (a
 * duplicate of the node's client), opened with the first watch of the backend and quit with its
 * last, listening on each watched election's channel (`ElectionKeys.changed`) on every node. Every
 * script that changes an election's leader or value on a node (a grant, a settled term, a
 * proclaim, a resignation, a withdrawal) publishes there, and a message from any node calls the
 * election's `onChange`.
 *
 * Armed once a majority of the nodes confirmed the SUBSCRIBE: every change is applied on a
 * majority (a grant, a proclaim and a release are voted on so), and two majorities share a node,
 * so that node's message reaches the watch. Pub/sub is lossy (a subscriber reconnecting misses
 * what was published meanwhile; ioredis subscribes again by itself, and every watch is called
 * once it is back), and the expiry of a grant's TTL publishes nothing: the watch asks the core to
 * read the leader again every `ELECTION_RECHECK_MS`.
 */
import type { Redis } from 'ioredis';
import type { ElectionWatch } from '../../core/backend.js';
import { BackendError, QuorumError } from '../../errors.js';
import { CLOSE_TIMEOUT_MS, quit } from '../redis/connection.js';
import type { RedlockNode } from './node.js';
import { type NodeResult, outcomesOf } from './quorum.js';

/**
 * `recheckAfterMs` of a Redlock election watch, ms: low, as pub/sub loses the messages of a
 * subscriber that reconnects, and an expired grant is not announced.
 */
export const ELECTION_RECHECK_MS = 1_000;

interface Watcher {
  readonly onChange: () => void;
  stopped: boolean;
}

/** The election watches of one Redlock backend. */
export class ElectionWatches {
  readonly #name: string;
  readonly #nodes: readonly RedlockNode[];
  readonly #quorum: number;
  /** Longest wait for one node's SUBSCRIBE confirmation when arming, ms. */
  readonly #timeoutMs: number;
  /** One subscriber per node, in the nodes' order, while any watch is live. */
  #subscribers: Redis[] | undefined;
  /** Live watches by channel. */
  readonly #channels = new Map<string, Set<Watcher>>();
  #live = 0;
  /** Subscribers being quit (awaited by `close`). */
  readonly #quitting = new Set<Promise<void>>();
  #closed = false;

  /**
   * @param name the backend's name, for errors.
   * @param quorum SUBSCRIBE confirmations a watch needs (a majority of the nodes).
   * @param timeoutMs longest wait for one node's confirmation, ms.
   */
  constructor(name: string, nodes: readonly RedlockNode[], quorum: number, timeoutMs: number) {
    this.#name = name;
    this.#nodes = nodes;
    this.#quorum = quorum;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Subscribe `onChange` to `channel` (election `key`'s) on every node; resolves once a majority
   * confirmed. `stop()` is synchronous and idempotent; the last watch's stop quits the
   * subscriber connections (in the background; `close` awaits them).
   * @throws QuorumError when fewer than a majority confirmed within the timeout (nothing stays
   *   subscribed for this watch); BackendError once the backend is closed.
   */
  async watch(key: string, channel: string, onChange: () => void): Promise<ElectionWatch> {
    if (this.#closed) {
      throw new BackendError(this.#name, 'watch election', new Error('backend is closed'));
    }
    const subscribers = this.#subscribersNow();
    const watcher: Watcher = { onChange, stopped: false };
    let watchers = this.#channels.get(channel);
    if (watchers === undefined) {
      watchers = new Set();
      this.#channels.set(channel, watchers);
    }
    watchers.add(watcher);
    this.#live += 1;
    const stop = (): void => {
      if (watcher.stopped) return;
      watcher.stopped = true;
      this.#live -= 1;
      const current = this.#channels.get(channel);
      current?.delete(watcher);
      if (this.#live === 0) {
        this.#dropSubscribers();
      } else if (current !== undefined && current.size === 0) {
        this.#channels.delete(channel);
        for (const subscriber of subscribers)
          subscriber.unsubscribe(channel).catch(() => undefined);
      }
    };
    const results = await armed(
      subscribers.map((subscriber, i) =>
        within(subscriber.subscribe(channel), this.#timeoutMs, this.#nodes[i]!.name),
      ),
      this.#quorum,
    );
    if (results.filter((r) => r.status === 'ok').length < this.#quorum) {
      stop();
      throw new QuorumError(
        key,
        'watch election',
        outcomesOf(results, () => false),
      );
    }
    return { recheckAfterMs: ELECTION_RECHECK_MS, stop };
  }

  /** Stop every watch (no callback after it) and quit the subscriber connections (1 s each). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const watchers of this.#channels.values()) {
      for (const watcher of watchers) watcher.stopped = true;
    }
    this.#live = 0;
    this.#dropSubscribers();
    await Promise.all(this.#quitting);
  }

  /** The subscribers, opened (connecting in the background) on the first live watch. */
  #subscribersNow(): Redis[] {
    if (this.#subscribers) return this.#subscribers;
    const subscribers = this.#nodes.map((node) => {
      // A SUBSCRIBE sent while the node is down waits for the connection (the node's own client
      // queues nothing offline); a watch's arming is bounded by its own timeout.
      const subscriber = node.client.duplicate({
        commandTimeout: undefined,
        enableOfflineQueue: true,
        maxRetriesPerRequest: null,
        lazyConnect: true,
      });
      subscriber.on('error', () => undefined);
      subscriber.on('message', (channel: string) => this.#notify(channel));
      // Back after a drop: ioredis subscribed again, but what was published meanwhile is lost.
      let connected = false;
      subscriber.on('ready', () => {
        if (connected) for (const channel of this.#channels.keys()) this.#notify(channel);
        connected = true;
      });
      if (subscriber.status === 'wait') subscriber.connect().catch(() => undefined);
      return subscriber;
    });
    this.#subscribers = subscribers;
    return subscribers;
  }

  #notify(channel: string): void {
    const watchers = this.#channels.get(channel);
    if (watchers === undefined) return;
    for (const watcher of [...watchers]) if (!watcher.stopped) watcher.onChange();
  }

  /** Quit the subscriber connections in the background and forget every channel. */
  #dropSubscribers(): void {
    this.#channels.clear();
    const subscribers = this.#subscribers;
    this.#subscribers = undefined;
    for (const subscriber of subscribers ?? []) {
      subscriber.removeAllListeners('message');
      subscriber.removeAllListeners('ready');
      const quitting = quit(subscriber, CLOSE_TIMEOUT_MS).finally(() =>
        this.#quitting.delete(quitting),
      );
      this.#quitting.add(quitting);
    }
  }
}

/**
 * The nodes' results once `quorum` of them confirmed, or once that cannot happen any more (the
 * SUBSCRIBEs still out are left to finish: ioredis keeps them for when the node is back).
 */
function armed(
  pending: readonly Promise<NodeResult<true>>[],
  quorum: number,
): Promise<readonly NodeResult<true>[]> {
  return new Promise((resolve) => {
    const results: NodeResult<true>[] = [];
    for (const each of pending) {
      void each.then((result) => {
        results.push(result);
        const ok = results.filter((r) => r.status === 'ok').length;
        if (ok >= quorum || ok + pending.length - results.length < quorum) resolve([...results]);
      });
    }
  });
}

/** `pending` as a node's result, `timeout` after `timeoutMs` (its late answer is ignored). */
async function within(
  pending: Promise<unknown>,
  timeoutMs: number,
  node: string,
): Promise<NodeResult<true>> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<NodeResult<true>>((resolve) => {
    timer = setTimeout(() => resolve({ node, status: 'timeout' }), timeoutMs);
  });
  const answered = pending.then(
    (): NodeResult<true> => ({ node, status: 'ok', value: true }),
    (error: unknown): NodeResult<true> => ({ node, status: 'error', error }),
  );
  try {
    return await Promise.race([answered, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
