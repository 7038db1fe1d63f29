/**
 * Live listings for the dashboard: while at least one page watches a prefix, the sidecar reads
 * the held keys under it (`locker.listPage`, at most `MAX_WATCHED_KEYS` keys) every
 * `WATCH_INTERVAL_MS` and hands each snapshot to the pages watching it. One read per prefix
 * however many pages watch it; none when nobody does. The changes between two snapshots go to
 * the lock history (grants made by any process, holders gone).
 *
 * A listing walks the store's pages from the start to the end (or to `MAX_WATCHED_KEYS` keys):
 * a snapshot never leaves out a held key for lack of time. Where pages can come back short or
 * empty (Redis scans the whole keyspace for a prefix), the walk reads at most
 * `PAGES_PER_STEP` pages at a time and goes on from its cursor `STEP_PAUSE_MS` later, so one
 * listing of a large keyspace is spread over steps instead of holding the store busy.
 */
import { type Locker, MAX_LIST_PAGE_SIZE } from 'fencelock';
import { type ListedLockJson, listedLockJson } from '../../listed-lock-json.js';
import type { LockHistory } from './lock-history.js';

/** Time between the end of one listing and the start of the next, ms. */
export const WATCH_INTERVAL_MS = 500;
/** Most keys in a snapshot; a listing with more is cut there and says so (`truncated`). */
export const MAX_WATCHED_KEYS = 500;
/** Keys asked per page of the store (the most `listPage` takes). */
const PAGE_SIZE = MAX_LIST_PAGE_SIZE;
/** Pages read in one step of a listing. */
export const PAGES_PER_STEP = 10;
/** Pause between two steps of one listing, ms. */
export const STEP_PAUSE_MS = 20;

/** A holder as the dashboard shows it. */
export interface WatchedHolder {
  readonly owner: string;
  readonly fencingToken: string;
  /** Remaining engine TTL, ms. */
  readonly ttlMs: number;
  /**
   * Time since the grant, ms: from its grant event when it went through this sidecar, else
   * since the first listing that showed it (a lower bound).
   */
  readonly heldForMs: number;
}

/** A held key as the dashboard shows it: `listedLockJson`'s shape, each holder with `heldForMs`. */
export interface WatchedLock extends Omit<ListedLockJson, 'holders'> {
  readonly holders: readonly WatchedHolder[];
}

/** One listing of a watched prefix, as the `locks` event carries it. */
export interface LocksSnapshot {
  /** When the listing ended, ms since the epoch. */
  readonly at: number;
  readonly prefix: string;
  readonly locks: readonly WatchedLock[];
  /** More keys are held under the prefix than `MAX_WATCHED_KEYS`. */
  readonly truncated: boolean;
  /** Why this listing failed (the previous one's locks are not repeated). */
  readonly error?: string;
}

type Listener = (snapshot: LocksSnapshot) => void;

interface SeenHolder {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: string;
  /** Grant time (or first sight), ms since the epoch. */
  readonly since: number;
}

interface Watch {
  readonly listeners: Set<Listener>;
  /** The holders of the last snapshot, by `key\0owner\0token`. */
  seen: Map<string, SeenHolder>;
  last: LocksSnapshot | undefined;
  timer: NodeJS.Timeout | undefined;
  /** The listing under way: the keys read so far and where it goes on. */
  walk: { readonly locks: ListedLockJson[]; cursor: string | null } | undefined;
}

/** The live listings of the prefixes pages watch, one listing loop per prefix. */
export class LockWatch {
  readonly #locker: Locker;
  readonly #history: LockHistory;
  readonly #signal: AbortSignal;
  readonly #watches = new Map<string, Watch>();

  /** `signal`: the sidecar's shutdown; once aborted, no listing starts. */
  constructor(locker: Locker, history: LockHistory, signal: AbortSignal) {
    this.#locker = locker;
    this.#history = history;
    this.#signal = signal;
  }

  /** Prefixes listed now. */
  get size(): number {
    return this.#watches.size;
  }

  /** Whether `prefix` is listed now. */
  has(prefix: string): boolean {
    return this.#watches.has(prefix);
  }

  /**
   * Watch the keys under `prefix`: `listener` gets the last snapshot at once if there is one,
   * then each new one. @returns stop watching (idempotent).
   */
  watch(prefix: string, listener: Listener): () => void {
    let watch = this.#watches.get(prefix);
    if (watch === undefined) {
      watch = {
        listeners: new Set(),
        seen: new Map(),
        last: undefined,
        timer: undefined,
        walk: undefined,
      };
      this.#watches.set(prefix, watch);
      void this.#poll(prefix, watch);
    } else if (watch.last !== undefined) {
      listener(watch.last);
    }
    watch.listeners.add(listener);
    const current = watch;
    return () => {
      current.listeners.delete(listener);
      if (current.listeners.size > 0 || this.#watches.get(prefix) !== current) return;
      clearTimeout(current.timer);
      this.#watches.delete(prefix);
    };
  }

  async #poll(prefix: string, watch: Watch): Promise<void> {
    if (this.#signal.aborted || this.#watches.get(prefix) !== watch) return;
    let snapshot: LocksSnapshot | undefined;
    try {
      const read = await this.#step(prefix, watch);
      if (read !== undefined) snapshot = this.#snapshot(prefix, watch, read);
    } catch (error) {
      if (this.#signal.aborted) return;
      watch.walk = undefined;
      const message = error instanceof Error ? error.message : String(error);
      snapshot = { at: Date.now(), prefix, locks: [], truncated: false, error: message };
    }
    if (this.#watches.get(prefix) !== watch) return;
    if (snapshot !== undefined) {
      watch.last = snapshot;
      for (const listener of watch.listeners) listener(snapshot);
    }
    const pause = snapshot === undefined ? STEP_PAUSE_MS : WATCH_INTERVAL_MS;
    watch.timer = setTimeout(() => void this.#poll(prefix, watch), pause);
  }

  /**
   * Read up to `PAGES_PER_STEP` pages of the listing under way (a new one if none is).
   * @returns the listing once it reached the store's end or `MAX_WATCHED_KEYS` keys; undefined
   *   while it goes on.
   */
  async #step(
    prefix: string,
    watch: Watch,
  ): Promise<{ locks: ListedLockJson[]; truncated: boolean } | undefined> {
    watch.walk ??= { locks: [], cursor: null };
    const walk = watch.walk;
    for (let page = 0; page < PAGES_PER_STEP; page++) {
      const answer = await this.#locker.listPage({
        prefix,
        cursor: walk.cursor,
        pageSize: PAGE_SIZE,
        signal: this.#signal,
      });
      walk.locks.push(...answer.entries.map(listedLockJson));
      walk.cursor = answer.cursor;
      if (walk.cursor === null || walk.locks.length > MAX_WATCHED_KEYS) {
        watch.walk = undefined;
        const truncated = walk.locks.length > MAX_WATCHED_KEYS || walk.cursor !== null;
        return { locks: walk.locks.slice(0, MAX_WATCHED_KEYS), truncated };
      }
    }
    return undefined;
  }

  /** The snapshot of a listing, its changes since the last one recorded in the history. */
  #snapshot(
    prefix: string,
    watch: Watch,
    read: { locks: ListedLockJson[]; truncated: boolean },
  ): LocksSnapshot {
    const now = Date.now();
    const seen = new Map<string, SeenHolder>();
    const locks = read.locks.map((lock) => ({
      ...lock,
      holders: lock.holders.map((holder) => {
        const id = `${lock.key}\0${holder.owner}\0${holder.fencingToken}`;
        let since = watch.seen.get(id)?.since;
        if (since === undefined) {
          const granted = this.#history
            .of(lock.key)
            .findLast((e) => e.event === 'granted' && e.fencingToken === holder.fencingToken);
          since = granted?.at ?? now;
          this.#history.record(lock.key, 'granted', holder.owner, holder.fencingToken);
        }
        seen.set(id, {
          key: lock.key,
          owner: holder.owner,
          fencingToken: holder.fencingToken,
          since,
        });
        return { ...holder, heldForMs: now - since };
      }),
    }));
    // Holders gone since the last listing, unless the listing was cut (they may be past it).
    if (!read.truncated && watch.last?.truncated !== true) {
      for (const [id, gone] of watch.seen) {
        if (!seen.has(id)) this.#history.record(gone.key, 'ended', gone.owner, gone.fencingToken);
      }
    }
    watch.seen = seen;
    return { at: now, prefix, locks, truncated: read.truncated };
  }

  /** Stop every watch (the sidecar's close). */
  close(): void {
    for (const watch of this.#watches.values()) clearTimeout(watch.timer);
    this.#watches.clear();
  }
}
