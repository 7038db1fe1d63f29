/**
 * The connection of a Redis backend: one ioredis client (a node-redis client comes through its
 * adapter), connected on first use within `commandTimeoutMs`, every command's failure wrapped in a
 * `BackendError` that names the operation and the server (an unreachable one in the one form of
 * `BackendError`: `host:port unreachable: connection refused` or `no answer within N ms`), and
 * closed within a bound, leaving no timer or socket behind. It knows nothing of locks; `backend.ts` runs its scripts through
 * `call`.
 */
import type { Cluster, Redis } from 'ioredis';
import { BackendError } from '../../errors.js';
import { unreachableAt } from '../unreachable.js';
import { DISCONNECT_TIMEOUT_MS } from './client.js';
import { CommandDeadlines } from './command-deadlines.js';

/** Longest wait for a server's answer to QUIT on close(), ms. */
export const CLOSE_TIMEOUT_MS = 1_000;

/** A client and what the backend learned of its connection. */
export class RedisConnection {
  /** The client the backend's commands go through. */
  readonly client: Redis | Cluster;
  /** Opened by the backend (connected, watched and closed here), or the user's (left open). */
  readonly #owned: boolean;
  /** The backend's name, for errors. */
  readonly #backendName: string;
  /**
   * Bound of the first connection of a client this backend opened, ms (a Sentinel client
   * retries unreachable Sentinels forever).
   */
  readonly #connectTimeoutMs: number;
  /** The server's address for errors: `host:port`, the Sentinels' or the Cluster seeds'. */
  readonly #address: string;
  #closed = false;
  #connecting: Promise<void> | undefined;
  /** An error that makes every command wrong (a db the server does not have). */
  #fatal: Error | undefined;
  /** Last connection-level error of a client this backend opened, for error messages. */
  #lastConnectionError: Error | undefined;
  /**
   * The commands' timeout when the connection keeps it (a client opened without ioredis'
   * per-command timer); undefined when the client times out its commands itself.
   */
  readonly #deadlines: CommandDeadlines | undefined;
  /** `#wrap` with `this` bound, made once (it maps the errors of every call). */
  readonly #wrapError = (operation: string, error: unknown): BackendError =>
    this.#wrap(operation, error);

  constructor(
    client: Redis | Cluster,
    owned: boolean,
    backendName: string,
    connectTimeoutMs: number,
    address?: string,
    boundsCommands = false,
  ) {
    this.client = client;
    this.#owned = owned;
    this.#backendName = backendName;
    this.#connectTimeoutMs = connectTimeoutMs;
    this.#deadlines = boundsCommands ? new CommandDeadlines(connectTimeoutMs) : undefined;
    this.#address = address ?? addressOf(client);
    if (owned) {
      // Connection errors surface through the commands that fail; keep the last one for them.
      client.on('error', (error: Error) => {
        this.#lastConnectionError = error;
        // ioredis reports a failed SELECT (db out of range) only here and goes on in db 0.
        if (/DB index is out of range|invalid DB index/i.test(error.message)) this.#fatal = error;
      });
      client.on('ready', () => {
        this.#lastConnectionError = undefined;
      });
      // A Cluster reports its nodes' connection errors apart.
      if (isClusterClient(client)) {
        client.on('node error', (error: Error) => {
          this.#lastConnectionError = error;
        });
      }
    }
  }

  /** Whether `close()` was called: every `call` then fails. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Run one command (or script) of `operation`, connecting first when the client is new.
   * @throws BackendError naming `operation` and the server, with the client's error as `cause`;
   *   also once the connection is closed.
   */
  call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    if (this.#closed) {
      return Promise.reject(
        new BackendError(this.#backendName, operation, new Error('backend is closed')),
      );
    }
    if ((this.#owned && this.client.status !== 'ready' && this.#queuesUnbounded()) || this.#fatal) {
      return this.#callSlow(operation, run);
    }
    // Hot path: no async frame; the command is written to the socket in this same tick.
    let pending: Promise<T>;
    try {
      pending = run();
    } catch (error) {
      return Promise.reject(this.#wrap(operation, error));
    }
    return this.#bounded(pending, operation);
  }

  /** `pending` with its errors wrapped, and bounded by the command timeout if the connection keeps it. */
  #bounded<T>(pending: Promise<T>, operation: string): Promise<T> {
    const wrapError = this.#wrapError;
    if (this.#deadlines !== undefined) {
      return this.#deadlines.bound(pending, (error) => wrapError(operation, error));
    }
    return pending.catch((error: unknown) => {
      throw wrapError(operation, error);
    });
  }

  /**
   * Refuse further calls; QUIT the client if the backend opened it, within 1 s and
   * `commandTimeoutMs`.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#deadlines?.clear();
    if (this.#owned) await quit(this.client, Math.min(CLOSE_TIMEOUT_MS, this.#connectTimeoutMs));
  }

  /**
   * Whether a command sent now may wait without a bound of the client's own: before the first
   * connection, and on a Cluster that is not ready (its offline queue has no timeout; a single
   * node's queued commands keep their `commandTimeout`).
   */
  #queuesUnbounded(): boolean {
    return this.client.status === 'wait' || isClusterClient(this.client);
  }

  async #callSlow<T>(operation: string, run: () => Promise<T>): Promise<T> {
    try {
      if (this.#owned && this.client.status === 'wait') {
        // First use: connect now, so a failed SELECT is known before any script runs.
        this.#connecting ??= this.client.connect();
        // Bounded: ioredis keeps trying (Sentinels it cannot reach, forever). The client has
        // left 'wait' by then, so later calls take the hot path, bounded by commandTimeout.
        await this.#within(this.#connecting, 'not connected');
      }
      if (this.#fatal) throw this.#fatal;
      // A Cluster still not ready queues the command with no timeout: bound it here.
      if (this.#owned && isClusterClient(this.client) && this.client.status !== 'ready') {
        return await this.#within(run(), 'no answer');
      }
      if (this.#deadlines !== undefined) {
        return await this.#deadlines.bound(run(), (error) => error);
      }
      return await run();
    } catch (error) {
      throw this.#wrap(operation, error);
    }
  }

  /** `pending`, or a rejection after `commandTimeoutMs` (`<what> within N ms`). */
  async #within<T>(pending: Promise<T>, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        pending,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`${what} within ${this.#connectTimeoutMs} ms`)),
            this.#connectTimeoutMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  #wrap(operation: string, error: unknown): BackendError {
    const unreachable = unreachableAt(
      this.#address,
      [error, this.#lastConnectionError],
      this.#connectTimeoutMs,
    );
    if (unreachable) return new BackendError(this.#backendName, operation, error, unreachable);
    const last = this.#lastConnectionError ? `: ${this.#lastConnectionError.message}` : '';
    return new BackendError(this.#backendName, `${operation} (${this.#address}${last})`, error);
  }
}

/** A client's server address for errors, when the backend did not open it from a URL. */
function addressOf(client: Redis | Cluster): string {
  if (isClusterClient(client)) return 'cluster';
  const { host, port } = client.options;
  return `${host}:${port}`;
}
/** An ioredis Cluster, by its own flag (two copies of ioredis defeat `instanceof`). */
export function isClusterClient(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/**
 * QUIT a connected client, but never wait on a silent server longer than `timeoutMs`; then drop
 * the socket and wait (a few ms) until ioredis has let go of it, so no timer or socket of the
 * client outlives the returned promise. A client that is not connected is dropped at once.
 */
export async function quit(client: Redis | Cluster, timeoutMs: number): Promise<void> {
  if (client.status === 'ready') {
    await settleWithin(
      client.quit().catch(() => undefined),
      timeoutMs,
    );
  }
  if (client.status === 'end') return;
  const ended = new Promise<void>((resolve) => client.once('end', resolve));
  client.disconnect();
  // ioredis destroys a socket that has not closed after its `disconnectTimeout`; a socket that
  // was already closed (a refused connection) emits no `end`, and only that timer is left.
  await settleWithin(ended, DISCONNECT_TIMEOUT_MS + 5);
  await new Promise((resolve) => setImmediate(resolve));
}

/** Wait for `pending`, at most `timeoutMs`; clears its timer. */
async function settleWithin(pending: Promise<unknown>, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    pending,
    new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
}
