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
  readonly isDone: () => boolean;
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
  let done = false;
  let timer: NodeJS.Timeout | undefined;
  let resolve!: (end: WaitEnd) => void;
  const ended = new Promise<WaitEnd>((r) => {
    resolve = r;
  });
  const finish = (end: WaitEnd) => {
    if (done) return;
    done = true;
    if (timer !== undefined) clearTimeout(timer);
    signal?.removeEventListener('abort', onAbort);
    onEnd?.(end);
    resolve(end);
  };
  const onAbort = () => finish('abort');
  if (signal?.aborted) {
    finish('abort');
  } else {
    if (Number.isFinite(maxMs)) {
      const delayMs = Math.min(Math.max(0, maxMs), MAX_TIMER_MS);
      timer = setTimeout(() => finish('deadline'), delayMs);
    }
    signal?.addEventListener('abort', onAbort, { once: true });
  }
  return { ended, wake: () => finish('event'), isDone: () => done };
}
