/**
 * Backoff with full jitter ("Exponential Backoff And Jitter", AWS Architecture Blog, 2015):
 * the n-th wait is uniform in [0, min(maxDelayMs, initialDelayMs × factor^n)]. Spreading
 * waiters uniformly keeps them from retrying in lockstep (the herd effect).
 */
import type { RetryOptions } from '../options.js';

/**
 * Delay before retry number `attempt` (0-based), ms.
 * @param random a source of uniform numbers in [0, 1), for tests.
 */
export function backoffDelayMs(
  attempt: number,
  retry: Required<RetryOptions>,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(retry.maxDelayMs, retry.initialDelayMs * retry.factor ** attempt);
  return random() * ceiling;
}

/**
 * Resolve after `ms`, or earlier when `signal` aborts (never rejects). The timer is cleared on
 * abort so nothing is left behind.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
