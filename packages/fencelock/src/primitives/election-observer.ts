/**
 * `election.observe()`: the leaders of an election as they change. The engine's subscription
 * (`Backend.watchElection`) is armed first, then the leader is read; every notification, the
 * current leader's TTL running out (a grant's expiry is not notified everywhere) and the
 * subscription's `recheckAfterMs` lead to another read, and a read that differs from the last
 * one reported is the next change. Arming before reading means no change after the first read
 * goes unseen, though changes closer together than one read may be seen as their last state
 * only (as Curator's `NodeCache` does). A read with a lower term than the last reported (a stale
 * replica, a quorum that moved) is skipped: terms never go back.
 */
import type { Backend, ElectedLeader } from '../core/backend.js';
import { assertElectionGranted } from '../core/candidacy.js';
import { InvalidArgumentError } from '../errors.js';
import { checkOptionNames, isOptionsObject } from '../options.js';

/** Options of `election.observe()`. */
export interface ObserveOptions {
  /** Aborting it ends the iteration (without an error). */
  readonly signal?: AbortSignal;
}

const OPTION_NAMES = new Set(['signal']);

/** Grace after a leader's TTL ends before it is read again, ms (the engine's clock may lag). */
const EXPIRY_GRACE_MS = 5;

/**
 * Check `observe()`'s options.
 * @throws InvalidArgumentError naming the first bad option.
 */
export function checkObserveOptions(options: unknown): { signal: AbortSignal | undefined } {
  if (options === undefined) return { signal: undefined };
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an object of observe options', options);
  }
  checkOptionNames(options, OPTION_NAMES);
  const { signal } = options as ObserveOptions;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', 'an AbortSignal', signal);
  }
  return { signal };
}

/** Whether `next` is a change from `last` (a new leader, a new value, or the leader gone). */
function isChange(last: ElectedLeader | null | undefined, next: ElectedLeader | null): boolean {
  if (last === undefined) return true;
  if (last === null || next === null) return last !== next;
  return next.term !== last.term || next.value !== last.value;
}

/**
 * Iterate the leaders of election `key` as they change.
 * @param backend resolves to the store's backend (loaded on the first iteration).
 * @param signal the caller's: aborting it ends the iteration.
 * @param closing the locker's: its close ends the iteration.
 * @throws InvalidArgumentError (at the first iteration) on a store without elections;
 *   BackendError when the engine cannot answer.
 */
export async function* observeLeader(
  backend: () => Promise<Backend>,
  key: string,
  signal: AbortSignal | undefined,
  closing: AbortSignal,
): AsyncGenerator<ElectedLeader | null, void, undefined> {
  const store = await backend();
  assertElectionGranted(store);
  const engine = store as Required<Backend>;
  const stop = signal === undefined ? closing : AbortSignal.any([signal, closing]);
  if (stop.aborted) return;
  const wake = new Wake(stop);
  const watch = await engine.watchElection(key, () => wake.notify());
  try {
    let last: ElectedLeader | null | undefined;
    while (!stop.aborted) {
      wake.reset();
      const read = await untilStopped(engine.leader(key), stop);
      if (read === STOPPED) return;
      const current = read as ElectedLeader | null;
      const stale = current !== null && last != null && current.term < last.term;
      if (!stale && isChange(last, current)) {
        last = current;
        yield current;
      }
      const expiresInMs =
        current === null ? Number.POSITIVE_INFINITY : current.ttlMs + EXPIRY_GRACE_MS;
      await wake.wait(Math.min(watch.recheckAfterMs, expiresInMs));
    }
  } finally {
    watch.stop();
    wake.dispose();
  }
}

const STOPPED = Symbol('stopped');

/** `pending`, or STOPPED as soon as `stop` aborts (a late rejection is then ignored). */
function untilStopped<T>(pending: Promise<T>, stop: AbortSignal): Promise<T | typeof STOPPED> {
  if (stop.aborted) return Promise.resolve(STOPPED);
  let onAbort: (() => void) | undefined;
  const stopped = new Promise<typeof STOPPED>((resolve) => {
    onAbort = () => resolve(STOPPED);
    stop.addEventListener('abort', onAbort, { once: true });
  });
  pending.catch(() => undefined);
  return Promise.race([pending, stopped]).finally(() => {
    if (onAbort) stop.removeEventListener('abort', onAbort);
  });
}

/**
 * The observer's sleep between reads: ends at a notification (also one that came while the
 * previous read ran), at its time limit, or when `stop` aborts.
 */
class Wake {
  readonly #stop: AbortSignal;
  #notified = false;
  #resolve: (() => void) | undefined;
  readonly #onAbort = () => this.#resolve?.();

  constructor(stop: AbortSignal) {
    this.#stop = stop;
    stop.addEventListener('abort', this.#onAbort, { once: true });
  }

  notify(): void {
    this.#notified = true;
    this.#resolve?.();
  }

  /** Forget notifications seen so far (called just before a read). */
  reset(): void {
    this.#notified = false;
  }

  wait(maxMs: number): Promise<void> {
    if (this.#notified || this.#stop.aborted) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, Math.max(0, Math.min(maxMs, 2_147_483_647)));
      const self = this;
      function done(): void {
        clearTimeout(timer);
        self.#resolve = undefined;
        resolve();
      }
      this.#resolve = done;
    });
  }

  dispose(): void {
    this.#stop.removeEventListener('abort', this.#onAbort);
    this.#resolve?.();
  }
}
