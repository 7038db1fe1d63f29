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
 *
 * The same subscriber carries the watches of elections (`watch`, for `watchElection`): a watcher
 * is called on every message of its election's channel (hand-overs to candidates, and the `*`
 * the election scripts publish on each other change), and on every (re)connection of the
 * subscriber, when messages may have been lost. No connection is opened per watch.
 */
import type { Cluster, Redis } from 'ioredis';
import { startWait } from '../../core/wait.js';
import { CLOSE_TIMEOUT_MS, isClusterClient, quit } from './connection.js';
import { NodeRedisAdapter } from './node-redis.js';

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
  /** The server confirmed the channel's subscription. */
  confirmed: boolean;
  /** A SUBSCRIBE for the channel is out (at most one at a time). */
  subscribing: boolean;
  /** Election watchers, called on every message of the channel (`watch`). */
  readonly watchers: Set<() => void>;
  /** Watches waiting for the channel's subscription to be confirmed (armed). */
  readonly arming: Set<() => void>;
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
    const entry = this.#entryOf(channel);
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
    // Refused before (an ACL without SUBSCRIBE): asked again, once per wait at most.
    if (!entry.confirmed) this.#sendSubscribe(channel, entry);
    return wait.ended.then(() => handoff);
  }

  /**
   * Call `onChange` on every message of `channel` (an election's), and on every reconnection of
   * the subscriber, until the returned `stop` is called. Resolves once the server confirmed the
   * channel's subscription (armed: every message published after it reaches `onChange` while the
   * connection holds), or at once when it was confirmed before. `stop` is synchronous and
   * idempotent, calls nothing after it, and drops the channel's subscription at once when no
   * waiter of this process needs it.
   * @throws Error when the subscription is not confirmed within `timeoutMs` (the server is
   *   unreachable, or an ACL refuses SUBSCRIBE), or the registry is closed meanwhile.
   */
  async watch(channel: string, onChange: () => void, timeoutMs: number): Promise<() => void> {
    if (this.#closed) throw new Error('backend is closed');
    const entry = this.#entryOf(channel);
    clearTimeout(entry.linger);
    let active = true;
    const watcher = () => {
      if (active) onChange();
    };
    entry.watchers.add(watcher);
    const stop = () => {
      if (!active) return;
      active = false;
      entry.watchers.delete(watcher);
      this.#dropIfIdle(channel, entry);
    };
    if (entry.confirmed) return stop;
    let timer: NodeJS.Timeout | undefined;
    let armed: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        armed = resolve;
        entry.arming.add(resolve);
        timer = setTimeout(
          () => reject(new Error(`SUBSCRIBE ${channel} not confirmed within ${timeoutMs} ms`)),
          timeoutMs,
        );
        this.#sendSubscribe(channel, entry);
      });
    } catch (error) {
      stop();
      throw error;
    } finally {
      clearTimeout(timer);
      if (armed) entry.arming.delete(armed);
    }
    if (this.#closed) {
      stop();
      throw new Error('backend is closed');
    }
    return stop;
  }

  /**
   * A channel nobody of this process uses any more (no waiter, watcher or owner in its line) is
   * unsubscribed now; one whose line still has owners of this process lingers as after a wait.
   */
  #dropIfIdle(channel: string, entry: Channel): void {
    if (entry.waiters.size > 0 || entry.watchers.size > 0 || this.#closed) return;
    if (entry.queued.size > 0 || entry.missed.size > 0) {
      this.#scheduleUnsubscribe(channel, entry);
      return;
    }
    if (this.#channels.get(channel) !== entry) return;
    clearTimeout(entry.linger);
    this.#channels.delete(channel);
    // A SUBSCRIBE still out is undone on its answer.
    if (entry.confirmed) this.#subscriber?.unsubscribe(channel).catch(() => undefined);
  }

  /** Wake every waiter now, then quit the subscriber connection (within 1 s). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const channel of this.#channels.values()) {
      clearTimeout(channel.linger);
      for (const waiter of channel.waiters) waiter.wake(undefined);
      channel.watchers.clear();
      for (const armed of channel.arming) armed();
    }
    this.#channels.clear();
    if (this.#subscriber) await quit(this.#subscriber, CLOSE_TIMEOUT_MS);
  }

  /** The channel's entry, made (not yet subscribed) on its first wait. */
  #entryOf(channel: string): Channel {
    const existing = this.#channels.get(channel);
    if (existing) return existing;
    const entry: Channel = {
      waiters: new Set(),
      queued: new Set(),
      missed: new Map(),
      linger: undefined,
      confirmed: false,
      subscribing: false,
      watchers: new Set(),
      arming: new Set(),
    };
    this.#channels.set(channel, entry);
    return entry;
  }

  /**
   * Send the SUBSCRIBE of a channel not confirmed yet: one at a time, and only over a live
   * connection (else it is sent when the subscriber is ready), so that a server down for long
   * queues nothing. The confirmation wakes the channel's waiters (their first wait ends, lest a
   * release published before it was lost). A refused SUBSCRIBE (an ACL without it) only costs
   * latency: the waits run to their poll bound.
   */
  #sendSubscribe(channel: string, entry: Channel): void {
    if (entry.confirmed || entry.subscribing || this.#closed) return;
    const subscriber = this.#getSubscriber();
    // node-redis connects its duplicate on the first SUBSCRIBE; ioredis's is connected here.
    if (!(subscriber instanceof NodeRedisAdapter) && subscriber.status !== 'ready') return;
    entry.subscribing = true;
    subscriber.subscribe(channel).then(
      () => {
        entry.subscribing = false;
        const current = this.#channels.get(channel);
        if (current === undefined) {
          // Dropped while the SUBSCRIBE was out.
          subscriber.unsubscribe(channel).catch(() => undefined);
        } else if (!current.confirmed) {
          current.confirmed = true;
          for (const waiter of current.waiters) waiter.wake(undefined);
          for (const armed of current.arming) armed();
        }
      },
      () => {
        entry.subscribing = false;
      },
    );
  }

  #scheduleUnsubscribe(channel: string, entry: Channel): void {
    if (this.#closed) return;
    clearTimeout(entry.linger);
    entry.linger = setTimeout(() => {
      if (
        entry.waiters.size > 0 ||
        entry.watchers.size > 0 ||
        this.#channels.get(channel) !== entry
      ) {
        return;
      }
      this.#channels.delete(channel);
      // Never subscribed: nothing to undo (a SUBSCRIBE still out is undone on its answer).
      if (entry.confirmed) this.#subscriber?.unsubscribe(channel).catch(() => undefined);
    }, SUBSCRIPTION_LINGER_MS);
    entry.linger.unref();
  }

  #getSubscriber(): Redis | Cluster {
    if (this.#subscriber) return this.#subscriber;
    // A SUBSCRIBE sent as the connection drops waits for the next one: a Redlock node's client
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
    // (Re)connected: subscribe the channels waited on meanwhile (ioredis subscribes the
    // confirmed ones again by itself).
    subscriber.on('ready', () => {
      for (const [channel, entry] of this.#channels) this.#sendSubscribe(channel, entry);
      // Messages published while the subscriber was away are lost: watchers read again.
      for (const entry of this.#channels.values()) notifyAll(entry.watchers);
    });
    if (subscriber.status === 'wait') subscriber.connect().catch(() => undefined);
    subscriber.on('message', (channel: string, message: string) => {
      const receivedAt = performance.now();
      const entry = this.#channels.get(channel);
      if (entry === undefined) return;
      notifyAll(entry.watchers);
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

/** Call each watcher; one that throws does not keep the others from being called. */
function notifyAll(watchers: ReadonlySet<() => void>): void {
  for (const watcher of [...watchers]) {
    try {
      watcher();
    } catch {
      // A watcher's own failure is its own.
    }
  }
}
