/**
 * Store URLs: the scheme picks the backend. The URL is checked synchronously by the backend's
 * pure parser (no engine client imported, no network call); the backend module itself, with its
 * engine client, is imported on first use.
 */
import { parseEtcdUrl } from './backends/etcd/url.js';
import { parsePostgresUrl } from './backends/postgres/url.js';
import { parseClusterUrl, parseRedisUrl, parseSentinelUrl } from './backends/redis/url.js';
import { parseRedlockUrl } from './backends/redlock/url.js';
import { parseSqliteUrl } from './backends/sqlite/url.js';
import { parseZookeeperUrl } from './backends/zookeeper/url.js';
import type { Backend } from './core/backend.js';
import { InvalidArgumentError } from './errors.js';

/** Check a store URL (the whole string) and return a loader for its backend. */
type StoreEntry = (store: string) => () => Promise<Backend>;

/** `new URL`, with the store's shape in the error. */
function singleHostUrl(store: string): URL {
  try {
    return new URL(store);
  } catch {
    throw new InvalidArgumentError('store', `a store URL (${STORE_SCHEMES.join(', ')})`, store);
  }
}

const redis: StoreEntry = (store) => {
  const config = parseRedisUrl(singleHostUrl(store));
  return async () => (await import('./backends/redis/index.js')).createRedisBackend(config);
};

const postgres: StoreEntry = (store) => {
  const config = parsePostgresUrl(store);
  return async () => (await import('./backends/postgres/index.js')).createPostgresBackend(config);
};

const STORES: Record<string, StoreEntry> = {
  sqlite: (store) => {
    const config = parseSqliteUrl(singleHostUrl(store));
    return async () => (await import('./backends/sqlite/index.js')).createSqliteBackend(config);
  },
  redis,
  rediss: redis,
  // Several Sentinels (`redis+sentinel://h1:p1,h2:p2/name`): the backend parses the string.
  'redis+cluster': (store) => {
    const config = parseClusterUrl(store);
    return async () => (await import('./backends/redis/index.js')).createRedisBackend(config);
  },
  'redis+sentinel': (store) => {
    const config = parseSentinelUrl(store);
    return async () => (await import('./backends/redis/index.js')).createRedisBackend(config);
  },
  // Several hosts (`etcd://h1:p1,h2:p2`) are not a WHATWG URL: the backend parses the string.
  etcd: (store) => {
    const config = parseEtcdUrl(store);
    return async () => (await import('./backends/etcd/index.js')).createEtcdBackend(config);
  },
  redlock: (store) => {
    const config = parseRedlockUrl(store);
    return async () => (await import('./backends/redlock/index.js')).createRedlockBackend(config);
  },
  postgres,
  postgresql: postgres,
  zk: (store) => {
    const config = parseZookeeperUrl(store);
    return async () =>
      (await import('./backends/zookeeper/index.js')).createZookeeperBackend(config);
  },
};

/** Store URL schemes understood by `createLocker`. */
export const STORE_SCHEMES: readonly string[] = Object.freeze(Object.keys(STORES));

/**
 * The default name of a store in events and metrics: its URL without user info (so without a
 * password; it runs to the last `@`, as a password may hold `@` or `/`) and without parameters
 * or fragment, e.g. `redis://10.0.0.5:6379/0`, `postgres://db.internal:5432/app`,
 * `sqlite:/var/lib/app/locks.db`. Call with a URL `resolveStoreUrl` accepted.
 */
export function storeName(store: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:(\/\/)?/i.exec(store)?.[0] ?? '';
  let rest = store.slice(scheme.length);
  // The parameters start at the first `?` followed by `name=`: an earlier `?` is part of a
  // password, and an `@` in a parameter (`?prefix=app@eu`) is not user info.
  const query = /\?(?=[a-z][\w.-]*=)/i.exec(rest);
  if (query !== null) rest = rest.slice(0, query.index);
  if (scheme.endsWith('//')) rest = rest.slice(rest.lastIndexOf('@') + 1);
  return `${scheme}${rest}`;
}

/**
 * Check a store URL and return a loader for its backend.
 * @throws InvalidArgumentError for a malformed URL, an unknown scheme or bad parameters.
 */
export function resolveStoreUrl(store: string): () => Promise<Backend> {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(store)?.[1]?.toLowerCase();
  const entry = scheme === undefined ? undefined : STORES[scheme];
  if (entry === undefined) {
    throw new InvalidArgumentError(
      'store',
      `a store URL with scheme ${STORE_SCHEMES.join(', ')}`,
      store,
    );
  }
  return entry(store);
}

/**
 * Check a store URL the way `createLocker` does (scheme, hosts and parameters) without loading
 * its engine client or making any connection: for command lines and configuration checks that
 * want to refuse a bad URL early.
 * @returns `store`, unchanged.
 * @throws InvalidArgumentError for anything but a string, a malformed URL, an unknown scheme or
 *   bad parameters; the message shows the URL with its password redacted.
 */
export function validateStoreUrl(store: unknown): string {
  if (typeof store !== 'string') {
    throw new InvalidArgumentError('store', `a store URL (${STORE_SCHEMES.join(', ')})`, store);
  }
  resolveStoreUrl(store);
  return store;
}
