/**
 * Parse `postgres://[user[:pass]@]host[:port]/database[?…]` store URLs (also `postgresql://`)
 * without importing the engine client.
 *
 * fencelock's own query parameters:
 * - `schema`: where the lease table and the token sequence live (default `fencelock`);
 * - `mode`: `lease` (a row per held lock, TTL from the server's clock; the default) or
 *   `advisory` (a session-level `pg_try_advisory_lock` on one dedicated connection);
 * - `notifications`: `false` turns LISTEN/NOTIFY waiting off (waiters poll);
 * - `commandTimeoutMs`: server-side `statement_timeout` of each statement (default 5000);
 * - `poolSize`: connections of the pool the backend opens (default 10);
 * - `pooler`: `transaction` when the URL points at a transaction-mode pooler such as PgBouncer
 *   (`none`, the default, for the server itself or a session-mode pooler);
 * - `listenUrl`: a direct (non-pooled) URL, percent-encoded, for the LISTEN connection only.
 *
 * node-postgres' own connection parameters (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
 * `application_name`, `options`, `host` for a socket folder) are passed through to it.
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter } from '../store-url.js';

/** How a PostgreSQL backend holds a lock. */
export type PostgresLockMode = 'lease' | 'advisory';

/**
 * What sits between the backend and the server. `none`: the server itself, or a session-mode
 * pooler that keeps one server connection per client connection. `transaction`: a
 * transaction-mode pooler (PgBouncer `pool_mode = transaction`, Supavisor, RDS Proxy…), which
 * lends a server connection for one transaction only, so no session state may be relied on.
 */
export type PostgresPooler = 'none' | 'transaction';

/** A checked PostgreSQL store URL. */
export interface PostgresUrlConfig {
  /** The URL for node-postgres, without fencelock's parameters. */
  readonly connectionString: string;
  readonly schema: string;
  readonly mode: PostgresLockMode;
  readonly notifications: boolean;
  readonly commandTimeoutMs: number;
  readonly poolSize: number;
  /** @default 'none' */
  readonly pooler?: PostgresPooler;
  /** A direct (non-pooled) `postgres://` URL for the LISTEN connection only. */
  readonly listenUrl?: string;
}

/** fencelock's options as checked together: every default filled in. */
export interface CheckedPostgresOptions
  extends Omit<PostgresUrlConfig, 'connectionString' | 'pooler' | 'listenUrl'> {
  readonly pooler: PostgresPooler;
  readonly listenUrl?: string;
}

/** fencelock's options as given (URL parameters or `createPostgresBackend`), not checked yet. */
export interface PostgresOptionsInput {
  schema?: unknown;
  mode?: unknown;
  notifications?: unknown;
  commandTimeoutMs?: unknown;
  poolSize?: unknown;
  pooler?: unknown;
  listenUrl?: unknown;
}

const SHAPE = 'postgres://[user[:pass]@]host[:port]/database[?schema=…&mode=lease|advisory]';
const LISTEN_SHAPE = 'postgres://[user[:pass]@]host[:port]/database (the server, not a pooler)';
const OWN_PARAMS = new Set([
  'schema',
  'mode',
  'notifications',
  'commandTimeoutMs',
  'poolSize',
  'pooler',
  'listenUrl',
]);
const DRIVER_PARAMS = new Set([
  'sslmode',
  'ssl',
  'sslrootcert',
  'sslcert',
  'sslkey',
  'application_name',
  'options',
  'host',
]);

/** Default schema of the lease table. */
export const DEFAULT_SCHEMA = 'fencelock';

/**
 * A schema name fencelock creates and quotes itself: a lower-case SQL identifier of at most 63
 * bytes (PostgreSQL's NAMEDATALEN − 1), so the same name works quoted and unquoted.
 */
function isSchemaName(value: unknown): value is string {
  return typeof value === 'string' && /^[a-z_][a-z0-9_]{0,62}$/.test(value);
}

/**
 * Check fencelock's options shared by the URL and `createPostgresBackend`, each alone and then
 * together (a transaction-mode pooler rules out advisory mode, and LISTEN through it).
 * @throws InvalidArgumentError naming the option, what is allowed and what was received.
 */
export function checkPostgresOptions(options: PostgresOptionsInput): CheckedPostgresOptions {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  if (!isSchemaName(schema)) {
    throw new InvalidArgumentError(
      'schema',
      'a lower-case SQL identifier of 1 to 63 bytes',
      schema,
    );
  }
  const mode = options.mode ?? 'lease';
  if (mode !== 'lease' && mode !== 'advisory') {
    throw new InvalidArgumentError('mode', "'lease' or 'advisory'", mode);
  }
  const notifications = options.notifications ?? true;
  if (typeof notifications !== 'boolean') {
    throw new InvalidArgumentError('notifications', 'a boolean', notifications);
  }
  const commandTimeoutMs = options.commandTimeoutMs ?? 5_000;
  if (
    typeof commandTimeoutMs !== 'number' ||
    !Number.isInteger(commandTimeoutMs) ||
    commandTimeoutMs < 100 ||
    commandTimeoutMs > 600_000
  ) {
    throw new InvalidArgumentError(
      'commandTimeoutMs',
      'an integer in [100, 600000]',
      commandTimeoutMs,
    );
  }
  const poolSize = options.poolSize ?? 10;
  if (
    typeof poolSize !== 'number' ||
    !Number.isInteger(poolSize) ||
    poolSize < 1 ||
    poolSize > 1000
  ) {
    throw new InvalidArgumentError('poolSize', 'an integer in [1, 1000]', poolSize);
  }
  const pooler = options.pooler ?? 'none';
  if (pooler !== 'none' && pooler !== 'transaction') {
    throw new InvalidArgumentError('pooler', "'none' or 'transaction'", pooler);
  }
  const listenUrl = options.listenUrl;
  if (listenUrl !== undefined) checkListenUrl(listenUrl);
  if (pooler === 'transaction') {
    // A transaction-mode pooler hands each transaction any server connection: a session-level
    // advisory lock would stay on a connection the next client gets, and LISTEN hears nothing.
    if (mode === 'advisory') {
      throw new InvalidArgumentError(
        'mode',
        "'lease' with pooler 'transaction' (advisory locks live in a session: connect " +
          'advisory mode to the server itself or through a session-mode pooler)',
        mode,
      );
    }
    if (notifications && listenUrl === undefined) {
      throw new InvalidArgumentError(
        'listenUrl',
        "a direct (non-pooled) postgres:// URL for LISTEN with pooler 'transaction', which " +
          'LISTEN does not work through (in a store URL: listenUrl=<the URL, percent-encoded>); ' +
          'or set notifications: false (notifications=false) to wait by polling only',
        listenUrl,
      );
    }
  }
  return {
    schema,
    mode,
    notifications,
    commandTimeoutMs,
    poolSize,
    pooler,
    ...(listenUrl === undefined ? {} : { listenUrl }),
  };
}

/**
 * With `pooler: 'transaction'`, refuse a `listenUrl` with the host and port of the store URL
 * itself: that is the pooler, and LISTEN through it would hear nothing (waiters would fall back
 * to polling without a word). Host names are compared as written.
 * @throws InvalidArgumentError naming `listenUrl`.
 */
export function checkListenUrlIsNotThePooler(
  connectionString: string,
  options: CheckedPostgresOptions,
): void {
  if (options.pooler !== 'transaction' || options.listenUrl === undefined) return;
  const address = (value: string) => {
    const url = new URL(value);
    return url.hostname === '' ? undefined : `${url.hostname}:${url.port || '5432'}`;
  };
  const pooler = address(connectionString);
  if (pooler !== undefined && pooler === address(options.listenUrl)) {
    throw new InvalidArgumentError(
      'listenUrl',
      `the PostgreSQL server itself, not the pooler at ${pooler} that the store URL names ` +
        '(LISTEN through a transaction-mode pooler hears nothing)',
      options.listenUrl,
    );
  }
}

/**
 * The shape of a store URL (`store`) or of `listenUrl`: `postgres:` or `postgresql:`, a host, a
 * port in range, no fragment. Returns the parsed URL.
 */
function checkUrlShape(argument: string, value: string, shape = SHAPE): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(argument, shape, value);
  }
  // `postgres:u:pw@h/db` (no `//`) parses too, as a path: node-postgres would read it as a
  // database name, password and all.
  if (!/^postgres(ql)?:\/\//i.test(value)) {
    // Shown as its scheme only: without `//` no part can be told to be a password.
    throw new InvalidArgumentError(argument, shape, `${url.protocol} without "//"`);
  }
  if (url.hostname === '' && !url.searchParams.has('host')) {
    throw new InvalidArgumentError(argument, `${shape} with a host`, value);
  }
  if (url.port !== '' && !(Number(url.port) >= 1 && Number(url.port) <= 65535)) {
    throw new InvalidArgumentError(argument, `${shape} with a port in [1, 65535]`, value);
  }
  if (url.hash !== '') throw new InvalidArgumentError(argument, `${shape} without "#"`, value);
  return url;
}

/**
 * `listenUrl`: a `postgres://` URL with node-postgres' parameters only (fencelock's own belong
 * to the store URL). Errors show it without its password (`InvalidArgumentError` redacts URLs).
 */
function checkListenUrl(value: unknown): asserts value is string {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError('listenUrl', 'a postgres:// or postgresql:// URL', value);
  }
  const url = checkUrlShape('listenUrl', value, LISTEN_SHAPE);
  for (const name of url.searchParams.keys()) {
    if (!DRIVER_PARAMS.has(name)) {
      throw new InvalidArgumentError(
        `listenUrl parameter ${name}`,
        [...DRIVER_PARAMS].join(', '),
        name,
      );
    }
  }
}

/**
 * A store URL's own parameters, each checked alone (not yet against each other), and the URL for
 * node-postgres without them. For `createPostgresBackend`, whose explicit options may complete
 * them (`{ url: '…?pooler=transaction', listenUrl }`).
 * @throws InvalidArgumentError for a malformed URL or an unknown or bad parameter.
 */
export function readPostgresUrl(store: string): {
  connectionString: string;
  options: PostgresOptionsInput;
} {
  const url = checkUrlShape('store', store);
  for (const name of url.searchParams.keys()) {
    if (!OWN_PARAMS.has(name) && !DRIVER_PARAMS.has(name)) {
      throw new InvalidArgumentError(
        `store parameter ${name}`,
        [...OWN_PARAMS, ...DRIVER_PARAMS].join(', '),
        name,
      );
    }
  }
  const params = url.searchParams;
  const notifications = params.get('notifications');
  if (notifications !== null && notifications !== 'true' && notifications !== 'false') {
    throw new InvalidArgumentError('store parameter notifications', 'true or false', notifications);
  }
  const options: PostgresOptionsInput = {
    schema: params.get('schema') ?? undefined,
    mode: params.get('mode') ?? undefined,
    notifications: notifications === null ? undefined : notifications === 'true',
    commandTimeoutMs: integerParameter(params, 'commandTimeoutMs', 5_000, 100, 600_000),
    poolSize: integerParameter(params, 'poolSize', 10, 1, 1000),
    pooler: params.get('pooler') ?? undefined,
    listenUrl: params.get('listenUrl') ?? undefined,
  };
  const driverUrl = new URL(url.href);
  for (const name of OWN_PARAMS) driverUrl.searchParams.delete(name);
  return { connectionString: driverUrl.href, options };
}

/** @throws InvalidArgumentError for a malformed URL or an unknown, bad or conflicting parameter. */
export function parsePostgresUrl(store: string): PostgresUrlConfig & CheckedPostgresOptions {
  const { connectionString, options } = readPostgresUrl(store);
  const checked = checkPostgresOptions(options);
  checkListenUrlIsNotThePooler(connectionString, checked);
  return { connectionString, ...checked };
}
