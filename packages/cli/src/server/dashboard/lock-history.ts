/**
 * Recent history of each lock for the dashboard's detail page: grants, releases and losses with
 * their fencing tokens. Two sources feed it: this process's own lock events on the sidecar's
 * store (diagnostics_channel, so the grants and releases made through the sidecar, with the
 * reason of a loss), and the changes `LockWatch` sees between two listings while a dashboard is
 * open (so grants made by other processes too; a holder that left between two listings "ended":
 * released or expired, the listing cannot tell which). Bounded: `MAX_ENTRIES_PER_KEY` entries
 * per key, `MAX_KEYS` keys (the least recently changed go first).
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { type AcquireEvent, CHANNELS, type LostEvent, type ReleaseEvent } from 'fencelock';

/** Entries kept per key (the oldest go first). */
export const MAX_ENTRIES_PER_KEY = 50;
/** Keys with a history kept at once (the least recently changed go first). */
export const MAX_KEYS = 1_000;

/** One change of a lock's holders. */
export interface HistoryEntry {
  /** When it was seen, ms since the epoch. */
  readonly at: number;
  /** `ended`: gone from the listing, by release or expiry. */
  readonly event: 'granted' | 'released' | 'lost' | 'ended';
  readonly owner: string;
  /** Decimal text (a bigint). */
  readonly fencingToken: string;
  /** Why a lease was lost (`expired`, `session-lost`, …); `lost` entries only. */
  readonly reason?: string;
}

type Listener = (key: string, entry: HistoryEntry) => void;

/** The recent history of each lock, bounded as the module says; `now` injected for tests. */
export class LockHistory {
  readonly #entries = new Map<string, HistoryEntry[]>();
  readonly #listeners = new Set<Listener>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Record the events of the locker named `store` (its `name`) published in this process.
   * @returns stop (idempotent).
   */
  follow(store: string): () => void {
    const handlers: [string, (message: unknown) => void][] = [
      [
        CHANNELS.acquire,
        (m) => {
          const e = m as AcquireEvent;
          if (e.store !== store || e.outcome !== 'granted' || e.fencingToken === undefined) return;
          this.record(e.key, 'granted', e.owner, e.fencingToken);
        },
      ],
      [
        CHANNELS.release,
        (m) => {
          const e = m as ReleaseEvent;
          if (e.store !== store || e.outcome !== 'released') return;
          this.record(e.key, 'released', e.owner, e.fencingToken);
        },
      ],
      [
        CHANNELS.lost,
        (m) => {
          const e = m as LostEvent;
          if (e.store !== store) return;
          this.record(e.key, 'lost', e.owner, e.fencingToken, e.reason);
        },
      ],
    ];
    for (const [name, fn] of handlers) diagnostics_channel.subscribe(name, fn);
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      for (const [name, fn] of handlers) diagnostics_channel.unsubscribe(name, fn);
    };
  }

  /**
   * Add an entry, unless the key's log already tells it: a grant seen both as an event and in a
   * listing is one grant; an `ended` after a release or loss of the same grant adds nothing, and
   * a release or loss that comes after a listing told `ended` takes that entry's place (it says
   * more).
   */
  record(
    key: string,
    event: HistoryEntry['event'],
    owner: string,
    fencingToken: bigint | string,
    reason?: string,
  ): void {
    const token = String(fencingToken);
    const log = this.#entries.get(key) ?? [];
    if (event === 'released' || event === 'lost') {
      const ended = log.findIndex(
        (e) => e.event === 'ended' && e.owner === owner && e.fencingToken === token,
      );
      if (ended >= 0) log.splice(ended, 1);
    }
    const told = log.some(
      (e) =>
        e.owner === owner &&
        e.fencingToken === token &&
        (event === 'granted' ? e.event === 'granted' : e.event !== 'granted'),
    );
    if (told) return;
    const entry: HistoryEntry = {
      at: this.#now(),
      event,
      owner,
      fencingToken: token,
      ...(reason === undefined ? {} : { reason }),
    };
    log.push(entry);
    if (log.length > MAX_ENTRIES_PER_KEY) log.shift();
    // Map order is insertion order: moving the key to the end keeps the oldest-changed first.
    this.#entries.delete(key);
    this.#entries.set(key, log);
    if (this.#entries.size > MAX_KEYS) {
      this.#entries.delete(this.#entries.keys().next().value as string);
    }
    for (const listener of this.#listeners) listener(key, entry);
  }

  /** The key's entries, oldest first (empty when none were seen). */
  of(key: string): readonly HistoryEntry[] {
    return this.#entries.get(key) ?? [];
  }

  /** Call `listener` with every new entry. @returns unsubscribe. */
  subscribe(listener: Listener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
