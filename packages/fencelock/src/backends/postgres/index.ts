/**
 * `fencelock/postgres`: locks in the PostgreSQL you already run (node-postgres `pg`).
 *
 * @example
 * import { createLocker } from 'fencelock';
 * const locker = createLocker('postgres://app@db.internal:5432/app?schema=fencelock');
 *
 * @example
 * // Behind PgBouncer in transaction mode, LISTEN on a direct connection to the server:
 * const locker = createLocker(createPostgresBackend({
 *   url: 'postgres://app@pgbouncer.internal:6432/app',
 *   pooler: 'transaction',
 *   listenUrl: 'postgres://app@db.internal:5432/app',
 * }));
 *
 * @example
 * import pg from 'pg';
 * import { createPostgresBackend } from 'fencelock/postgres';
 * const locker = createLocker(createPostgresBackend({ pool: new pg.Pool(), mode: 'advisory' }));
 */
import type pg from 'pg';
import { InvalidArgumentError } from '../../errors.js';
import { PostgresAdvisoryBackend } from './advisory.js';
import { PostgresBackend } from './backend.js';
import {
  checkListenUrlIsNotThePooler,
  checkPostgresOptions,
  type PostgresLockMode,
  type PostgresPooler,
  type PostgresUrlConfig,
  readPostgresUrl,
} from './url.js';

export { PostgresAdvisoryBackend } from './advisory.js';
export { PostgresBackend, QUEUE_ENTRY_TTL_MS } from './backend.js';
export { lockIdOf } from './sql.js';
export {
  DEFAULT_SCHEMA,
  type PostgresLockMode,
  type PostgresPooler,
  type PostgresUrlConfig,
  parsePostgresUrl,
} from './url.js';

/** Options of `createPostgresBackend`. Give `url` or `pool`. */
export interface PostgresBackendOptions {
  /** A `postgres://` URL; the backend opens (and closes) its own pool. */
  readonly url?: string;
  /**
   * Your `pg.Pool`; it stays open after `close()`. The listener and, in advisory mode, the lock
   * connection are opened beside it with its settings. Its own settings bound the calls on the
   * client side (set its `query_timeout`), and give it an `'error'` listener, as node-postgres
   * asks of every pool: a socket error of an idle or just-released client is emitted there.
   */
  readonly pool?: pg.Pool;
  /** Schema of the lease table and token sequence, created if missing. @default 'fencelock' */
  readonly schema?: string;
  /**
   * `lease`: a row per held lock with a TTL on the server's clock (works through any pooler,
   * see `pooler`). `advisory`: a session-level advisory lock on a dedicated connection (needs a
   * session: not with `pooler: 'transaction'`). @default 'lease'
   */
  readonly mode?: PostgresLockMode;
  /**
   * Wait on LISTEN/NOTIFY; `false` polls with backoff only. With `pooler: 'transaction'` it
   * needs `listenUrl`. @default true
   */
  readonly notifications?: boolean;
  /**
   * Server-side `statement_timeout` of each statement, ms, in [100, 600000]; on the pool the
   * backend opens from `url`, node-postgres' `query_timeout` (1 s later) bounds the call on the
   * client too (on your `pool`, its own settings do). @default 5000
   */
  readonly commandTimeoutMs?: number;
  /**
   * `'transaction'` when `url` or `pool` reaches the server through a transaction-mode pooler
   * (PgBouncer `pool_mode = transaction`). The backend then relies on no session state: it sends
   * no startup parameter a pooler refuses (PgBouncer rejects `statement_timeout`), and runs each
   * statement in `BEGIN; SET LOCAL statement_timeout = …` … `COMMIT`, pipelined in one round
   * trip on the pool it opens (three on a pool you pass in, unless its clients pipeline).
   * Advisory mode is refused, and LISTEN needs `listenUrl` (or `notifications: false`).
   * @default 'none'
   */
  readonly pooler?: PostgresPooler;
  /**
   * A direct (non-pooled) `postgres://` URL of the same database, for the LISTEN connection only:
   * releases sent through the pooler NOTIFY on commit, and this connection hears them. One
   * connection per backend; it runs nothing but LISTEN.
   */
  readonly listenUrl?: string;
  /** Connections of the pool opened from `url`, in [1, 1000]. @default 10 */
  readonly poolSize?: number;
}

/**
 * Create a PostgreSQL backend. No connection is made before the first lock operation, which
 * creates the schema, its token sequence and tables when they are missing (this needs the
 * CREATE privilege once; later runs only read the catalog).
 * @throws InvalidArgumentError when neither or both of `url` and `pool` are given, the URL is
 *   not `postgres://` / `postgresql://`, an option is out of range, or options conflict:
 *   `pooler: 'transaction'` with `mode: 'advisory'`, or with notifications on and no `listenUrl`.
 *   All before any connection is made.
 */
export function createPostgresBackend(
  options: PostgresBackendOptions | PostgresUrlConfig,
): PostgresBackend | PostgresAdvisoryBackend {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', '{ url } or { pool }', options);
  }
  if ('connectionString' in options && typeof options.connectionString === 'string') {
    const config = options as PostgresUrlConfig;
    const checked = checkPostgresOptions(config);
    checkListenUrlIsNotThePooler(config.connectionString, checked);
    return build({ ...checked, connectionString: config.connectionString });
  }
  const o = options as PostgresBackendOptions;
  if ((o.url === undefined) === (o.pool === undefined)) {
    throw new InvalidArgumentError(
      'options',
      'exactly one of url or pool',
      Object.keys(o).join(','),
    );
  }
  if (o.pool !== undefined) {
    const checked = checkPostgresOptions(o);
    const pool = o.pool as unknown as Record<string, unknown>;
    if (typeof pool?.query !== 'function' || typeof pool?.connect !== 'function') {
      throw new InvalidArgumentError('pool', 'a pg.Pool', o.pool);
    }
    return build({ ...checked, pool: o.pool });
  }
  if (typeof o.url !== 'string') {
    throw new InvalidArgumentError('url', 'a postgres:// or postgresql:// URL', o.url);
  }
  // Parameters in the URL count unless the same option is given explicitly; they are checked
  // against each other once merged (`?pooler=transaction` with an explicit `listenUrl`).
  const { connectionString, options: fromUrl } = readPostgresUrl(o.url);
  const explicit = Object.fromEntries(
    Object.entries(o).filter(([name, value]) => name !== 'url' && value !== undefined),
  );
  const checked = checkPostgresOptions({ ...fromUrl, ...explicit });
  checkListenUrlIsNotThePooler(connectionString, checked);
  return build({ ...checked, connectionString });
}

function build(
  settings: ConstructorParameters<typeof PostgresBackend>[0],
): PostgresBackend | PostgresAdvisoryBackend {
  return settings.mode === 'advisory'
    ? new PostgresAdvisoryBackend(settings)
    : new PostgresBackend(settings);
}
