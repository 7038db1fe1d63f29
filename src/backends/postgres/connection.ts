/**
 * What both PostgreSQL lock modes share: the pool, the one-time schema set-up, the release
 * listener and the mapping of driver errors to `BackendError`.
 */
import pg from 'pg';
import { BackendError } from '../../errors.js';
import { ReleaseListener } from './listener.js';
import { type PostgresSql, sqlFor } from './sql.js';
import type { PostgresUrlConfig } from './url.js';

/** How the backend reaches the server: its own pool from a URL, or the user's pool. */
export type PostgresConnection =
  | { readonly connectionString: string; readonly pool?: undefined }
  | { readonly pool: pg.Pool; readonly connectionString?: undefined };

/** Checked settings of one backend. */
export type PostgresSettings = Omit<PostgresUrlConfig, 'connectionString'> & PostgresConnection;

/** Slack between the server's `statement_timeout` and the client's own query timeout, ms. */
const CLIENT_TIMEOUT_SLACK_MS = 1_000;

export class PostgresConnectionSet {
  readonly sql: PostgresSql;
  readonly pool: pg.Pool;
  readonly listener: ReleaseListener | undefined;
  readonly #ownsPool: boolean;
  readonly #clientConfig: pg.ClientConfig;
  readonly #commandTimeoutMs: number;
  #setup: Promise<void> | undefined;
  #closed = false;

  constructor(settings: PostgresSettings) {
    this.sql = sqlFor(settings.schema);
    this.#commandTimeoutMs = settings.commandTimeoutMs;
    const timeouts = {
      statement_timeout: settings.commandTimeoutMs,
      query_timeout: settings.commandTimeoutMs + CLIENT_TIMEOUT_SLACK_MS,
      connectionTimeoutMillis: settings.commandTimeoutMs,
      keepAlive: true,
      keepAliveInitialDelayMillis: 1_000,
    };
    if (settings.pool !== undefined) {
      this.pool = settings.pool;
      this.#ownsPool = false;
      // The listener and the advisory connection copy the pool's connection settings.
      this.#clientConfig = { ...(settings.pool.options as pg.ClientConfig), ...timeouts };
    } else {
      this.#clientConfig = {
        connectionString: settings.connectionString,
        application_name: 'fencelock',
        ...timeouts,
      };
      this.pool = new pg.Pool({ ...this.#clientConfig, max: settings.poolSize });
      this.#ownsPool = true;
      // An idle pooled connection that dies is replaced on the next query; its error is not
      // the caller's.
      this.pool.on('error', () => undefined);
    }
    this.listener = settings.notifications
      ? new ReleaseListener(() => this.connectDedicated(), this.sql.channel)
      : undefined;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** A new connection outside the pool (LISTEN, advisory locks). The caller ends it. */
  async connectDedicated(): Promise<pg.Client> {
    const client = new pg.Client({ ...this.#clientConfig, query_timeout: undefined });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    return client;
  }

  /** Create the schema's sequence and tables once, if they are missing. */
  ensureSchema(): Promise<void> {
    this.#setup ??= (async () => {
      const found = await this.pool.query<{ ready: boolean }>(this.sql.ready, [
        this.sql.leasesTable,
      ]);
      if (found.rows[0]?.ready !== true) await this.pool.query(this.sql.setup);
    })().catch((error: unknown) => {
      this.#setup = undefined;
      throw error;
    });
    return this.#setup;
  }

  /**
   * Run `fn` after the set-up; any failure becomes a `BackendError` of `operation`. A failure of
   * the connection itself (the server terminated it, restarted, refused it) is retried with
   * backoff for up to `commandTimeoutMs`, on a new pooled connection: every statement is safe to
   * repeat (grants are idempotent for their owner, renewals and withdrawals too; a repeated
   * release whose first try was applied answers `not-held`). So a waiter rides out a server
   * restart, as ioredis' reconnects let a Redis waiter do. `retry: false` for statements bound
   * to one connection (advisory locks).
   */
  async run<T>(operation: string, fn: () => Promise<T>, retry = true): Promise<T> {
    const giveUpAt = performance.now() + this.#commandTimeoutMs;
    for (let delayMs = 50; ; delayMs = Math.min(500, delayMs * 2)) {
      if (this.#closed) {
        throw new BackendError('postgres', operation, new Error('backend is closed'));
      }
      try {
        await this.ensureSchema();
        return await fn();
      } catch (error) {
        if (error instanceof BackendError) throw error;
        if (!retry || !isConnectionFailure(error) || performance.now() + delayMs > giveUpAt) {
          throw new BackendError('postgres', operation, error);
        }
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }

  /** Stop the listener and end the pool if this backend opened it. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.listener?.close();
    if (this.#ownsPool) await this.pool.end().catch(() => undefined);
  }
}

/**
 * The connection failed, not the statement: the server ended the session (`57P01` admin
 * shutdown, `57P02` crash shutdown, `57P03` cannot connect now), a connection exception (class
 * `08`), or the socket closed or was refused.
 */
export function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  if (typeof code === 'string' && (code.startsWith('57P') || code.startsWith('08'))) return true;
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'EPIPE') return true;
  const message = error instanceof Error ? error.message : '';
  return /connection terminated|not queryable|Client has encountered a connection error/i.test(
    message,
  );
}
