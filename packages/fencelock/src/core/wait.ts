/**
 * "Wait for an event, a deadline or an abort", written once: the waits on a release notification
 * (Redis pub/sub, PostgreSQL LISTEN), on a predecessor's deletion (etcd and ZooKeeper watches)
 * and the core's wait for an engine's answer all end on the first of the three, and each must
 * clear its timer and its abort listener whichever comes first.
 */
import { MAX_TIMER_MS } from '../options.js';

/** How a wait ended: `event` (woken), `deadline` (`maxMs` passed) or `abort` (the signal). */
export type WaitEnd = 'event' | 'deadline' | 'abort';

/** A wait in progress. */
export interface Wait {
  /** Resolves once, with how the wait ended; never rejects. */
  readonly ended: Promise<WaitEnd>;
  /** End the wait as `event` (the thing waited for happened). Idempotent; no-op once ended. */
  readonly wake: () => void;
  /** True once the wait ended, however. */
  isDone(): boolean;
}

/**
 * Start a wait that ends on the first of: `wake()`, `maxMs` passing, or `signal` aborting. At
 * its end the timer is cleared, the abort listener removed and `onEnd` called, once, before
 * `ended` resolves; nothing is left behind.
 *
 * @param signal ends the wait as `abort`; already aborted: the wait ends at once (and `onEnd`
 *   runs during this call).
 * @param maxMs longest wait, ms; negative counts as 0; above `MAX_TIMER_MS` (about 24.8 days,
 *   the longest delay `setTimeout` keeps: Node runs a longer one after 1 ms) counts as
 *   `MAX_TIMER_MS`; `Infinity` (or any non-finite value) makes no timer: the wait then ends only
 *   on `wake()` or `signal`.
 * @param onEnd clean-up of the caller's own (unregister a waiter), run synchronously at the end.
 */
export function startWait(
  signal: AbortSignal | undefined,
  maxMs: number,
  onEnd?: (end: WaitEnd) => void,
): Wait {
  return new PendingWait(signal, maxMs, onEnd);
}

/**
 * One wait. Only what a wait uses is made: the timer for a finite `maxMs`, the abort listener for
 * a signal, and the `ended` promise when someone reads it (the acquire loop's race on an
 * engine's answer never does), so a wait that is woken at once costs one small object.
 */
class PendingWait implements Wait {
  readonly wake = (): void => this.#finish('event');
  readonly #signal: AbortSignal | undefined;
  readonly #onEnd: ((end: WaitEnd) => void) | undefined;
  #timer: NodeJS.Timeout | undefined;
  #onAbort: (() => void) | undefined;
  /** How the wait ended, once it did. */
  #end: WaitEnd | undefined;
  #ended: Promise<WaitEnd> | undefined;
  #resolve: ((end: WaitEnd) => void) | undefined;

  constructor(
    signal: AbortSignal | undefined,
    maxMs: number,
    onEnd: ((end: WaitEnd) => void) | undefined,
  ) {
    this.#signal = signal;
    this.#onEnd = onEnd;
    if (signal?.aborted) {
      this.#finish('abort');
      return;
    }
    if (Number.isFinite(maxMs)) {
      const delayMs = Math.min(Math.max(0, maxMs), MAX_TIMER_MS);
      this.#timer = setTimeout(() => this.#finish('deadline'), delayMs);
    }
    if (signal !== undefined) {
      this.#onAbort = () => this.#finish('abort');
      signal.addEventListener('abort', this.#onAbort, { once: true });
    }
  }

  get ended(): Promise<WaitEnd> {
    if (this.#ended === undefined) {
      const end = this.#end;
      this.#ended =
        end === undefined
          ? new Promise<WaitEnd>((resolve) => {
              this.#resolve = resolve;
            })
          : Promise.resolve(end);
    }
    return this.#ended;
  }

  isDone(): boolean {
    return this.#end !== undefined;
  }

  #finish(end: WaitEnd): void {
    if (this.#end !== undefined) return;
    this.#end = end;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#onAbort !== undefined) this.#signal?.removeEventListener('abort', this.#onAbort);
    this.#onEnd?.(end);
    this.#resolve?.(end);
  }
}
