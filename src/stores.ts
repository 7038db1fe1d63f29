/**
 * Store URLs: the scheme picks the backend. The URL is checked synchronously by the backend's
 * pure parser (no engine client imported, no network call); the backend module itself, with its
 * engine client, is imported on first use.
 */
import { parseRedisUrl } from './backends/redis/url.js';
import { parseSqliteUrl } from './backends/sqlite/url.js';
import type { Backend } from './core/backend.js';
import { InvalidArgumentError } from './errors.js';

type StoreEntry = (url: URL) => () => Promise<Backend>;

const redis: StoreEntry = (url) => {
  const config = parseRedisUrl(url);
  return async () => (await import('./backends/redis/index.js')).createRedisBackend(config);
};

const STORES: Record<string, StoreEntry> = {
  'sqlite:': (url) => {
    const config = parseSqliteUrl(url);
    return async () => (await import('./backends/sqlite/index.js')).createSqliteBackend(config);
  },
  'redis:': redis,
  'rediss:': redis,
};

/** Store URL schemes understood by `createLocker`. */
export const STORE_SCHEMES: readonly string[] = Object.freeze(
  Object.keys(STORES).map((s) => s.slice(0, -1)),
);

/**
 * Check a store URL and return a loader for its backend.
 * @throws InvalidArgumentError for a malformed URL, an unknown scheme or bad parameters.
 */
export function resolveStoreUrl(store: string): () => Promise<Backend> {
  let url: URL;
  try {
    url = new URL(store);
  } catch {
    throw new InvalidArgumentError(
      'store',
      `a store URL (${STORE_SCHEMES.map((s) => `${s}:…`).join(', ')})`,
      store,
    );
  }
  const entry = STORES[url.protocol];
  if (entry === undefined) {
    throw new InvalidArgumentError('store', `a URL with scheme ${STORE_SCHEMES.join(', ')}`, store);
  }
  return entry(url);
}
