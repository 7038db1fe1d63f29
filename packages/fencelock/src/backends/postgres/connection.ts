/**
 * What both PostgreSQL lock modes share: the pool, the one-time schema set-up, the release
 * listener and the mapping of driver errors to `BackendError`.
 *
 * Behind a transaction-mode pooler (`pooler: 'transaction'`) no session state is relied on. The
 * server-side timeout then cannot travel as a startup parameter (PgBouncer refuses
 * `statement_timeout` there, and would not keep it for the next transaction anyway), so each
 * statement runs in its own transaction that sets it first: `BEGIN; SET LOCAL
 * statement_timeout = …`, the statement, `COMMIT`. On the pool the backend opens, its clients
 * pipeline those three, so it is still one round trip (and one transaction, so a pooler lends
 * the server connection for just that). node-postgres' `query_timeout` bounds every call on the
 * client side too, in both modes. The LISTEN connection goes to `listenUrl`, the server itself.
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { BackendError } from '../../errors.js';
import { unreachableAt } from '../unreachable.js';
import { ReleaseListener } from './listener.js';
import { type PostgresSql, sqlFor } from './sql.js';
import type { CheckedPostgresOptions } from './url.js';

/** How the backend reaches the server: its own pool from a URL, or the user's pool. */
export type PostgresConnection =
  | { readonly connectionString: string; readonly pool?: undefined }
  | { readonly pool: pg.Pool; readonly connectionString?: undefined };

/** Checked settings of one backend. */
export type PostgresSettings = CheckedPostgresOptions & PostgresConnection;

/** Names of the prepared statements, by text. */
const statementNames = new Map<string, string>();

/**
 * `text` as a named prepared statement, parsed and planned once per server connection, then
 * only bound and executed. The name is `fencelock_` and 24 hex digits of the text's SHA-256, so
 * one name never stands for two texts on a connection (the schema is part of the text).
 */
export function prepared(text: string, values: readonly unknown[]): pg.QueryConfig {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `fencelock_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    statementNames.set(text, name);
  }
  return { name, text, values: [...values] };
}

/** Slack between the server's `statement_timeout` and the client's own query timeout, ms. */
const CLIENT_TIMEOUT_SLACK_MS = 1_000;

export class PostgresConnectionSet {
  readonly sql: PostgresSql;
  readonly pool: pg.Pool;
  readonly listener: ReleaseListener | undefined;
  readonly #ownsPool: boolean;
  readonly #clientConfig: pg.ClientConfig;
  /** The LISTEN connection's settings when `listenUrl` is given. */
  readonly #listenConfig: pg.ClientConfig | undefined;
  readonly #commandTimeoutMs: number;
  /** Behind a transaction-mode pooler: statements run in `#begin` … `COMMIT`. */
  readonly #transactionPooler: boolean;
  readonly #begin: string;
  /** Set once a server connection did not match its prepared statements: a pooler nobody named sits in between. */
  #unnamedOnly = false;
  /** The server's address for errors (`host:port`, never user info). */
  readonly #address: string;
  #setup: Promise<void> | undefined;
  #closed = false;

  constructor(settings: PostgresSettings) {
    this.sql = sqlFor(settings.schema);
    this.#commandTimeoutMs = settings.commandTimeoutMs;
    this.#transactionPooler = settings.pooler === 'transaction';
    // An integer checked to be in [100, 600000]: safe to put in the statement's text.
    this.#begin = `BEGIN; SET LOCAL statement_timeout = ${settings.commandTimeoutMs}`;
    const connect = {
      connectionTimeoutMillis: settings.commandTimeoutMs,
      keepAlive: true,
      keepAliveInitialDelayMillis: 1_000,
    };
    const timeouts = {
      // A startup parameter: a transaction-mode pooler refuses it (see the module comment).
      ...(this.#transactionPooler ? {} : { statement_timeout: settings.commandTimeoutMs }),
      query_timeout: settings.commandTimeoutMs + CLIENT_TIMEOUT_SLACK_MS,
      ...connect,
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
      this.pool = new pg.Pool({
        ...this.#clientConfig,
        max: settings.poolSize,
        // node-postgres without pipelining ignores it and sends the three one after another.
        ...(this.#transactionPooler ? { pipeline: true } : {}),
      });
      this.#ownsPool = true;
      // An idle pooled connection that dies is replaced on the next query; its error is not
      // the caller's.
      this.pool.on('error', () => undefined);
    }
    this.#address = addressOf(this.#clientConfig);
    // Only LISTEN runs there: no statement timeout, so a session-mode pooler would do too.
    this.#listenConfig =
      settings.listenUrl === undefined
        ? undefined
        : { connectionString: settings.listenUrl, application_name: 'fencelock', ...connect };
    this.listener = settings.notifications
      ? new ReleaseListener(() => this.#connectListener(), this.sql.channel)
      : undefined;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** A new connection outside the pool (LISTEN, advisory locks). The caller ends it. */
  connectDedicated(): Promise<pg.Client> {
    return openClient({ ...this.#clientConfig, query_timeout: undefined });
  }

  /** The LISTEN connection: to `listenUrl` when given, else like the pool's connections. */
  #connectListener(): Promise<pg.Client> {
    return this.#listenConfig === undefined
      ? this.connectDedicated()
      : openClient(this.#listenConfig);
  }

  /**
   * Run one statement on a pooled connection (`values` as node-postgres takes them). Behind a
   * transaction-mode pooler it runs in its own transaction with `SET LOCAL statement_timeout`
   * (see the module comment).
   */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: readonly unknown[],
  ): Promise<pg.QueryResult<R>> {
    const params = values === undefined ? undefined : [...values];
    return this.#transactionPooler
      ? this.#inTransaction<R>(text, params)
      : this.pool.query<R>(text, params);
  }

  /**
   * `query` for the statements of the hot path: as a named prepared statement (`prepared`),
   * except behind a transaction-mode pooler, where the next transaction may run on a server
   * connection that never saw the statement.
   */
  async queryPrepared<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values: readonly unknown[],
  ): Promise<pg.QueryResult<R>> {
    if (this.#transactionPooler || this.#unnamedOnly) return this.query<R>(text, values);
    try {
      return await this.pool.query<R>(prepared(text, values));
    } catch (error) {
      if (!isPreparedStatementMismatch(error)) throw error;
      // A transaction-mode pooler the options do not name ran this on a server connection that
      // never prepared it, or one that another client connection prepared it on. Unnamed from
      // now on; the statement is safe to repeat (see `run`).
      this.#unnamedOnly = true;
      return this.query<R>(text, values);
    }
  }

  async #inTransaction<R extends pg.QueryResultRow>(
    text: string,
    values: unknown[] | undefined,
  ): Promise<pg.QueryResult<R>> {
    const client = await this.pool.connect();
    // Set when the connection's state is not known to be clean: it is then closed, not reused.
    let broken: Error | undefined;
    // A checked-out client has no listener of the pool's: without this one, the socket's error
    // when the server ends the session mid-statement (terminated, failover, a pooler's KILL)
    // would be an unhandled 'error' event and end the process. The statement rejects as well.
    const onError = (error: Error) => {
      broken = error;
    };
    client.on('error', onError);
    try {
      if ((client as { pipeline?: boolean }).pipeline === true) {
        // Written at once, answered in order: one round trip. A failed statement aborts the
        // transaction, and the COMMIT behind it then rolls back (tag ROLLBACK, no error), so
        // once all three are answered no transaction is left open.
        const [, statement, commit] = await Promise.allSettled([
          client.query(this.#begin),
          client.query<R>(text, values),
          client.query('COMMIT'),
        ]);
        if (statement.status === 'rejected') throw statement.reason;
        if (commit.status === 'rejected') throw commit.reason;
        return statement.value;
      }
      try {
        await client.query(this.#begin);
        const result = await client.query<R>(text, values);
        await client.query('COMMIT');
        return result;
      } catch (error) {
        // After the server's error answer, end the transaction (a no-op if none is open).
        if (isServerError(error) && !isConnectionFailure(error)) {
          await client.query('ROLLBACK').catch((rollbackError: unknown) => {
            broken = asError(rollbackError);
          });
        }
        throw error;
      }
    } catch (error) {
      // A server's error answer (a statement timeout, say) leaves the connection usable; a
      // client-side timeout or a connection failure does not.
      if (!isServerError(error) || isConnectionFailure(error)) broken = asError(error);
      throw error;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }

  /** Create the schema's sequence and tables once, if they are missing. */
  ensureSchema(): Promise<void> {
    this.#setup ??= (async () => {
      const found = await this.query<{ ready: boolean }>(this.sql.ready, [this.sql.newestObject]);
      if (found.rows[0]?.ready === true) return;
      const schema = await this.query<{ exists: boolean }>(this.sql.schemaExists, [
        this.sql.schemaName,
      ]);
      const setup = schema.rows[0]?.exists === true ? this.sql.setupInSchema : this.sql.setup;
      try {
        await this.query(setup);
      } catch (error) {
        if (isPermissionDenied(error)) throw withCreateHint(error, this.sql.schemaName);
        // Two processes creating the schema at once: the advisory lock of the set-up serialises
        // them, but waiting on it does not refresh the loser's catalog cache, so its
        // IF NOT EXISTS can miss what the winner just committed and fail as a duplicate (seen
        // behind PgBouncer, where the set-up runs in BEGIN … COMMIT). The objects exist then:
        // a new transaction sees them.
        if (!isDuplicateObject(error)) throw error;
        await this.query(setup);
      }
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
        if (isStartupParameterRefusal(error)) {
          // Not transient: a pooler refuses the session settings every time.
          throw new BackendError('postgres', operation, withPoolerHint(error));
        }
        if (!retry || !isConnectionFailure(error) || performance.now() + delayMs > giveUpAt) {
          throw new BackendError(
            'postgres',
            operation,
            error,
            unreachableAt(this.#address, [error], this.#boundOf(error)),
          );
        }
        await new Promise((resolve) => setTimeout(resolve, delayMs));
      }
    }
  }

  /** The client-side bound `error` reports running out: the query's, or the connection's. */
  #boundOf(error: unknown): number {
    const queryTimedOut = error instanceof Error && /Query read timeout/i.test(error.message);
    return this.#commandTimeoutMs + (queryTimedOut ? CLIENT_TIMEOUT_SLACK_MS : 0);
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
 * PgBouncer's answer to a startup parameter it does not pass on (`statement_timeout`, which
 * this backend sets unless `pooler: 'transaction'`): "unsupported startup parameter: …".
 */
function isStartupParameterRefusal(error: unknown): boolean {
  return error instanceof Error && /unsupported startup parameter/i.test(error.message);
}

/**
 * What a server connection shared behind a transaction-mode pooler answers a named statement:
 * SQLSTATE 26000 (invalid_sql_statement_name: not prepared on this server connection) or 42P05
 * (duplicate_prepared_statement: another client connection prepared it there).
 */
function isPreparedStatementMismatch(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '26000' || code === '42P05';
}

/** SQLSTATE 42501 (insufficient_privilege). */
function isPermissionDenied(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '42501';
}

/** The set-up's refusal, with the privilege it needs (once) and how to do without it. */
function withCreateHint(error: unknown, schema: string): Error {
  return new Error(
    `${(error as Error).message} (creating fencelock's tables needs CREATE on schema ${schema}, ` +
      'and on the database when the schema does not exist yet, once; upgrading the tables of an ' +
      "earlier version (the lock-delay's columns) needs their ownership, once: grant it, or run " +
      'fencelock once as a user who has it; later runs only use the tables)',
    { cause: error },
  );
}

/** The refusal, with what to change in the store URL. */
function withPoolerHint(error: unknown): Error {
  return new Error(
    `${(error as Error).message} (a pooler refused the session settings: behind a ` +
      'transaction-mode pooler such as PgBouncer, add ?pooler=transaction&listenUrl=<the ' +
      "server's own URL, percent-encoded>, or notifications=false instead of listenUrl)",
    { cause: error },
  );
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

/** Connect a client outside the pool; its later errors are the owner's (`end` events). */
async function openClient(config: pg.ClientConfig): Promise<pg.Client> {
  const client = new pg.Client(config);
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    await client.end().catch(() => undefined);
    throw error;
  }
  return client;
}

/** `unique_violation` (on a catalog), `duplicate_schema`, `duplicate_table`, `duplicate_object`. */
function isDuplicateObject(error: unknown): boolean {
  const code = (error as { code?: unknown })?.code;
  return code === '23505' || code === '42P06' || code === '42P07' || code === '42710';
}

/** The server (or the pooler) answered with an error message (node-postgres `DatabaseError`). */
function isServerError(error: unknown): boolean {
  return typeof (error as { severity?: unknown })?.severity === 'string';
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/** `host:port` of a client config (from its fields or its connection string), for errors. */
function addressOf(config: pg.ClientConfig): string {
  let host = config.host;
  let port = config.port;
  if (config.connectionString !== undefined) {
    try {
      const url = new URL(config.connectionString);
      host ??= decodeURIComponent(url.hostname) || undefined;
      port ??= url.port === '' ? undefined : Number(url.port);
    } catch {
      // A key=value connection string: node-postgres reads it; the address stays unknown.
    }
  }
  return `${host ?? 'localhost'}:${port ?? 5432}`;
}
