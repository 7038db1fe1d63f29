/**
 * A ZooKeeper session: one client of the native `zookeeper` package (the C client), and what
 * fencelock knows about the session's validity. Curator's `ConnectionStateManager` states, with
 * a clock of our own:
 *
 * - CONNECTED: requests succeed. Every request that succeeds proves the server heard from the
 *   session after the request started, so the server cannot expire it before that start plus the
 *   negotiated timeout: `validUntil` = start of the last successful request + timeout − drift.
 *   A heartbeat (one `exists` every third of the timeout) keeps that bound fresh when no lock
 *   traffic does.
 * - SUSPENDED: the client lost its connection (its `connecting` event, or a request call that
 *   found the connection reset, `socketDropped`). The client reconnects by itself while it keeps
 *   trying; when it stops (see attach.ts), or dropped its socket, a new client takes the session
 *   over (same id and password). The session may still be alive on the server, or not: it learns
 *   which only on reconnection.
 *   `suspended` aborts at once, so a backend that treats SUSPENDED as loss (Curator's advice, the
 *   default) can say so; `validUntil` still bounds how long it may be believed.
 * - LOST: the client closed with "session expired", or no request succeeded before `validUntil`.
 *   `signal` aborts and the client is closed; a new session is needed. (The C client binding may
 *   also report expiry after the whole ensemble stalled while the session was in fact alive:
 *   declaring it lost then is conservative, and its nodes go when the server expires it.)
 *
 * Errors of the C client are numeric codes (`ZooKeeperError.code`): -101 no node, -110 node
 * exists, -4 connection loss, -7 operation timeout, -112 session expired, -9 invalid state.
 */
import type { BackendSession } from '../../core/backend.js';
import { driftMs, monotonicNow } from '../../core/clock.js';
import { startWait } from '../../core/wait.js';
import { BackendError, type Unreachable } from '../../errors.js';
import { DEFAULTS } from '../../options.js';
import { attach } from './attach.js';
import {
  type Callback,
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  type NodeStat,
  socketDropped,
  ZCODE,
  ZSTATE,
} from './native.js';
import { StallNudge } from './nudge.js';
import { ensembleUnreachable, PROBE_MS } from './reach.js';

export {
  CREATE_MODE,
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  type NodeStat,
  outsideNativeCallbacks,
  ZCODE,
} from './native.js';

/** While suspended, how often the client's own reconnection is checked, ms. */
const RECONNECT_CHECK_MS = 100;

/** Watch event types (`Watcher.Event.EventType`): -1 is a session event, not a node's. */
const SESSION_EVENT = -1;

/** How a request failed to reach the ensemble, as the session saw it when it failed. */
export type RequestFailure =
  /** Nothing answered within `afterMs` while the connection was up. */
  | { readonly kind: 'no-answer'; readonly afterMs: number }
  /** The connection was down (SUSPENDED), or dropped under the request. */
  | { readonly kind: 'disconnected' };

/** An error code from the ZooKeeper client, with its message. */
export class ZooKeeperError extends Error {
  readonly code: number;
  /** Set when the request failed for want of a connection or an answer. */
  readonly failure: RequestFailure | undefined;
  constructor(code: number, message: string, failure?: RequestFailure) {
    super(`${message} (ZooKeeper code ${code})`);
    this.name = 'ZooKeeperError';
    this.code = code;
    this.failure = failure;
  }
}

/** The ZooKeeper code of `error` (also through a BackendError's cause), if it has one. */
export function zkCode(error: unknown): number | undefined {
  if (error instanceof ZooKeeperError) return error.code;
  if (error instanceof BackendError) return zkCode(error.cause);
  return undefined;
}

/** Options of a session. */
export interface ZkSessionOptions {
  /** `host:port,host:port` (the C client's connect string). */
  readonly connect: string;
  /** Session timeout asked for, ms; the server negotiates it into its [2, 20] × tickTime. */
  readonly requestedTimeoutMs: number;
  /**
   * How long to wait for the first connection, and for the answer to each request, ms: a request
   * still unanswered then fails with ZOPERATIONTIMEOUT (-7), "no answer within <N> ms".
   */
  readonly connectTimeoutMs: number;
  /** Aborting it stops connecting (`open`). */
  readonly signal?: AbortSignal;
}

/** An exists watch on one path, shared by every wait of the session on it. */
interface PathWatch {
  /** Wakes of the waits on it; all are called when the watch fires. */
  readonly waiting: Set<() => void>;
  /** The node's stat when the watch was set (undefined: no such node); rejects if it failed. */
  readonly stat: Promise<NodeStat | undefined>;
}

/** Codes with which the C client fails a request whose connection ended under it. */
const DISCONNECTED: ReadonlySet<number> = new Set([ZCODE.connectionLoss, ZCODE.closing]);

/** One ZooKeeper session. */
export class ZkSession implements BackendSession {
  /** Session timeout the server negotiated, ms. */
  readonly timeoutMs: number;
  /** Session timeout asked for, ms. */
  readonly requestedTimeoutMs: number;
  /** Session id, hex (as the server logs it). */
  readonly id: string;
  /** Aborted (with the cause as reason) when the session is lost or closed. */
  readonly signal: AbortSignal;
  #zk: NativeZooKeeper;
  readonly #native: NativeZooKeeperClass;
  readonly #options: ZkSessionOptions;
  /** A new native client is being attached to the session (`#reattach`). */
  #reattaching = false;
  /** Checks the client's own reconnection while suspended (`#watchReconnection`). */
  #reconnectCheck: NodeJS.Timeout | undefined;
  /** `orphan()` was called: the validity bound no longer moves. */
  #orphaned = false;
  readonly #lost = new AbortController();
  #suspension = new AbortController();
  /**
   * Called once at the next suspension (or loss): one per grant, so they are kept here and fanned
   * out, not added as listeners to the shared `suspended` signal (thousands of grants share it).
   */
  readonly #onSuspend = new Set<(reason: unknown) => void>();
  #validUntil: number;
  #expiry: NodeJS.Timeout | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #keepingAlive = true;
  /** Wakes a server that sits on this session's requests (nudge.ts). */
  readonly #stallNudge = new StallNudge(() => this.#nudge());
  /**
   * Watches set by this session's waits, by path: one per path, shared by every wait on it.
   * `lose()` wakes them all, so a wait adds no listener of its own to the session's `signal`.
   */
  readonly #watches = new Map<string, PathWatch>();
  /**
   * Callbacks of the one-shot watches set by `watchChildren`, `watchData` and `watchExists` that
   * have not fired: each is called once, when its watch fires, or when the session ends or moves
   * to a new native client (whose server knows none of the old client's watches).
   */
  readonly #oneShots = new Set<() => void>();
  /** Called with every reconnection within the session. */
  onReconnect: (() => void) | undefined;

  private constructor(
    zk: NativeZooKeeper,
    native: NativeZooKeeperClass,
    options: ZkSessionOptions,
    startedAt: number,
  ) {
    this.#zk = zk;
    this.#native = native;
    this.#options = options;
    this.requestedTimeoutMs = options.requestedTimeoutMs;
    this.timeoutMs = zk.timeout;
    this.id = zk.client_id;
    this.signal = this.#lost.signal;
    this.#validUntil = this.#bound(startedAt);
    this.#listen(zk);
    this.#arm();
    this.#scheduleHeartbeat();
  }

  #listen(zk: NativeZooKeeper): void {
    zk.on('connecting', () => {
      if (zk !== this.#zk) return;
      this.#suspend();
      this.#watchReconnection();
    });
    zk.on('connect', () => {
      if (zk === this.#zk) this.#resume();
    });
    zk.on('close', (_zk, code) => {
      if (zk !== this.#zk || this.#reattaching || !this.alive) return;
      if (code === ZCODE.sessionExpired && monotonicNow() < this.#validUntil) this.#reattach();
      else if (code === ZCODE.sessionExpired) {
        this.lose(new ZooKeeperError(ZCODE.sessionExpired, 'ZooKeeper session expired'));
      } else this.lose(new Error(`ZooKeeper client closed (code ${String(code)})`));
    });
  }

  /**
   * While the client reconnects by itself (SUSPENDED), check it every RECONNECT_CHECK_MS: once it
   * stops trying (the binding then waits for a timer armed for another purpose, see attach.ts),
   * hand the session to a new client.
   */
  #watchReconnection(): void {
    clearTimeout(this.#reconnectCheck);
    this.#reconnectCheck = setTimeout(() => {
      if (!this.alive || this.#reattaching || !this.#suspension.signal.aborted) return;
      const { state } = this.#zk;
      if (state === ZSTATE.connecting || state === ZSTATE.associating) this.#watchReconnection();
      else if (state !== ZSTATE.connected) this.#reattach();
    }, RECONNECT_CHECK_MS);
    this.#reconnectCheck.unref();
  }

  /**
   * Hand the session to a new native client (the same session id and password): the current
   * client lost its socket behind the binding's back (`socketDropped`), stopped reconnecting, or
   * closed with "session expired" while the session may still be alive (the binding also says so
   * after a run of empty reads, e.g. when its server is killed). The current client is closed at
   * once; it is not connected, so the server keeps the session. The same session back means it
   * was alive: its ephemeral nodes are intact, but the old client's watches are gone, so every
   * wait is woken to look again. Anything else (another session, no answer before the validity
   * runs out) loses the session.
   */
  #reattach(): void {
    if (this.#reattaching || !this.alive) return;
    this.#reattaching = true;
    clearTimeout(this.#reconnectCheck);
    this.#suspend();
    const password = this.#zk.client_password;
    this.#zk.close();
    void attach(this.#native, {
      connect: this.#options.connect,
      requestedTimeoutMs: this.#options.requestedTimeoutMs,
      session: { id: this.id, password },
      deadline: this.#validUntil,
      signal: this.signal,
    }).then((attached) => {
      this.#reattaching = false;
      if (attached.outcome !== 'connected') {
        this.lose(
          attached.outcome === 'expired'
            ? new ZooKeeperError(ZCODE.sessionExpired, 'ZooKeeper session expired')
            : attached.cause,
        );
        return;
      }
      const next = attached.client;
      if (!this.alive) {
        next.close();
        return;
      }
      this.#zk = next;
      this.#listen(next);
      this.#resume();
      const watches = [...this.#watches.values()];
      this.#watches.clear();
      for (const watch of watches) for (const wake of [...watch.waiting]) wake();
      this.#fireOneShots();
    });
  }

  /**
   * Connect a new client and wait for its session. The last `probeMsOf(connectTimeoutMs)` of the
   * bound are kept to ask why no server answered (reach.ts).
   * @throws BackendError when no server answers within `connectTimeoutMs`: in the one form of an
   *   unreachable engine (`<ensemble> unreachable: connection refused` when every member refuses
   *   connections, else `no answer within <connectTimeoutMs> ms`), `address` the ensemble.
   */
  static async open(native: NativeZooKeeperClass, options: ZkSessionOptions): Promise<ZkSession> {
    const probeMs = probeMsOf(options.connectTimeoutMs);
    const attached = await attach(native, {
      connect: options.connect,
      requestedTimeoutMs: options.requestedTimeoutMs,
      deadline: monotonicNow() + options.connectTimeoutMs - probeMs,
      ...(options.signal && { signal: options.signal }),
    });
    if (attached.outcome === 'connected') {
      return new ZkSession(attached.client, native, options, attached.startedAt);
    }
    if (attached.outcome === 'expired') {
      const expired = new Error('ZooKeeper client closed while connecting (code -112)');
      throw new BackendError('zookeeper', 'connect', expired);
    }
    const unreachable =
      attached.why === 'deadline'
        ? await ensembleUnreachable(
            options.connect,
            { address: options.connect, reason: 'no-answer', afterMs: options.connectTimeoutMs },
            probeMs,
          )
        : undefined;
    throw new BackendError('zookeeper', 'connect', attached.cause, unreachable);
  }

  /** TTL of the locks in this session: the negotiated timeout, ms. */
  get ttlMs(): number {
    return this.timeoutMs;
  }

  /** Monotonic time until which the session is believed alive on the server. */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** True until the session is lost or closed. */
  get alive(): boolean {
    return !this.signal.aborted;
  }

  /** Aborted when the connection is lost (SUSPENDED); replaced by a fresh one on reconnection. */
  get suspended(): AbortSignal {
    return this.#suspension.signal;
  }

  /**
   * Call `listener` once, with the reason, when the connection is next lost (SUSPENDED) or the
   * session ends; at once when it is suspended now. One shared fan-out instead of a listener per
   * grant on `suspended` (which would pile up one per lock held in the session).
   * @returns a function that removes the listener (idempotent).
   */
  onceSuspended(listener: (reason: unknown) => void): () => void {
    const suspension = this.#suspension.signal;
    if (suspension.aborted) {
      listener(suspension.reason);
      return () => undefined;
    }
    this.#onSuspend.add(listener);
    return () => {
      this.#onSuspend.delete(listener);
    };
  }

  /**
   * Create a node; resolves with the path the server gave it (sequence suffix included).
   * @throws ZooKeeperError
   */
  create(path: string, data: string, mode: number): Promise<string> {
    return this.#call<string>((cb) => this.#zk.a_create(path, data, mode, cb));
  }

  /**
   * Stat of `path`, or undefined when it does not exist.
   * @throws ZooKeeperError
   */
  async stat(path: string): Promise<NodeStat | undefined> {
    try {
      return await this.#call<NodeStat>((cb) => this.#zk.a_exists(path, false, cb));
    } catch (error) {
      if (zkCode(error) === ZCODE.noNode) return undefined;
      throw error;
    }
  }

  /**
   * Stat and data of `path`, or undefined when it does not exist.
   * @throws ZooKeeperError
   */
  async read(path: string): Promise<{ stat: NodeStat; data: string } | undefined> {
    try {
      return await this.#call<{ stat: NodeStat; data: string }>((cb) =>
        this.#zk.a_get(path, false, (rc, error, stat, data) =>
          cb(rc, error, { stat, data: data === undefined || data === null ? '' : String(data) }),
        ),
      );
    } catch (error) {
      if (zkCode(error) === ZCODE.noNode) return undefined;
      throw error;
    }
  }

  /**
   * Names of the children of `path`; empty when it does not exist.
   * @throws ZooKeeperError
   */
  async children(path: string): Promise<string[]> {
    try {
      return await this.#call<string[]>((cb) => this.#zk.a_get_children(path, false, cb));
    } catch (error) {
      if (zkCode(error) === ZCODE.noNode) return [];
      throw error;
    }
  }

  /**
   * Bring the connected server up to date with the leader (ZooKeeper `sync`): the session's reads
   * sent after it see every write the ensemble committed before the server handled it, made by
   * any session (a follower alone may lag behind the leader).
   * @throws ZooKeeperError
   */
  async sync(path: string): Promise<void> {
    await this.#call<string>((cb) => this.#zk.a_sync(path, cb));
  }

  /**
   * Set the data of `path` if its version is `version`; resolves with the new stat.
   * @throws ZooKeeperError (-101 when missing, -103 on another version)
   */
  setData(path: string, data: string, version: number): Promise<NodeStat> {
    return this.#call<NodeStat>((cb) => this.#zk.a_set(path, data, version, cb));
  }

  /**
   * Delete `path` if its version is `version` (-1: any).
   * @returns false when the node does not exist.
   * @throws ZooKeeperError (-103 on another version)
   */
  async delete(path: string, version: number): Promise<boolean> {
    try {
      await this.#call<void>((cb) =>
        this.#zk.a_delete_(path, version, (rc, error) => cb(rc, error, undefined)),
      );
      return true;
    } catch (error) {
      if (zkCode(error) === ZCODE.noNode) return false;
      throw error;
    }
  }

  /**
   * Resolve when `path` is deleted, or at once when it does not exist; also at `maxMs`, when
   * `signal` aborts, or the session ends. One watch per path and session, shared by every wait
   * on it (Curator reuses one watcher per waiter the same way): a wait that gives up leaves the
   * watch set for the next one, so a waiter that rechecks never stacks watches. ZooKeeper keeps
   * the watch across reconnections.
   * @throws ZooKeeperError when the watch cannot be set.
   */
  waitForDelete(path: string, signal: AbortSignal, maxMs: number): Promise<void> {
    return this.waitForChange([path], signal, maxMs);
  }

  /**
   * Resolve when the first of `paths` is deleted or written (an exists watch fires on both), or
   * at once when one of them does not exist or `changed` says so of its stat as the watch found
   * it; also at `maxMs`, when `signal` aborts, or the session ends. The watches are
   * `waitForDelete`'s, one per path and session, shared, and left set when the wait ends first.
   * @param changed whether a node already changed before its watch was set (a semaphore waiter's
   *   predecessor already written, see permit-line.ts); the stat is the one read when the watch
   *   was set, still current while the watch has not fired.
   * @throws ZooKeeperError when a watch cannot be set.
   */
  async waitForChange(
    paths: readonly string[],
    signal: AbortSignal,
    maxMs: number,
    changed?: (stat: NodeStat) => boolean,
  ): Promise<void> {
    if (signal.aborted || !this.alive) return;
    // `signal` is this acquire's own; the session's loss wakes it through `#watches` (lose()).
    const wait = startWait(signal, maxMs, () => {
      for (const path of paths) this.#watches.get(path)?.waiting.delete(done);
    });
    const done = wait.wake;
    const ended = wait.ended.then(() => undefined);
    const found: Promise<NodeStat | undefined>[] = [];
    for (const path of paths) {
      if (wait.isDone()) break;
      const watch = this.#watches.get(path) ?? this.#watch(path);
      watch.waiting.add(done);
      found.push(watch.stat);
    }
    let failure: unknown;
    for (const outcome of await Promise.allSettled(found)) {
      if (outcome.status === 'rejected') failure ??= outcome.reason;
      else if (outcome.value === undefined || changed?.(outcome.value)) done();
    }
    if (failure !== undefined) {
      done();
      throw failure;
    }
    return ended;
  }

  /** Set an exists watch on `path`, kept in `#watches` until it fires (or cannot be set). */
  #watch(path: string): PathWatch {
    const waiting = new Set<() => void>();
    const forget = () => {
      if (this.#watches.get(path) === watch) this.#watches.delete(path);
    };
    const stat = this.#call<NodeStat>((cb) =>
      this.#zk.aw_exists(
        path,
        (type) => {
          if (type === SESSION_EVENT) return;
          forget();
          for (const wake of [...waiting]) wake();
        },
        cb,
      ),
    ).catch((error: unknown) => {
      // Gone already (the watch left is on its creation), or the watch could not be set: every
      // wait on it ends at once (see waitForChange), and the next wait sets a new one.
      forget();
      if (zkCode(error) === ZCODE.noNode) return undefined;
      throw error;
    });
    const watch: PathWatch = { waiting, stat };
    this.#watches.set(path, watch);
    return watch;
  }

  /**
   * Names of the children of `path`, with a one-shot children watch: `onFire` is called once,
   * when a child is created or deleted or `path` is deleted, or when the watch is gone (the
   * session ended or moved to a new native client). Undefined when `path` does not exist (no
   * watch is set then, `onFire` is never called).
   * @param onFire a function of its own for this watch (`unwatch` forgets it by identity).
   * @throws ZooKeeperError (no watch is kept then).
   */
  watchChildren(path: string, onFire: () => void): Promise<string[] | undefined> {
    return this.#oneShot<string[]>(
      onFire,
      (watcher, cb) => this.#zk.aw_get_children(path, watcher, cb),
      false,
    );
  }

  /**
   * Stat and data of `path`, with a one-shot data watch: `onFire` is called once, when the node
   * is written or deleted, or when the watch is gone (as `watchChildren`). Undefined when `path`
   * does not exist (no watch is set then).
   * @throws ZooKeeperError (no watch is kept then).
   */
  watchData(
    path: string,
    onFire: () => void,
  ): Promise<{ stat: NodeStat; data: string } | undefined> {
    return this.#oneShot<{ stat: NodeStat; data: string }>(
      onFire,
      (watcher, cb) =>
        this.#zk.aw_get(path, watcher, (rc, error, stat, data) =>
          cb(rc, error, { stat, data: data === undefined || data === null ? '' : String(data) }),
        ),
      false,
    );
  }

  /**
   * Stat of `path`, with a one-shot exists watch, also on a missing node: `onFire` is called once,
   * when the node is created, written or deleted, or when the watch is gone (as `watchChildren`).
   * Undefined when `path` does not exist (the watch then waits for its creation).
   * @throws ZooKeeperError (no watch is kept then).
   */
  watchExists(path: string, onFire: () => void): Promise<NodeStat | undefined> {
    return this.#oneShot<NodeStat>(
      onFire,
      (watcher, cb) => this.#zk.aw_exists(path, watcher, cb),
      true,
    );
  }

  /** One-shot watches set (`watch…`) that have not fired nor been forgotten. */
  get pendingWatches(): number {
    return this.#oneShots.size;
  }

  /** Forget a one-shot watch's callback (`onFire` of `watch…`): it is not called any more. */
  unwatch(onFire: () => void): void {
    this.#oneShots.delete(onFire);
  }

  /**
   * Send a request that sets a one-shot watch with `onFire` as its callback (kept in
   * `#oneShots` until called or forgotten). ZooKeeper sets no watch when a read fails, except an
   * exists watch on a missing node (`keptOnNoNode`): "no node" answers undefined.
   */
  async #oneShot<T>(
    onFire: () => void,
    start: (watcher: (type: number) => void, cb: Callback<T>) => unknown,
    keptOnNoNode: boolean,
  ): Promise<T | undefined> {
    if (!this.alive) {
      throw new ZooKeeperError(ZCODE.sessionExpired, 'ZooKeeper session ended');
    }
    this.#oneShots.add(onFire);
    const watcher = (type: number) => {
      // Session events (connection states) leave the watch set; lose() and a new client fire it.
      if (type === SESSION_EVENT) return;
      if (this.#oneShots.delete(onFire)) onFire();
    };
    try {
      return await this.#call<T>((cb) => start(watcher, cb));
    } catch (error) {
      if (zkCode(error) === ZCODE.noNode) {
        if (!keptOnNoNode) this.#oneShots.delete(onFire);
        return undefined;
      }
      // Whether the server set it is unknown: forget it (a late fire is then ignored).
      this.#oneShots.delete(onFire);
      throw error;
    }
  }

  /** Declare the session lost (idempotent): stop the heartbeat, abort `signal`, close the client. */
  lose(cause: unknown): void {
    if (this.signal.aborted) return;
    this.#keepingAlive = false;
    clearTimeout(this.#expiry);
    clearTimeout(this.#heartbeat);
    this.#stallNudge.stop();
    this.#suspension.abort(cause);
    this.#notifySuspended();
    this.#lost.abort(cause);
    this.#reattaching = false;
    clearTimeout(this.#reconnectCheck);
    this.#zk.close();
    // Every wait ends with the session (no listener per wait on `signal`).
    const watches = [...this.#watches.values()];
    this.#watches.clear();
    for (const watch of watches) for (const wake of [...watch.waiting]) wake();
    this.#fireOneShots();
  }

  /** Call (and drop) every one-shot watch's callback: its watch is gone. */
  #fireOneShots(): void {
    const fires = [...this.#oneShots];
    this.#oneShots.clear();
    for (const fire of fires) fire();
  }

  /**
   * Close the session: the server deletes its ephemeral nodes at once (when it hears the close;
   * otherwise at its timeout). Idempotent.
   */
  async close(): Promise<void> {
    this.lose(new Error('session closed'));
  }

  /**
   * Stop believing in the session past its current validity (etcd's `Session.Orphan`): the
   * heartbeat stops and no request moves the bound any more, so when it runs out the session is
   * lost and the client closed, and the server deletes its nodes. Until then its locks hold.
   */
  orphan(): void {
    this.#orphaned = true;
    this.#keepingAlive = false;
    clearTimeout(this.#heartbeat);
  }

  #suspend(): void {
    if (!this.alive || this.#suspension.signal.aborted) return;
    this.#suspension.abort(
      new Error(`connection to ZooKeeper lost (session ${this.id} suspended)`),
    );
    this.#notifySuspended();
  }

  /** Call (and drop) the `onceSuspended` listeners with the suspension's reason. */
  #notifySuspended(): void {
    const reason = this.#suspension.signal.reason;
    const listeners = [...this.#onSuspend];
    this.#onSuspend.clear();
    for (const listener of listeners) listener(reason);
  }

  #resume(): void {
    if (!this.alive || !this.#suspension.signal.aborted) return;
    this.#suspension = new AbortController();
    this.onReconnect?.();
  }

  /**
   * Run one callback-API call; its success moves the validity bound. A call whose send finds the
   * connection reset hands the session to a new client at once (`socketDropped`). While it waits,
   * a server that sits on it is nudged (nudge.ts).
   */
  #call<T>(start: (cb: Callback<T>) => unknown): Promise<T> {
    const startedAt = monotonicNow();
    const zk = this.#zk;
    const boundMs = this.#options.connectTimeoutMs;
    return new Promise<T>((resolve, reject) => {
      const done = this.#stallNudge.begin();
      // The C client sets no deadline on a request: only its connection's receive timeout
      // (two thirds of the session timeout) ends one that a silent server never answers.
      const timer = setTimeout(() => {
        done(false);
        reject(
          new ZooKeeperError(
            ZCODE.operationTimeout,
            `no answer within ${boundMs} ms`,
            this.#connected() ? { kind: 'no-answer', afterMs: boundMs } : { kind: 'disconnected' },
          ),
        );
      }, boundMs);
      timer.unref();
      const returned = start((rc, error, value) => {
        clearTimeout(timer);
        done(true);
        if (rc === 0) {
          this.#extendFrom(startedAt);
          resolve(value);
        } else reject(new ZooKeeperError(rc, error || 'ZooKeeper error', this.#failureOf(rc)));
      });
      // The binding refuses a call synchronously (a code, no callback) once the client is closed.
      if (typeof returned === 'number' && returned !== 0) {
        clearTimeout(timer);
        done(false);
        reject(new ZooKeeperError(returned, 'ZooKeeper client is closed or expired'));
      } else {
        // Closing the client fails this call with ZCLOSING: it may not have reached the server.
        this.#reattachIfDropped(zk);
      }
    });
  }

  /**
   * After a send on `zk`: when that send found the connection reset (`socketDropped`), hand the
   * session to a new client now, before any other socket can take the dropped one's number.
   */
  #reattachIfDropped(zk: NativeZooKeeper): void {
    if (zk === this.#zk && socketDropped(zk)) this.#reattach();
  }

  /**
   * Send the stall nudge, one `exists /` whose answer nobody waits for. The nudge goes out when
   * the server has gone quiet, so it is often the first send to meet a reset connection.
   */
  #nudge(): void {
    if (!this.#connected()) return;
    const zk = this.#zk;
    zk.a_exists('/', false, () => undefined);
    this.#reattachIfDropped(zk);
  }

  /** Connected now: alive, and not suspended. */
  #connected(): boolean {
    return this.alive && !this.#suspension.signal.aborted;
  }

  /**
   * What a failure code of the C client says about the connection: ZOPERATIONTIMEOUT when its
   * receive timeout (two thirds of the session timeout) dropped a silent connection; connection
   * loss or closing while the session lives and its connection is down.
   */
  #failureOf(rc: number): RequestFailure | undefined {
    if (rc === ZCODE.operationTimeout) {
      return { kind: 'no-answer', afterMs: Math.round((this.timeoutMs * 2) / 3) };
    }
    if (DISCONNECTED.has(rc) && this.alive) return { kind: 'disconnected' };
    return undefined;
  }

  #scheduleHeartbeat(delayMs = this.timeoutMs / 3): void {
    if (!this.#keepingAlive) return;
    this.#heartbeat = setTimeout(() => {
      this.stat('/').then(
        () => this.#scheduleHeartbeat(),
        // No answer: the C client reconnects by itself; beat again soon, until validity runs out.
        () => this.#scheduleHeartbeat(100),
      );
    }, delayMs);
    this.#heartbeat.unref();
  }

  #bound(startedAt: number): number {
    return startedAt + this.timeoutMs - driftMs(this.timeoutMs, DEFAULTS.driftFactor);
  }

  #extendFrom(startedAt: number): void {
    if (!this.alive || this.#orphaned) return;
    const bound = this.#bound(startedAt);
    if (bound <= this.#validUntil) return;
    this.#validUntil = bound;
    this.#arm();
  }

  #arm(): void {
    clearTimeout(this.#expiry);
    if (!this.alive) return;
    this.#expiry = setTimeout(
      () => {
        if (monotonicNow() >= this.#validUntil) {
          this.lose(new Error('ZooKeeper session not confirmed within its timeout'));
        } else this.#arm();
      },
      Math.max(0, this.#validUntil - monotonicNow()),
    );
    this.#expiry.unref();
  }
}

/** The part of `connectTimeoutMs` kept to ask why no server answered: a fifth, 200 ms at most. */
function probeMsOf(connectTimeoutMs: number): number {
  return Math.min(PROBE_MS, Math.floor(connectTimeoutMs / 5));
}

/**
 * What a failed request of a session on `ensemble` says about reaching it, in the one form of an
 * unreachable engine: no answer within the bound that ran out; or, when the connection was down,
 * `connection refused` when every member refuses connections now (reach.ts), else `connection
 * closed`.
 * @returns undefined for other failures (an answer of the server, a closed session).
 */
export async function requestUnreachable(
  error: unknown,
  ensemble: string,
  connectTimeoutMs: number,
): Promise<Unreachable | undefined> {
  const failure = error instanceof ZooKeeperError ? error.failure : undefined;
  if (failure === undefined) return undefined;
  if (failure.kind === 'no-answer') {
    return { address: ensemble, reason: 'no-answer', afterMs: failure.afterMs };
  }
  return ensembleUnreachable(
    ensemble,
    { address: ensemble, reason: 'connection-closed' },
    probeMsOf(connectTimeoutMs),
  );
}
