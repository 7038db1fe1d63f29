/**
 * Sessions the user opens: one engine session (an etcd lease, a ZooKeeper session) kept alive in
 * the background and shared by every lock acquired with `{ session }`, as in etcd's
 * `concurrency.NewSession` / `Session.Close` / `Session.Orphan`. Locks in a session live and die
 * with it: when the session is lost, every lease in it is lost at once.
 */
import type { BackendSession } from './backend.js';

/**
 * A session opened with `locker.openSession({ ttlMs })`. Pass it to `lock`, `acquire`,
 * `tryAcquire` or `withLock` as `{ session }`.
 */
export class Session implements AsyncDisposable {
  readonly #engine: BackendSession;
  readonly #onEnd: (session: Session) => void;
  #orphaned = false;

  /** @internal opened by `Locker.openSession`. */
  constructor(engine: BackendSession, onEnd: (session: Session) => void) {
    this.#engine = engine;
    this.#onEnd = onEnd;
    if (engine.signal.aborted) onEnd(this);
    else engine.signal.addEventListener('abort', () => onEnd(this), { once: true });
  }

  /** The engine's id of the session (etcd lease id in hex, ZooKeeper session id in hex). */
  get id(): string {
    return this.#engine.id;
  }

  /** TTL the engine granted, ms (etcd rounds up to whole seconds; ZooKeeper negotiates). */
  get ttlMs(): number {
    return this.#engine.ttlMs;
  }

  /**
   * Aborted when the session ends: closed, or lost (the engine expired or revoked it, or no
   * keepalive succeeded within its TTL). The reason is the cause.
   */
  get signal(): AbortSignal {
    return this.#engine.signal;
  }

  /** True until the session is closed, orphaned or lost: new locks can be acquired in it. */
  get isOpen(): boolean {
    return !this.#orphaned && !this.#engine.signal.aborted;
  }

  /** @internal the backend's session, for attempts made in it. */
  get engine(): BackendSession {
    return this.#engine;
  }

  /**
   * End the session on the engine (etcd revokes the lease; ZooKeeper closes the session): every
   * lock still held in it is released by the engine at once and its lease signal aborts with
   * `LockLostError` (reason `session-lost`). Idempotent; never throws (an unreachable engine then
   * ends the session by its TTL).
   */
  async close(): Promise<void> {
    await this.#engine.close();
    this.#onEnd(this);
  }

  /**
   * Stop keeping the session alive without ending it on the engine (etcd's `Session.Orphan`):
   * its locks stay on the engine until the TTL runs out, when their leases are lost and `signal`
   * aborts. No new lock can be acquired in it, and the locker's `close()` no longer ends it (it
   * still releases leases it holds). For a process about to exit that wants its locks to run
   * out on their own.
   */
  orphan(): void {
    if (this.#orphaned) return;
    this.#orphaned = true;
    this.#engine.orphan();
    this.#onEnd(this);
  }

  /** `await using session = await locker.openSession()` closes the session at scope exit. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}
