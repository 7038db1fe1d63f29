/**
 * `watchElection` on the SQLite store. SQLite has no change notification: one poller per backend
 * watches the change signal line-watch.ts uses (the file's `PRAGMA data_version`, which moves
 * when another connection commits, and a count of this connection's own election commits, which
 * do not move it) every `ELECTION_POLL_MS` while any watch is armed, and none when none is. When
 * the signal moved, it reads the leader row of each watched election once (owner, term, value;
 * live rows only) and calls `onChange` of the watches whose leader differs from the one they saw
 * last: a grant, a proclaim, a release or withdrawal, and a lapse noticed at some commit. A
 * leader's expiry with no commit after it is not noticed (the core reads the leader again at its
 * TTL's end). A read that fails calls every watch (the core's read then reports the error).
 */
import type { ElectionWatch } from '../../core/backend.js';
import type { LineView } from './line-watch.js';

/**
 * How often the poller reads the file's change signal while a watch is armed, ms: an observer
 * sees a change within about this much (a `PRAGMA data_version` read is a look at the WAL index
 * in shared memory, no file I/O).
 */
export const ELECTION_POLL_MS = 20;

/**
 * `recheckAfterMs` of the watches, ms: low, as for any polled watch. The poll misses no commit,
 * but a lapse without a later commit goes unnotified, and a read that failed in the poller
 * leaves the observer's next read to tell.
 */
export const ELECTION_RECHECK_MS = 2_000;

/** What the poller reads: the backend's connection and its own election commits. */
export interface ElectionView extends Pick<LineView, 'isOpen' | 'dataVersion'> {
  /** Commits of this connection that changed an election (they do not move `data_version`). */
  electionChanges(): number;
}

/** One armed watch: its election, its callback, and the leader it saw last (`fingerprint`). */
interface Armed {
  readonly key: string;
  readonly onChange: () => void;
  seen: string | null;
}

/** The watches of one backend and their one poller. */
export class ElectionWatches {
  readonly #view: ElectionView;
  /** The leader of an election as owner, term and value in one string; null: none. */
  readonly #fingerprint: (key: string) => string | null;
  readonly #armed = new Set<Armed>();
  #timer: NodeJS.Timeout | undefined;
  /** The change signal at the poller's last look. */
  #signal: [bigint, number] | undefined;

  /**
   * @param view the backend's connection.
   * @param fingerprint reads an election's live leader (one statement) as one string.
   */
  constructor(view: ElectionView, fingerprint: (key: string) => string | null) {
    this.#view = view;
    this.#fingerprint = fingerprint;
  }

  /**
   * Arm a watch of `key`: its leader is read now (so every later change differs from what it
   * saw), and the poller runs from now on while any watch is armed.
   * @throws what the read throws (SQLite's error); nothing is armed then.
   */
  watch(key: string, onChange: () => void): ElectionWatch {
    const armed: Armed = { key, onChange, seen: null };
    if (this.#armed.size === 0) this.#signal = this.#readSignal();
    armed.seen = this.#fingerprint(key);
    this.#armed.add(armed);
    this.#schedule();
    return {
      recheckAfterMs: ELECTION_RECHECK_MS,
      stop: () => {
        this.#armed.delete(armed);
        if (this.#armed.size === 0) this.#halt();
      },
    };
  }

  /** End every watch (the backend closes): no callback after it, no timer left. */
  close(): void {
    this.#armed.clear();
    this.#halt();
  }

  #readSignal(): [bigint, number] {
    return [this.#view.dataVersion(), this.#view.electionChanges()];
  }

  #schedule(): void {
    if (this.#timer === undefined && this.#armed.size > 0) {
      this.#timer = setTimeout(() => this.#poll(), ELECTION_POLL_MS);
    }
  }

  #halt(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #poll(): void {
    this.#timer = undefined;
    if (!this.#view.isOpen()) {
      this.close();
      return;
    }
    let due: Armed[];
    try {
      const signal = this.#readSignal();
      const last = this.#signal;
      if (last !== undefined && signal[0] === last[0] && signal[1] === last[1]) {
        this.#schedule();
        return;
      }
      this.#signal = signal;
      const leaders = new Map<string, string | null>();
      due = [];
      for (const armed of this.#armed) {
        if (!leaders.has(armed.key)) leaders.set(armed.key, this.#fingerprint(armed.key));
        const now = leaders.get(armed.key)!;
        if (now !== armed.seen) {
          armed.seen = now;
          due.push(armed);
        }
      }
    } catch {
      // Read the signal again next time, and let every observer read (and meet the error).
      this.#signal = undefined;
      due = [...this.#armed];
    }
    this.#schedule();
    for (const armed of due) {
      // A callback may stop other watches (or close the backend): no call after that.
      if (this.#armed.has(armed)) armed.onChange();
    }
  }
}
