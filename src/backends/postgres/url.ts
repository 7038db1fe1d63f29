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
 * - `poolSize`: connections of the pool the backend opens (default 10).
 *
 * node-postgres' own connection parameters (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`,
 * `application_name`, `options`, `host` for a socket folder) are passed through to it.
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter } from '../../options.js';

/** How a PostgreSQL backend holds a lock. */
export type PostgresLockMode = 'lease' | 'advisory';

/** A checked PostgreSQL store URL. */
export interface PostgresUrlConfig {
  /** The URL for node-postgres, without fencelock's parameters. */
  readonly connectionString: string;
  readonly schema: string;
  readonly mode: PostgresLockMode;
  readonly notifications: boolean;
  readonly commandTimeoutMs: number;
  readonly poolSize: number;
}

const SHAPE = 'postgres://[user[:pass]@]host[:port]/database[?schema=…&mode=lease|advisory]';
const OWN_PARAMS = new Set(['schema', 'mode', 'notifications', 'commandTimeoutMs', 'poolSize']);
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
export function isSchemaName(value: unknown): value is string {
  return typeof value === 'string' && /^[a-z_][a-z0-9_]{0,62}$/.test(value);
}

/** Check fencelock's options shared by the URL and `createPostgresBackend`. */
export function checkPostgresOptions(options: {
  schema?: unknown;
  mode?: unknown;
  notifications?: unknown;
  commandTimeoutMs?: unknown;
  poolSize?: unknown;
}): Omit<PostgresUrlConfig, 'connectionString'> {
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
  return { schema, mode, notifications, commandTimeoutMs, poolSize };
}

/** @throws InvalidArgumentError for a malformed URL or an unknown or bad parameter. */
export function parsePostgresUrl(store: string): PostgresUrlConfig {
  let url: URL;
  try {
    url = new URL(store);
  } catch {
    throw new InvalidArgumentError('store', SHAPE, store);
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new InvalidArgumentError('store', SHAPE, store);
  }
  if (url.hostname === '' && !url.searchParams.has('host')) {
    throw new InvalidArgumentError('store', `${SHAPE} with a host`, store);
  }
  if (url.port !== '' && !(Number(url.port) >= 1 && Number(url.port) <= 65535)) {
    throw new InvalidArgumentError('store', `${SHAPE} with a port in [1, 65535]`, store);
  }
  if (url.hash !== '') throw new InvalidArgumentError('store', `${SHAPE} without "#"`, store);
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
  const checked = checkPostgresOptions({
    schema: params.get('schema') ?? undefined,
    mode: params.get('mode') ?? undefined,
    notifications: notifications === null ? undefined : notifications === 'true',
    commandTimeoutMs: integerParameter(params, 'commandTimeoutMs', 5_000, 100, 600_000),
    poolSize: integerParameter(params, 'poolSize', 10, 1, 1000),
  });
  const driverUrl = new URL(url.href);
  for (const name of OWN_PARAMS) driverUrl.searchParams.delete(name);
  return { connectionString: driverUrl.href, ...checked };
}
