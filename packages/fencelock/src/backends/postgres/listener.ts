/**
 * Release notifications for waiters: one connection per backend runs `LISTEN` on the schema's
 * channel, and each notification (payload: the released key) wakes the longest-waiting local
 * waiter of that key, so a release sends one contender per process to the table, not all of
 * them (no herd).
 *
 * A release can be notified between an attempt's answer and the moment its waiter registers.
 * So every attempt first takes a `mark` (how many notifications this listener has seen), and a
 * waiter whose key was notified after its mark goes at once. A mark taken while the listener
 * was not listening yet is -1: that waiter goes as soon as LISTEN is confirmed, and its next
 * attempt is covered. When the connection drops, every waiter goes (and the core's poll,
 * bounded by the holder's remaining TTL, covers the time without a listener).
 */
import type pg from 'pg';
import { startWait } from '../../core/wait.js';

/** Recent notifications remembered per key for waiters that register late. */
const RECENT_LIMIT = 4_096;
/** After a failed connect, the next try waits at least this long, ms. */
const RECONNECT_PAUSE_MS = 1_000;

interface Waiter {
  wake(): void;
}

export class ReleaseListener {
  readonly #connect: () => Promise<pg.Client>;
  readonly #channel: string;
  #client: pg.Client | undefined;
  #connecting: Promise<void> | undefined;
  #listening = false;
  #failedAt = Number.NEGATIVE_INFINITY;
  #closed = false;
  /** Notifications seen (and connection losses), the clock of marks. */
  #epoch = 0;
  /** Epoch of the last connection loss: marks older than it missed notifications. */
  #lostAt = 0;
  /** key → epoch of its last notification, oldest first, at most RECENT_LIMIT entries. */
  readonly #recent = new Map<string, number>();
  /** Highest epoch dropped from `#recent`: marks older than it may have missed one. */
  #forgottenUpTo = 0;
  readonly #waiters = new Map<string, Set<Waiter>>();
  /** Waiters of any key waiting for LISTEN to be confirmed. */
  readonly #pendingListen = new Set<Waiter>();

  /**
   * @param connect opens a dedicated connection (never a pooled one shared with statements).
   * @param channel the channel name (any string; quoted for LISTEN).
   */
  constructor(connect: () => Promise<pg.Client>, channel: string) {
    this.#connect = connect;
    this.#channel = channel;
  }

  /** Take before an attempt; starts listening if needed. -1 while not listening yet. */
  mark(): number {
    this.#ensureListening();
    return this.#listening ? this.#epoch : -1;
  }

  /**
   * Resolve when `key` is notified, the listener's state makes waiting pointless (see the module
   * comment), `maxMs` passes or `signal` aborts. Never rejects.
   */
  wait(key: string, mark: number, signal: AbortSignal, maxMs: number): Promise<void> {
    if (this.#closed || signal.aborted) return Promise.resolve();
    if (mark >= 0 && this.#missedSince(key, mark)) return Promise.resolve();
    const wait = startWait(signal, maxMs, () => {
      this.#pendingListen.delete(waiter);
      const set = this.#waiters.get(key);
      set?.delete(waiter);
      if (set?.size === 0) this.#waiters.delete(key);
    });
    const waiter: Waiter = { wake: wait.wake };
    let waiters = this.#waiters.get(key);
    if (waiters === undefined) {
      waiters = new Set();
      this.#waiters.set(key, waiters);
    }
    waiters.add(waiter);
    if (mark < 0) {
      if (this.#listening) waiter.wake();
      else this.#pendingListen.add(waiter);
    }
    return wait.ended.then(() => undefined);
  }

  /** Stop listening, wake every waiter, close the connection. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#wakeAll();
    await this.#connecting?.catch(() => undefined);
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    await client?.end().catch(() => undefined);
  }

  #missedSince(key: string, mark: number): boolean {
    if (mark < this.#lostAt || mark < this.#forgottenUpTo) return true;
    return (this.#recent.get(key) ?? -1) > mark;
  }

  #ensureListening(): void {
    if (this.#closed || this.#client !== undefined || this.#connecting !== undefined) return;
    if (performance.now() - this.#failedAt < RECONNECT_PAUSE_MS) return;
    this.#connecting = this.#listen().finally(() => {
      this.#connecting = undefined;
    });
  }

  async #listen(): Promise<void> {
    let client: pg.Client | undefined;
    try {
      client = await this.#connect();
      if (this.#closed) {
        await client.end().catch(() => undefined);
        return;
      }
      const listening = client;
      client.on('notification', (message) => {
        if (this.#client === listening && message.channel === this.#channel) {
          this.#notified(message.payload ?? '');
        }
      });
      client.on('error', () => this.#dropped(listening));
      client.on('end', () => this.#dropped(listening));
      this.#client = client;
      await client.query(`LISTEN "${this.#channel.replaceAll('"', '""')}"`);
      if (this.#client !== client) return;
      this.#listening = true;
      for (const waiter of [...this.#pendingListen]) waiter.wake();
    } catch {
      this.#failedAt = performance.now();
      if (client !== undefined) this.#dropped(client);
    }
  }

  #notified(key: string): void {
    this.#epoch += 1;
    this.#recent.delete(key);
    this.#recent.set(key, this.#epoch);
    if (this.#recent.size > RECENT_LIMIT) {
      const [oldestKey, oldestEpoch] = this.#recent.entries().next().value as [string, number];
      this.#recent.delete(oldestKey);
      this.#forgottenUpTo = oldestEpoch;
    }
    // The longest-waiting waiter of the key (a Set iterates in insertion order).
    const first = this.#waiters.get(key)?.values().next();
    if (first !== undefined && !first.done) first.value.wake();
  }

  #dropped(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#listening = false;
    this.#epoch += 1;
    this.#lostAt = this.#epoch;
    client.end().catch(() => undefined);
    this.#wakeAll();
  }

  #wakeAll(): void {
    for (const set of [...this.#waiters.values()]) for (const waiter of [...set]) waiter.wake();
    for (const waiter of [...this.#pendingListen]) waiter.wake();
  }
}
