/**
 * What stops one acquire from waiting: the caller's `signal`, the end of the session it acquires
 * in, or its locker closing. Each ends the acquire with a `LockTimeoutError` naming which.
 */
import { LockTimeoutError } from '../errors.js';
import { monotonicNow } from './clock.js';
import type { Session } from './session.js';

/** The caller's stop sources of one acquire (a handle's options have both). */
export interface CallerStops {
  /** The caller's signal, if any. */
  readonly signal: AbortSignal | undefined;
  /** The session the acquire runs in, if any: its end stops the acquire. */
  readonly session: Session | undefined;
}

/**
 * The stop sources of one acquire, with one `AbortSignal` of its own for "stop waiting" made only
 * when needed: at once when the caller gave a signal or a session, else at the first wait. (Its
 * listeners go on that signal, not on the locker's shared closing signal, which would collect one
 * per call.) An uncontended acquire creates no AbortSignal and adds no abort listener.
 */
export class AcquireCancellation {
  readonly #caller: CallerStops;
  readonly #closing: AbortSignal;
  readonly #key: string;
  readonly #startedAt: number;
  #signal: AbortSignal | undefined;

  /**
   * @param caller the caller's signal and session (read when checked, never copied).
   * @param closing aborted when the locker closes.
   * @param key the key being acquired, for errors.
   * @param startedAt monotonic time the acquire started, ms (errors report the time waited).
   */
  constructor(caller: CallerStops, closing: AbortSignal, key: string, startedAt: number) {
    this.#caller = caller;
    this.#closing = closing;
    this.#key = key;
    this.#startedAt = startedAt;
    if (caller.signal !== undefined || caller.session !== undefined) this.signal();
  }

  /** The acquire's own stop signal if it was made already (never makes one). */
  get madeSignal(): AbortSignal | undefined {
    return this.#signal;
  }

  /** The acquire's own stop signal (made on first use). */
  signal(): AbortSignal {
    const { signal, session } = this.#caller;
    this.#signal ??= AbortSignal.any(
      [signal, this.#closing, session?.signal].filter((s) => s !== undefined),
    );
    return this.#signal;
  }

  /** True once any stop source fired. */
  isStopped(): boolean {
    const { signal, session } = this.#caller;
    return this.#closing.aborted || signal?.aborted === true || session?.signal.aborted === true;
  }

  /**
   * @param sawHolder whether an attempt of this acquire found the key held (the error's
   *   `sawHolder`).
   * @throws LockTimeoutError naming what stopped the acquire (the locker closed, the session
   *   ended with its reason as `cause`, or the caller aborted with its reason as `cause`), when
   *   one did.
   */
  throwIfStopped(sawHolder: boolean): void {
    if (!this.isStopped()) return;
    const waitedMs = monotonicNow() - this.#startedAt;
    const { signal, session } = this.#caller;
    if (this.#closing.aborted) {
      throw new LockTimeoutError(this.#key, waitedMs, {
        reason: 'was cancelled: the locker was closed',
        sawHolder,
      });
    }
    if (session !== undefined && !session.isOpen) {
      throw new LockTimeoutError(this.#key, waitedMs, {
        reason: `was cancelled: its session ${session.id} ended`,
        cause: session.signal.reason,
        sawHolder,
      });
    }
    throw new LockTimeoutError(this.#key, waitedMs, {
      reason: 'was aborted',
      cause: signal?.reason,
      sawHolder,
    });
  }
}
