/**
 * `fencelock/sqlite`: the embedded store for one host (better-sqlite3).
 *
 * @example
 * import { createLocker } from 'fencelock';
 * const locker = createLocker('sqlite:./.fencelock/locks.db');
 */
import { InvalidArgumentError } from '../../errors.js';
import { SqliteBackend } from './backend.js';
import { DEFAULT_SQLITE_PATH, type SqliteUrlConfig } from './url.js';

export { QUEUE_ENTRY_TTL_MS, SqliteBackend } from './backend.js';
export { DEFAULT_SQLITE_PATH, parseSqliteUrl, type SqliteUrlConfig } from './url.js';

/** Options of `createSqliteBackend`. */
export interface SqliteBackendOptions {
  /** Database file. @default './.fencelock/locks.db' */
  readonly path?: string;
  /** How long a writer waits for another process's transaction, ms. @default 5000 */
  readonly busyTimeoutMs?: number;
}

/**
 * Open (creating if needed) the embedded store.
 * @throws InvalidArgumentError for a bad option.
 * @throws BackendError when the file cannot be opened (SQLite's error as `cause`).
 */
export function createSqliteBackend(
  options: SqliteBackendOptions | SqliteUrlConfig = {},
): SqliteBackend {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', '{ path?, busyTimeoutMs? }', options);
  }
  const path = options.path ?? DEFAULT_SQLITE_PATH;
  if (typeof path !== 'string' || path === '') {
    throw new InvalidArgumentError('path', 'a non-empty file path', path);
  }
  const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
  if (!Number.isInteger(busyTimeoutMs) || busyTimeoutMs < 0 || busyTimeoutMs > 600_000) {
    throw new InvalidArgumentError('busyTimeoutMs', 'an integer in [0, 600000]', busyTimeoutMs);
  }
  return new SqliteBackend({ path, busyTimeoutMs });
}
