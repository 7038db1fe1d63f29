/**
 * The native `zookeeper` package as fencelock uses it: the shape of its client (its callback API,
 * node-zk.cpp over the ZooKeeper C client 3.8), its return codes, connection states and create
 * modes, and the one rule every place that makes a client follows (`outsideNativeCallbacks`).
 */

/**
 * Resolve on a later turn of the event loop (libuv's check phase), outside every callback of the
 * native binding. A native client must not be made inside another client's callback, nor in the
 * promise continuations that run before that callback returns (an `await` alone does not leave
 * it). While the other client reconnects, its old socket is closed but the binding's poll handle
 * on it is not; the new client's socket gets the same descriptor, libuv refuses a second poll
 * handle on it, the binding ignores the refusal, and the process aborts in `uv_poll_start`
 * (seen every time, when a lease's abort listener acquires on a new session after the holder's
 * server was killed). `attach` (attach.ts) makes its clients after this. The other way to a
 * stale poll handle, a socket the C client closes during a request call, is `socketDropped`.
 */
export function outsideNativeCallbacks(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** ZooKeeper's return codes used here (`ZooDefs`, the C client's `ZOO_ERRORS`). */
export const ZCODE = Object.freeze({
  connectionLoss: -4,
  operationTimeout: -7,
  invalidState: -9,
  noNode: -101,
  badVersion: -103,
  nodeExists: -110,
  notEmpty: -111,
  sessionExpired: -112,
  closing: -116,
});

/**
 * Connection states of the C client (`zoo_state`, the binding's `state`): `notConnected` is its
 * state before the first connection attempt, and after `socketDropped`.
 */
export const ZSTATE = Object.freeze({
  closed: 0,
  connecting: 1,
  associating: 2,
  connected: 3,
  notConnected: 999,
});

/** Node create modes (`CreateMode`). */
export const CREATE_MODE = Object.freeze({ persistent: 0, ephemeralSequential: 3, container: 4 });

/** The parts of a node's `Stat` we read. */
export interface NodeStat {
  /** Zxid of the create, as a JS number (exact below 2^53). */
  readonly czxid: number;
  readonly version: number;
  /** Session id (hex) of an ephemeral node's owner, `'0'` for others. */
  readonly ephemeralOwner: string;
  /** Zxid of the last data write, as a JS number (lock-delay.ts). */
  readonly mzxid?: number;
  /** The leader's wall-clock time of the create (the binding's `Date`; lock-delay.ts). */
  readonly ctime?: Date | number;
  /** The leader's wall-clock time of the last data write (the binding's `Date`). */
  readonly mtime?: Date | number;
}

export type Callback<T> = (rc: number, error: string, value: T) => void;

/** The callback API of the native client (`zookeeper` package) that fencelock calls. */
export interface NativeZooKeeper {
  readonly timeout: number;
  readonly client_id: string;
  readonly client_password: string;
  /** `ZSTATE`; 0 once closed. */
  readonly state: number;
  init(config: object): unknown;
  close(): unknown;
  on(event: 'connect' | 'connecting' | 'close', listener: (...args: unknown[]) => void): unknown;
  a_create(path: string, data: string, flags: number, cb: Callback<string>): unknown;
  a_exists(path: string, watch: boolean, cb: Callback<NodeStat>): unknown;
  aw_exists(
    path: string,
    watchCb: (type: number, state: number, path: string) => void,
    cb: Callback<NodeStat>,
  ): unknown;
  a_get_children(path: string, watch: boolean, cb: Callback<string[]>): unknown;
  aw_get_children(
    path: string,
    watchCb: (type: number, state: number, path: string) => void,
    cb: Callback<string[]>,
  ): unknown;
  aw_get(
    path: string,
    watchCb: (type: number, state: number, path: string) => void,
    cb: (rc: number, error: string, stat: NodeStat, data: unknown) => void,
  ): unknown;
  a_get(
    path: string,
    watch: boolean,
    cb: (rc: number, error: string, stat: NodeStat, data: unknown) => void,
  ): unknown;
  a_delete_(path: string, version: number, cb: (rc: number, error: string) => void): unknown;
  a_set(path: string, data: string, version: number, cb: Callback<NodeStat>): unknown;
  /** Bring the connected server up to date with the leader (`zoo_async`); answers the path. */
  a_sync(path: string, cb: Callback<string>): unknown;
}

/** A constructor of the native client. */
export type NativeZooKeeperClass = new (config: object) => NativeZooKeeper;

/**
 * True when the C client closed its socket inside the request call that just returned, behind
 * the binding's back. Every request call of the C client sends at once; when that send fails
 * (the peer reset the connection and the binding has not polled the reset yet) its
 * `nonblocking_send` closes the socket and sets ZOO_NOTCONNECTED_STATE, with no session event
 * (zookeeper-client-c 3.8.2, src/zookeeper.c:3966-3975, in the package's
 * deps/zookeeper-client-c.tar.gz). The binding re-reads its socket only in `yield()` (src/node-zk.cpp
 * 276-346), run by the client's poll and timer callbacks; a closed socket is never polled again,
 * so until the timer fires (up to a third of the session timeout) the client's `uv_poll_t` stays
 * registered in libuv under that descriptor number. The next socket of the process gets that
 * number: a new client's `uv_poll_init` fails with EEXIST, which node-zk.cpp:338 ignores, and
 * `uv_poll_start` on the uninitialised handle (node-zk.cpp:343) aborts the process
 * ("Assertion `!uv__is_closing(handle)'") or crashes it; a Node socket there loses its events.
 * Closing the client at once (same turn, before anything else can take the number) stops and
 * closes its poll handle (node-zk.cpp:1080-1085); the server keeps the session, since the C client
 * sends its close request only when connected (src/zookeeper.c:3846).
 */
export function socketDropped(zk: NativeZooKeeper): boolean {
  return zk.state === ZSTATE.notConnected;
}
