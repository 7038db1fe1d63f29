/**
 * Release notifications for waiters: one connection per backend runs `LISTEN` on the schema's
 * channel, and each notification names the released key and the head of its line
 * (`parseNotice`). It wakes that waiter if it waits here, and nobody else: only the head can be
 * granted (no herd). A notification of a key nobody is lined up for wakes the longest-waiting
 * local waiter of the key. A semaphore's notices (payload `p…`) name the one waiter a freed
 * permit lets in, and go to the semaphore's line (`permitLineOf`), apart from the lock's of the
 * same key. An election's (payload `e…`, election-sql.ts) name the head of the election's line
 * (`electionLineOf`) and also reach the election's watchers; an election's change notice
 * (payload `c0:<key>`, a grant or a proclaim) reaches its watchers only.
 *
 * A release can be notified between an attempt's answer and the moment its waiter registers.
 * So every attempt first takes a `mark` (how many notifications this listener has seen), and a
 * waiter whose key was notified after its mark goes at once. A mark taken while the listener
 * was not listening yet is -1: that waiter goes as soon as LISTEN is confirmed, and its next
 * attempt is covered. When the connection drops, every waiter goes (and the core's poll,
 * bounded by the holder's remaining TTL, covers the time without a listener).
 *
 * Election watchers (`watch`, for `Backend.watchElection`) share this connection: one LISTEN per
 * backend, however many watches. A watch is armed once LISTEN is confirmed. Notices are lost
 * only while the connection is down, so every watcher is called when it drops, at each failed
 * reconnect (every `RECONNECT_PAUSE_MS` while watchers exist: a poll while nothing can be heard)
 * and once LISTEN is confirmed again.
 */
import type pg from 'pg';
import type { NotGranted } from '../../core/backend.js';
import { startWait } from '../../core/wait.js';
import { LINE_RECHECK_MS } from '../waiting-line.js';

/** Recent notifications remembered per line for waiters that register late. */
const RECENT_LIMIT = 4_096;
/** After a failed connect, the next try waits at least this long, ms. */
const RECONNECT_PAUSE_MS = 1_000;

interface Waiter {
  /** The contender waiting: a notification addressed to it wakes it and no other. */
  readonly owner: string;
  wake(): void;
}

/** What a release notification says (`parseNotice`). */
export interface Notice {
  /** The released key. */
  readonly key: string;
  /** The owner the notice wakes (the head of the key's line), or undefined: the longest waiter. */
  readonly head: string | undefined;
  /** Set for a semaphore's notice: it is for the semaphore's line of `key`, not the lock's. */
  readonly semaphore?: true;
  /**
   * Set for an election's notice: `line`, for the election's line of `key` (a release or a
   * withdrawal; its watchers are told too); `change`, for its watchers only (a grant, a proclaim).
   */
  readonly election?: 'line' | 'change';
}

/**
 * The listener's name of a semaphore's line of waiters: the key after a NUL, which no key holds,
 * so that it never meets the line of a lock of the same key (named by the key itself).
 */
export function permitLineOf(key: string): string {
  return `\u0000${key}`;
}

/**
 * The listener's name of an election's line of waiters: the key after two NULs, which no key or
 * `permitLineOf` name holds.
 */
export function electionLineOf(key: string): string {
  return `\u0000\u0000${key}`;
}

/**
 * What a release notification says: the key, and the owner at the head of its line when someone
 * waits (the payload `<owner length>:<owner><key>`, the length in characters, or `0:<key>`); with
 * a leading `p` (`p<owner length>:<owner><key>`), the same for a semaphore, naming the waiter a
 * freed permit lets in; with a leading `e`, the same for an election's line; `c0:<key>`, an
 * election's grant or proclaim (for its watchers). A payload of another form is read as a bare
 * key.
 */
export function parseNotice(payload: string): Notice {
  const kind = payload.charAt(0);
  if (kind === 'p' || kind === 'e' || kind === 'c') {
    const notice = parseAddressed(payload.slice(1));
    if (notice !== undefined) {
      if (kind === 'p') return { ...notice, semaphore: true };
      if (kind === 'e') return { ...notice, election: 'line' };
      if (notice.head === undefined) return { ...notice, election: 'change' };
    }
  }
  return parseAddressed(payload) ?? { key: payload, head: undefined };
}

/** `<owner length>:<owner><key>` (or `0:<key>`), or undefined when `payload` has another form. */
function parseAddressed(payload: string): Notice | undefined {
  const colon = payload.indexOf(':');
  const length = colon > 0 ? Number(payload.slice(0, colon)) : Number.NaN;
  if (!Number.isSafeInteger(length) || length < 0) return undefined;
  let end = colon + 1;
  for (let n = 0; n < length; n++) {
    const codePoint = payload.codePointAt(end);
    if (codePoint === undefined) return undefined;
    end += codePoint > 0xffff ? 2 : 1;
  }
  return {
    key: payload.slice(end),
    head: length === 0 ? undefined : payload.slice(colon + 1, end),
  };
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
  /** line → epoch of its last notification, oldest first, at most RECENT_LIMIT entries. */
  readonly #recent = new Map<string, number>();
  /** Highest epoch dropped from `#recent`: marks older than it may have missed one. */
  #forgottenUpTo = 0;
  readonly #waiters = new Map<string, Set<Waiter>>();
  /** Waiters of any key waiting for LISTEN to be confirmed. */
  readonly #pendingListen = new Set<Waiter>();
  /** Election key → the `onChange` of its watches (`watch`). */
  readonly #watchers = new Map<string, Set<() => void>>();
  /** The next reconnect while watchers exist and the connection is down (unref'd). */
  #reconnectTimer: NodeJS.Timeout | undefined;
  /** Why the latest connect or LISTEN failed, for a watch that could not be armed. */
  #lastFailure: unknown;

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
   * Resolve when `line` is notified, the listener's state makes waiting pointless (see the module
   * comment), `maxMs` passes or `signal` aborts. Never rejects.
   * @param line a lock's key, or a semaphore's `permitLineOf(key)`.
   */
  wait(
    line: string,
    owner: string,
    mark: number,
    signal: AbortSignal,
    maxMs: number,
  ): Promise<void> {
    if (this.#closed || signal.aborted) return Promise.resolve();
    if (mark >= 0 && this.#missedSince(line, mark)) return Promise.resolve();
    const wait = startWait(signal, maxMs, () => {
      this.#pendingListen.delete(waiter);
      const set = this.#waiters.get(line);
      set?.delete(waiter);
      if (set?.size === 0) this.#waiters.delete(line);
    });
    const waiter: Waiter = { owner, wake: wait.wake };
    let waiters = this.#waiters.get(line);
    if (waiters === undefined) {
      waiters = new Set();
      this.#waiters.set(line, waiters);
    }
    waiters.add(waiter);
    if (mark < 0) {
      if (this.#listening) waiter.wake();
      else this.#pendingListen.add(waiter);
    }
    return wait.ended.then(() => undefined);
  }

  /**
   * Call `onChange` after every notice of election `key` (its line's and its changes), and when
   * notices may have been missed (see the module comment). Resolves once LISTEN is confirmed,
   * with the function that ends the watch (synchronous, idempotent; no call after it).
   * @throws the connection's or LISTEN's error when it cannot listen now, or when closed.
   */
  async watch(key: string, onChange: () => void): Promise<() => void> {
    let active = true;
    const watcher = () => {
      if (active) onChange();
    };
    const stop = () => {
      if (!active) return;
      active = false;
      const set = this.#watchers.get(key);
      set?.delete(watcher);
      if (set?.size === 0) this.#watchers.delete(key);
      if (this.#watchers.size === 0) this.#clearReconnect();
    };
    let set = this.#watchers.get(key);
    if (set === undefined) {
      set = new Set();
      this.#watchers.set(key, set);
    }
    set.add(watcher);
    try {
      await this.#armed();
    } catch (error) {
      stop();
      throw error;
    }
    return stop;
  }

  /** Resolves once LISTEN is confirmed (connecting now, whatever the reconnect pause). */
  async #armed(): Promise<void> {
    if (this.#closed) throw new Error('listener is closed');
    if (this.#listening) return;
    await this.#connectNow();
    if (!this.#listening) {
      throw this.#lastFailure instanceof Error
        ? this.#lastFailure
        : new Error('LISTEN was not confirmed');
    }
  }

  /** Stop listening, wake every waiter, close the connection. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#clearReconnect();
    this.#watchers.clear();
    this.#wakeAll();
    await this.#connecting?.catch(() => undefined);
    const client = this.#client;
    this.#client = undefined;
    this.#listening = false;
    await client?.end().catch(() => undefined);
  }

  #missedSince(line: string, mark: number): boolean {
    if (mark < this.#lostAt || mark < this.#forgottenUpTo) return true;
    return (this.#recent.get(line) ?? -1) > mark;
  }

  #ensureListening(): void {
    if (this.#closed || this.#client !== undefined || this.#connecting !== undefined) return;
    if (performance.now() - this.#failedAt < RECONNECT_PAUSE_MS) return;
    void this.#connectNow();
  }

  /** Connect and LISTEN now, or join the attempt under way; never rejects. */
  #connectNow(): Promise<void> {
    this.#connecting ??= this.#listen().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
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
      // Changes made while nobody listened were not heard.
      this.#callWatchers(undefined);
    } catch (error) {
      this.#failedAt = performance.now();
      this.#lastFailure = error;
      if (client !== undefined) this.#dropped(client);
      // Nothing can be heard now: the watchers read again (a poll) and the next try is planned.
      this.#callWatchers(undefined);
      this.#planReconnect();
    }
  }

  /** Call the watchers of election `key`, or every watcher (undefined). */
  #callWatchers(key: string | undefined): void {
    const sets = key === undefined ? [...this.#watchers.values()] : [this.#watchers.get(key)];
    for (const set of sets) {
      for (const watcher of [...(set ?? [])]) {
        try {
          watcher();
        } catch {
          // A watcher's own failure is not the listener's.
        }
      }
    }
  }

  /** While watchers exist and nobody listens, try again after `RECONNECT_PAUSE_MS`. */
  #planReconnect(): void {
    if (this.#closed || this.#watchers.size === 0 || this.#reconnectTimer !== undefined) return;
    this.#reconnectTimer = setTimeout(() => {
      this.#reconnectTimer = undefined;
      if (this.#watchers.size > 0 && this.#client === undefined) void this.#connectNow();
    }, RECONNECT_PAUSE_MS);
    this.#reconnectTimer.unref();
  }

  #clearReconnect(): void {
    clearTimeout(this.#reconnectTimer);
    this.#reconnectTimer = undefined;
  }

  #notified(payload: string): void {
    const { key, head, semaphore, election } = parseNotice(payload);
    if (election !== undefined) this.#callWatchers(key);
    // A grant or a proclaim lets no waiter in.
    if (election === 'change') return;
    const line = semaphore ? permitLineOf(key) : election === 'line' ? electionLineOf(key) : key;
    this.#epoch += 1;
    this.#recent.delete(line);
    this.#recent.set(line, this.#epoch);
    if (this.#recent.size > RECENT_LIMIT) {
      const [oldestLine, oldestEpoch] = this.#recent.entries().next().value as [string, number];
      this.#recent.delete(oldestLine);
      this.#forgottenUpTo = oldestEpoch;
    }
    const waiters = this.#waiters.get(line);
    if (waiters === undefined) return;
    if (head !== undefined) {
      // Only the head can be granted; when it waits elsewhere, nobody here goes.
      for (const waiter of waiters) {
        if (waiter.owner === head) {
          waiter.wake();
          break;
        }
      }
      return;
    }
    // The longest-waiting waiter of the line (a Set iterates in insertion order).
    const first = waiters.values().next();
    if (!first.done) first.value.wake();
  }

  #dropped(client: pg.Client): void {
    if (this.#client !== client) return;
    this.#client = undefined;
    this.#listening = false;
    this.#epoch += 1;
    this.#lostAt = this.#epoch;
    client.end().catch(() => undefined);
    this.#wakeAll();
    if (!this.#closed) {
      this.#callWatchers(undefined);
      this.#planReconnect();
    }
  }

  #wakeAll(): void {
    for (const set of [...this.#waiters.values()]) for (const waiter of [...set]) waiter.wake();
    for (const waiter of [...this.#pendingListen]) waiter.wake();
  }
}

/**
 * The answer to an attempt (a lock's, write or read, or a semaphore permit's) that was not
 * granted: the holder's time left as the statement read it (`remainingMs`, whole ms as text,
 * clamped at 0; absent when it read none), and with a listener, whether the attempt stands in
 * the line (`queued`) and how to wait for a notification addressed to `owner` in `line` (a
 * lock's key, or a semaphore's `permitLineOf(key)`).
 */
export function notGrantedIn(
  listener: ReleaseListener | undefined,
  line: string,
  owner: string,
  mark: number,
  queued: boolean,
  remainingMs: string | null | undefined,
): NotGranted {
  const holder = remainingMs == null ? {} : { holderTtlMs: Math.max(0, Number(remainingMs)) };
  if (listener === undefined) return { granted: false, ...holder };
  return {
    granted: false,
    queued,
    ...holder,
    // Waiters attempt at least this often, which keeps their line entries alive.
    recheckAfterMs: LINE_RECHECK_MS,
    waitForChange: (signal, maxMs) => listener.wait(line, owner, mark, signal, maxMs),
  };
}
