/**
 * Parse `redis://[user:pass@]host:port[/db]`, `rediss://…` (TLS) and
 * `redis+sentinel://[user:pass@]host:port[,host:port…]/<primaryName>[/db]` store URLs without
 * importing the engine client. Query parameters: `prefix` (key prefix, default `fencelock`),
 * `notifications` (`false` turns pub/sub waiting off), `commandTimeoutMs`, `minReplicas` and
 * `replicaTimeoutMs` (after a grant, `WAIT` for that many replicas; see `RedisBackendOptions`).
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter, parseHostList } from '../store-url.js';

/** Where the Sentinels are and which primary they watch. */
export interface SentinelConfig {
  readonly sentinels: readonly { readonly host: string; readonly port: number }[];
  /** The primary's name in the Sentinels' configuration (`sentinel monitor <name> …`). */
  readonly name: string;
  readonly db: number;
  readonly username?: string;
  readonly password?: string;
}

/** A checked Redis store URL. */
export interface RedisUrlConfig {
  /** `redis://…` of a single node; absent with Sentinel or Cluster. */
  readonly url?: string;
  /** The Sentinel deployment; absent for a single node. */
  readonly sentinel?: SentinelConfig;
  /** Seed nodes of a Redis Cluster; absent otherwise. */
  readonly cluster?: readonly { readonly host: string; readonly port: number }[];
  readonly prefix: string;
  readonly notifications: boolean;
  readonly commandTimeoutMs: number;
  /** Replicas that must acknowledge a grant (`WAIT`); 0 = do not wait. */
  readonly minReplicas: number;
  /** How long to wait for them, ms. */
  readonly replicaTimeoutMs: number;
}

const PARAMS = new Set([
  'prefix',
  'notifications',
  'commandTimeoutMs',
  'minReplicas',
  'replicaTimeoutMs',
]);

/** @throws InvalidArgumentError for a bad host, port, db or parameter. */
export function parseRedisUrl(url: URL): RedisUrlConfig {
  const shape = 'redis://[user:pass@]host:port[/db] or rediss://…';
  if (url.hostname === '')
    throw new InvalidArgumentError('store', `${shape} with a host`, url.href);
  if (url.port !== '' && !(Number(url.port) >= 1 && Number(url.port) <= 65535)) {
    throw new InvalidArgumentError('store', `${shape} with a port in [1, 65535]`, url.href);
  }
  const db = url.pathname.replace(/^\//, '');
  if (db !== '' && !/^\d{1,5}$/.test(db)) {
    throw new InvalidArgumentError('store', `${shape} with a numeric db`, url.href);
  }
  const bare = new URL(url.href);
  bare.search = '';
  return { url: bare.href, ...parseParams(url.searchParams) };
}

const SENTINEL_SHAPE = 'redis+sentinel://[user:pass@]host:port[,host:port…]/<primaryName>[/db]';

/** @throws InvalidArgumentError for a malformed Sentinel URL or parameter. */
export function parseSentinelUrl(store: string): RedisUrlConfig {
  const match =
    /^redis\+sentinel:\/\/(?:([^:@/]*):([^@/]*)@)?([^/?#@]+)\/([^/?#]+)(?:\/(\d{1,5}))?\/?(\?[^#]*)?$/i.exec(
      store,
    );
  if (match === null) throw new InvalidArgumentError('store', SENTINEL_SHAPE, store);
  const [, user, password, hosts = '', name = '', db = '0', query = ''] = match;
  const sentinels = parseHostList(hosts, SENTINEL_SHAPE, store).map((m) => ({
    host: m.host.replace(/^\[|\]$/g, ''),
    port: m.port,
  }));
  let primaryName: string;
  try {
    primaryName = decodeURIComponent(name);
  } catch {
    throw new InvalidArgumentError('store', `${SENTINEL_SHAPE} with a well-formed name`, store);
  }
  return {
    sentinel: {
      sentinels,
      name: primaryName,
      db: Number(db),
      ...(user ? { username: decodeURIComponent(user) } : {}),
      ...(password ? { password: decodeURIComponent(password) } : {}),
    },
    ...parseParams(new URLSearchParams(query)),
  };
}

const CLUSTER_SHAPE = 'redis+cluster://host:port[,host:port…]';

/**
 * `redis+cluster://host:port[,host:port…]`: seed nodes of a Redis Cluster (the keys of one lock
 * share a hash slot). `minReplicas` is refused: `WAIT` on a cluster client reaches a random node.
 * @throws InvalidArgumentError for a malformed URL or parameter.
 */
export function parseClusterUrl(store: string): RedisUrlConfig {
  const match = /^redis\+cluster:\/\/([^/?#@]+)\/?(\?[^#]*)?$/i.exec(store);
  if (match === null) throw new InvalidArgumentError('store', CLUSTER_SHAPE, store);
  const [, hosts = '', query = ''] = match;
  const cluster = parseHostList(hosts, CLUSTER_SHAPE, store).map((m) => ({
    host: m.host.replace(/^\[|\]$/g, ''),
    port: m.port,
  }));
  const params = parseParams(new URLSearchParams(query));
  if (params.minReplicas > 0) {
    throw new InvalidArgumentError(
      'store parameter minReplicas',
      '0 on a cluster (WAIT would reach a random node, not the one that granted)',
      params.minReplicas,
    );
  }
  return { cluster, ...params };
}

function parseParams(params: URLSearchParams): Omit<RedisUrlConfig, 'url' | 'sentinel'> {
  for (const name of params.keys()) {
    if (!PARAMS.has(name)) {
      throw new InvalidArgumentError(`store parameter ${name}`, [...PARAMS].join(', '), name);
    }
  }
  const prefix = params.get('prefix') ?? 'fencelock';
  if (prefix === '' || /[{}]/.test(prefix)) {
    throw new InvalidArgumentError(
      'store parameter prefix',
      'a non-empty string without { or }',
      prefix,
    );
  }
  const notifications = params.get('notifications') ?? 'true';
  if (notifications !== 'true' && notifications !== 'false') {
    throw new InvalidArgumentError('store parameter notifications', 'true or false', notifications);
  }
  return {
    prefix,
    notifications: notifications === 'true',
    commandTimeoutMs: integerParameter(params, 'commandTimeoutMs', 5000, 1, 600_000),
    minReplicas: integerParameter(params, 'minReplicas', 0, 0, 100),
    replicaTimeoutMs: integerParameter(params, 'replicaTimeoutMs', 200, 1, 600_000),
  };
}

/**
 * The servers a config names, for errors: `host:port` of a single node, or the Sentinels' or the
 * Cluster seeds' (comma-separated). Never user info.
 */
export function addressOfConfig(config: RedisUrlConfig): string {
  const list = config.cluster ?? config.sentinel?.sentinels;
  if (list) return list.map((n) => `${hostOf(n.host)}:${n.port}`).join(',');
  if (config.url === undefined) return 'unknown';
  const url = new URL(config.url);
  return `${url.hostname}:${url.port || 6379}`;
}

/** An IPv6 host in brackets, as in a URL. */
function hostOf(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}
