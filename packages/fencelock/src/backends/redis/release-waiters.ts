/**
 * The release notifications of a Redis backend: one subscriber connection (a duplicate of the
 * backend's client) listens on the release channel of each contended key, and a release message
 * names the owner at the head of the key's line, so exactly that waiter wakes (no herd). The
 * release and withdraw scripts (`queued-release.lua`, `queued-abandon.lua`) hand the key to that
 * owner and publish `<owner>:<token>:<first TTL ms>`: the wait ends with the handed grant
 * (`Handoff`), which the waiter holds without an attempt of its own. A bare `<owner>` (an entry
 * an older version of the scripts wrote) only wakes it. This registry only receives the
 * messages. Pub/sub is lossy: a wait always ends by `maxMs` too, and the core attempts again (an
 * attempt by the owner a lost message handed the key to is answered with its grant).
 */
import type { Cluster, Redis } from 'ioredis';
import { startWait } from '../../core/wait.js';
import { CLOSE_TIMEOUT_MS, isClusterClient, quit } from './connection.js';

/** How long an idle release-channel subscription is kept for the next waiter, ms. */
const SUBSCRIPTION_LINGER_MS = 5_000;

/** A grant a release handed to a waiter of this process, as its message told it. */
export interface Handoff {
  /** The fencing token the script issued (before any failover epoch), decimal. */
  readonly counter: string;
  /** First TTL of the grant, ms, counted on the engine from the release. */
  readonly ttlMs: number;
  /** Monotonic time (`performance.now()`) the message was received, ms. */
  readonly receivedAt: number;
}

interface Waiter {
  readonly owner: string;
  wake(handoff: Handoff | undefined): void;
}

interface Channel {
  readonly waiters: Set<Waiter>;
  /** Owners of this process that are in the key's line (they attempt, then wait, in turn). */
  readonly queued: Set<string>;
  /**
   * Queued owners named by a release message while they had no waiter registered, with the
   * grant the message handed them (undefined for a bare wake-up).
   */
  readonly missed: Map<string, Handoff | undefined>;
  /** Timer that drops an idle subscription. */
  linger: NodeJS.Timeout | undefined;
  /** Settles when the server confirmed the subscription (true) or refused it (false). */
  readonly subscribed: Promise<boolean>;
  confirmed: boolean;
}

/** The waiters of this process on release channels, by channel. */
export class ReleaseWaiters {
  /** The client the subscriber connection is duplicated from. */
  readonly #client: Redis | Cluster;
  #subscriber: Redis | Cluster | undefined;
  readonly #channels = new Map<string, Channel>();
  #closed = false;

  constructor(client: Redis | Cluster) {
    this.#client = client;
  }

  /**
   * `owner` is in the line of `channel`'s key and attempts now: a release message that names it
   * before its next wait is kept for that wait (nothing to do when nobody here waits on the
   * channel yet: its first wait ends once the subscription is confirmed).
   */
  inLine(channel: string, owner: string): void {
    this.#channels.get(channel)?.queued.add(owner);
  }

  /** `owner` left the line of `channel`'s key (granted or withdrawn). */
  leftLine(channel: string, owner: string): void {
    const entry = this.#channels.get(channel);
    if (entry === undefined) return;
    entry.queued.delete(owner);
    entry.missed.delete(owner);
  }

  /**
   * Wait until a release message names `owner` (the head of the key's line), or `maxMs`, or
   * `signal` aborts: resolves with the grant the message handed to `owner`, else undefined. Two
   * gaps of pub/sub are closed here: a release published before the subscription was live (the
   * first wait on a channel ends as soon as the server confirms the subscription, so the core
   * attempts again), and a release that named this owner while it had no waiter registered
   * (between an attempt and the next wait: it is kept, and the next wait ends at once with it).
   * Never rejects.
   */
  wait(
    channel: string,
    owner: string,
    signal: AbortSignal,
    maxMs: number,
  ): Promise<Handoff | undefined> {
    if (this.#closed || signal.aborted) return Promise.resolve(undefined);
    const entry = this.#subscribe(channel);
    clearTimeout(entry.linger);
    entry.queued.add(owner);
    if (entry.missed.has(owner)) {
      const kept = entry.missed.get(owner);
      entry.missed.delete(owner);
      if (entry.waiters.size === 0) this.#scheduleUnsubscribe(channel, entry);
      return Promise.resolve(kept);
    }
    let handoff: Handoff | undefined;
    const wait = startWait(signal, maxMs, () => {
      entry.waiters.delete(waiter);
      if (entry.waiters.size === 0) this.#scheduleUnsubscribe(channel, entry);
    });
    const waiter: Waiter = {
      owner,
      wake: (handed) => {
        if (wait.isDone()) return;
        handoff = handed;
        wait.wake();
      },
    };
    entry.waiters.add(waiter);
    if (!entry.confirmed) {
      void entry.subscribed.then((confirmed) => {
        if (confirmed) waiter.wake(undefined);
      });
    }
    return wait.ended.then(() => handoff);
  }

  /** Wake every waiter now, then quit the subscriber connection (within 1 s). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const channel of this.#channels.values()) {
      clearTimeout(channel.linger);
      for (const waiter of channel.waiters) waiter.wake(undefined);
    }
    this.#channels.clear();
    if (this.#subscriber) await quit(this.#subscriber, CLOSE_TIMEOUT_MS);
  }

  #subscribe(channel: string): Channel {
    const existing = this.#channels.get(channel);
    if (existing) return existing;
    const subscriber = this.#getSubscriber();
    const entry: Channel = {
      waiters: new Set(),
      queued: new Set(),
      missed: new Map(),
      linger: undefined,
      confirmed: false,
      // A refused SUBSCRIBE (an ACL without it, a connection that failed) only costs latency:
      // the waits on this entry run to their poll bound, and the next wait subscribes again.
      subscribed: subscriber.subscribe(channel).then(
        () => {
          entry.confirmed = true;
          return true;
        },
        () => {
          if (this.#channels.get(channel) === entry) this.#channels.delete(channel);
          return false;
        },
      ),
    };
    this.#channels.set(channel, entry);
    return entry;
  }

  #scheduleUnsubscribe(channel: string, entry: Channel): void {
    if (this.#closed) return;
    clearTimeout(entry.linger);
    entry.linger = setTimeout(() => {
      if (entry.waiters.size > 0 || this.#channels.get(channel) !== entry) return;
      this.#channels.delete(channel);
      this.#subscriber?.unsubscribe(channel).catch(() => undefined);
    }, SUBSCRIPTION_LINGER_MS);
    entry.linger.unref();
  }

  #getSubscriber(): Redis | Cluster {
    if (this.#subscriber) return this.#subscriber;
    // The SUBSCRIBE waits for the connection, however long it is down: a Redlock node's client
    // queues nothing offline and retries nothing (its votes fail fast), and a subscriber that
    // gave up on its SUBSCRIBE would hear no release.
    const subscriber = isClusterClient(this.#client)
      ? this.#client.duplicate()
      : this.#client.duplicate({
          commandTimeout: undefined,
          enableOfflineQueue: true,
          maxRetriesPerRequest: null,
        });
    subscriber.on('error', () => undefined);
    subscriber.on('message', (channel: string, message: string) => {
      const receivedAt = performance.now();
      const entry = this.#channels.get(channel);
      if (entry === undefined) return;
      // The message names the head of the line (and, mostly, the grant handed to it): wake that
      // waiter only, if it is one of ours.
      const [owner = '', counter = '', ttl] = message.split(':');
      const ttlMs = Number(ttl);
      const handoff =
        /^\d+$/.test(counter) && Number.isSafeInteger(ttlMs) && ttlMs > 0
          ? { counter, ttlMs, receivedAt }
          : undefined;
      for (const waiter of entry.waiters) {
        if (waiter.owner === owner) {
          waiter.wake(handoff);
          return;
        }
      }
      if (entry.queued.has(owner)) entry.missed.set(owner, handoff);
    });
    this.#subscriber = subscriber;
    return subscriber;
  }
}
