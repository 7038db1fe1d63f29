/**
 * The connection of a Redis backend: one ioredis client (a node-redis client comes through its
 * adapter), connected on first use within a bound, every command's failure wrapped in a
 * `BackendError` that names the operation, the server and the client's last connection error,
 * and closed within a bound. It knows nothing of locks; `backend.ts` runs its scripts through
 * `call`.
 */
import type { Cluster, Redis } from 'ioredis';
import { BackendError } from '../../errors.js';

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
  #closed = false;
  #connecting: Promise<void> | undefined;
  /** An error that makes every command wrong (a db the server does not have). */
  #fatal: Error | undefined;
  /** Last connection-level error of a client this backend opened, for error messages. */
  #lastConnectionError: Error | undefined;

  constructor(
    client: Redis | Cluster,
    owned: boolean,
    backendName: string,
    connectTimeoutMs: number,
  ) {
    this.client = client;
    this.#owned = owned;
    this.#backendName = backendName;
    this.#connectTimeoutMs = connectTimeoutMs;
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
    if ((this.#owned && this.client.status === 'wait') || this.#fatal) {
      return this.#callSlow(operation, run);
    }
    // Hot path: no async frame; the command is written to the socket in this same tick.
    let pending: Promise<T>;
    try {
      pending = run();
    } catch (error) {
      return Promise.reject(this.#wrap(operation, error));
    }
    return pending.catch((error: unknown) => {
      throw this.#wrap(operation, error);
    });
  }

  /** Refuse further calls; QUIT the client (within 1 s) if the backend opened it. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#owned) await quit(this.client, CLOSE_TIMEOUT_MS);
  }

  async #callSlow<T>(operation: string, run: () => Promise<T>): Promise<T> {
    try {
      if (this.#owned && this.client.status === 'wait') {
        // First use: connect now, so a failed SELECT is known before any script runs.
        this.#connecting ??= this.client.connect();
        // Bounded: ioredis keeps trying (Sentinels it cannot reach, forever). The client has
        // left 'wait' by then, so later calls take the hot path, bounded by commandTimeout.
        let timer: NodeJS.Timeout | undefined;
        try {
          await Promise.race([
            this.#connecting,
            new Promise<never>((_, reject) => {
              timer = setTimeout(
                () =>
                  reject(
                    new Error(
                      `not connected within ${this.#connectTimeoutMs} ms (commandTimeoutMs)`,
                    ),
                  ),
                this.#connectTimeoutMs,
              );
            }),
          ]);
        } finally {
          clearTimeout(timer);
        }
      }
      if (this.#fatal) throw this.#fatal;
      return await run();
    } catch (error) {
      throw this.#wrap(operation, error);
    }
  }

  #wrap(operation: string, error: unknown): BackendError {
    const { host, port } = isClusterClient(this.client)
      ? { host: 'cluster', port: '' }
      : this.client.options;
    const last = this.#lastConnectionError ? `: ${this.#lastConnectionError.message}` : '';
    return new BackendError(this.#backendName, `${operation} (${host}:${port}${last})`, error);
  }
}

/** An ioredis Cluster, by its own flag (two copies of ioredis defeat `instanceof`). */
export function isClusterClient(client: Redis | Cluster): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/** QUIT, but never wait on a silent server longer than `timeoutMs`; then drop the socket. */
export async function quit(client: Redis | Cluster, timeoutMs: number): Promise<void> {
  if (client.status === 'end' || client.status === 'wait') {
    client.disconnect();
    return;
  }
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    client.quit().catch(() => undefined),
    new Promise((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  client.disconnect();
}
