/**
 * Connecting native clients: to a new session, or back to a session that lives on (its id and
 * password, as Curator's `ConnectionState.RECONNECTED` after a client of its own is replaced).
 *
 * The native binding does not reliably retry a connection by itself. After a failed attempt
 * its `yield()` (node-zk.cpp 276-346) returns early, on an error of `zookeeper_interest` or when
 * the C client waits before trying the servers again (no socket), without arming its timer for
 * that wait; the next attempt comes only when the timer armed earlier fires: up to a third of
 * the session timeout later for a client that was connected, never for a new client whose first
 * attempt failed at once. So a client that is not trying (its state is neither connecting nor
 * associating) is closed and replaced, each new client made on a clean turn of the loop
 * (`outsideNativeCallbacks`), first after FIRST_RETRY_MS, then doubling up to MAX_RETRY_MS.
 * Closing a client that is not connected leaves its session alone on the server.
 */
import { monotonicNow } from '../../core/clock.js';
import {
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  outsideNativeCallbacks,
  ZCODE,
  ZSTATE,
} from './native.js';

/** How often an attempt's state is read, and the first pause before a new client, ms. */
const FIRST_RETRY_MS = 100;
/** Longest pause between two clients, ms (a restored server is reached within it). */
const MAX_RETRY_MS = 400;

/** What to connect to. */
export interface AttachOptions {
  /** `host:port,host:port`. */
  readonly connect: string;
  /** Session timeout asked for, ms. */
  readonly requestedTimeoutMs: number;
  /** The session to attach to (hex id, hex password); a new session when absent. */
  readonly session?: { readonly id: string; readonly password: string };
  /** Monotonic time after which no attempt goes on. */
  readonly deadline: number;
  /** Aborting it ends the attempts. */
  readonly signal?: AbortSignal;
}

/** How `attach` ended. */
export type AttachOutcome =
  /** `client` is connected; `startedAt` is when its attempt began (monotonic). */
  | { readonly outcome: 'connected'; readonly client: NativeZooKeeper; readonly startedAt: number }
  /** The ensemble gave another session than `session`: it expired. */
  | { readonly outcome: 'expired' }
  /**
   * No client connected: `deadline` (no server answered before it), `stopped` (the signal
   * aborted) or `closed` (a client closed for another reason, e.g. a failed authentication).
   */
  | {
      readonly outcome: 'failed';
      readonly why: 'deadline' | 'stopped' | 'closed';
      readonly cause: Error;
    };

type Attempt = 'connected' | 'stalled' | 'ended' | { readonly closed: number };

/**
 * Connect a native client within `deadline`, replacing clients that stopped trying. A client
 * closed with "session expired" is tried again too: the binding also says so after a run of
 * empty reads (its `responseCounterLimit`) with the session alive.
 */
export async function attach(
  native: NativeZooKeeperClass,
  options: AttachOptions,
): Promise<AttachOutcome> {
  let pauseMs = FIRST_RETRY_MS;
  for (;;) {
    await outsideNativeCallbacks();
    const ended = endOf(options);
    if (ended !== undefined) return ended;
    const startedAt = monotonicNow();
    const client = new native({
      connect: options.connect,
      timeout: options.requestedTimeoutMs,
      // The C client writes its log to stderr, process-wide; errors reach callers as codes.
      debug_level: 0,
      host_order_deterministic: false,
      ...(options.session && {
        client_id: options.session.id,
        client_password: options.session.password,
      }),
    });
    const attempt = await tryOnce(client, options);
    if (attempt === 'connected') {
      if (options.session === undefined || client.client_id === options.session.id) {
        return { outcome: 'connected', client, startedAt };
      }
      client.close();
      return { outcome: 'expired' };
    }
    client.close();
    if (typeof attempt === 'object' && attempt.closed !== ZCODE.sessionExpired) {
      return {
        outcome: 'failed',
        why: 'closed',
        cause: new Error(`ZooKeeper client closed while connecting (code ${attempt.closed})`),
      };
    }
    if (attempt === 'stalled' || typeof attempt === 'object') {
      // Never past the deadline: the attempts end at it, not at the end of a pause.
      await pause(
        Math.min(pauseMs, Math.max(0, options.deadline - monotonicNow())),
        options.signal,
      );
      pauseMs = Math.min(pauseMs * 2, MAX_RETRY_MS);
    }
  }
}

/** One client's attempt: until it connects, closes, stops trying, or the attempts end. */
function tryOnce(client: NativeZooKeeper, options: AttachOptions): Promise<Attempt> {
  return new Promise<Attempt>((resolve) => {
    let settled = false;
    const settle = (attempt: Attempt) => {
      if (settled) return;
      settled = true;
      clearInterval(watch);
      clearTimeout(atDeadline);
      options.signal?.removeEventListener('abort', onAbort);
      resolve(attempt);
    };
    const onAbort = () => settle('ended');
    const watch = setInterval(() => {
      if (endOf(options) !== undefined) settle('ended');
      else if (client.state !== ZSTATE.connecting && client.state !== ZSTATE.associating) {
        settle('stalled');
      }
    }, FIRST_RETRY_MS);
    const atDeadline = setTimeout(onAbort, Math.max(0, options.deadline - monotonicNow()));
    options.signal?.addEventListener('abort', onAbort, { once: true });
    client.on('connect', () => settle('connected'));
    client.on('close', (_client, code) => settle({ closed: Number(code) }));
    client.init({});
  });
}

/** Why the attempts end now, if they do. */
function endOf(options: AttachOptions): AttachOutcome | undefined {
  if (options.signal?.aborted) {
    return {
      outcome: 'failed',
      why: 'stopped',
      cause: new Error('ZooKeeper connection attempts stopped'),
    };
  }
  if (monotonicNow() >= options.deadline) {
    return {
      outcome: 'failed',
      why: 'deadline',
      cause: new Error(`no ZooKeeper server of ${options.connect} answered in time`),
    };
  }
  return undefined;
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}
