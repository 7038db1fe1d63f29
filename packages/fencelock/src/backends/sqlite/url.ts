/**
 * Parse `sqlite:<path>` store URLs without importing the engine client. An empty path means the
 * default file `./.fencelock/locks.db`. Query parameter: `busyTimeoutMs` (default 5000).
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter } from '../store-url.js';

/** Default database file of the embedded store. */
export const DEFAULT_SQLITE_PATH = './.fencelock/locks.db';

/** A checked SQLite store URL. */
export interface SqliteUrlConfig {
  /** Database file path (`:memory:` for a private in-process store). */
  readonly path: string;
  /** How long a writer waits for another process's transaction, ms. */
  readonly busyTimeoutMs: number;
}

/** @throws InvalidArgumentError for a bad parameter. */
export function parseSqliteUrl(url: URL): SqliteUrlConfig {
  for (const name of url.searchParams.keys()) {
    if (name !== 'busyTimeoutMs') {
      throw new InvalidArgumentError(`store parameter ${name}`, 'busyTimeoutMs', name);
    }
  }
  const busyTimeoutMs = integerParameter(url.searchParams, 'busyTimeoutMs', 5000, 0, 600_000);
  if (url.hash !== '') {
    throw new InvalidArgumentError(
      'store',
      'a sqlite: path without "#" (write it as %23)',
      url.href,
    );
  }
  // `sqlite:/abs/path`, `sqlite:./rel/path`, `sqlite:rel/path`; `sqlite://` forms keep the host.
  const encoded = url.host ? `${url.host}${url.pathname}` : url.pathname;
  let path: string;
  try {
    path = decodeURIComponent(encoded);
  } catch {
    throw new InvalidArgumentError('store', 'a sqlite: path with valid percent-encoding', url.href);
  }
  return { path: path === '' ? DEFAULT_SQLITE_PATH : path, busyTimeoutMs };
}
