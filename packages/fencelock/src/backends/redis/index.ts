/**
 * `fencelock/redis`: the single-node Redis backend (ioredis).
 *
 * @example
 * import { createLocker } from 'fencelock';
 * import { createRedisBackend } from 'fencelock/redis';
 * const locker = createLocker(createRedisBackend({ client: myIoredisClient }));
 */
import { InvalidArgumentError } from '../../errors.js';
import { RedisBackend, type RedisBackendOptions } from './backend.js';
import { describeClient, isIoredisClient, openRedisClient } from './client.js';
import { adaptNodeRedis, isNodeRedisClient } from './node-redis.js';
import {
  addressOfConfig,
  parseClusterUrl,
  parseRedisUrl,
  parseSentinelUrl,
  type RedisUrlConfig,
} from './url.js';

export { RedisBackend, type RedisBackendOptions } from './backend.js';
export type { NodeRedisClientLike } from './node-redis.js';
export {
  parseRedisUrl,
  parseSentinelUrl,
  type RedisUrlConfig,
  type SentinelConfig,
} from './url.js';

import { isOptionsObject } from '../../options.js';

/**
 * Create a Redis backend from `{ url }` or `{ client }` (an ioredis client, left open on close),
 * or from a checked URL config.
 * @throws InvalidArgumentError when neither or both of `url` and `client` are given, when the
 *   client is not an ioredis client, or when an option is out of range. No connection is made
 *   before the first lock operation.
 */
export function createRedisBackend(options: RedisBackendOptions | RedisUrlConfig): RedisBackend {
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', '{ url } or { client }', options);
  }
  if (
    ('sentinel' in options && options.sentinel !== undefined) ||
    ('cluster' in options && options.cluster !== undefined)
  ) {
    return createRedisBackendFromConfig(options);
  }
  const o = options as RedisBackendOptions;
  if ((o.url === undefined) === (o.client === undefined)) {
    throw new InvalidArgumentError(
      'options',
      'exactly one of url or client',
      Object.keys(o).join(','),
    );
  }
  const params = new URLSearchParams();
  if (o.prefix !== undefined) params.set('prefix', String(o.prefix));
  if (o.notifications !== undefined) params.set('notifications', String(o.notifications));
  if (o.commandTimeoutMs !== undefined) params.set('commandTimeoutMs', String(o.commandTimeoutMs));
  if (o.minReplicas !== undefined) params.set('minReplicas', String(o.minReplicas));
  if (o.replicaTimeoutMs !== undefined) params.set('replicaTimeoutMs', String(o.replicaTimeoutMs));
  const query = params.size > 0 ? `?${params}` : '';
  if (o.url !== undefined) {
    if (typeof o.url !== 'string')
      throw new InvalidArgumentError('url', 'a redis:// URL string', o.url);
    if (/^redis\+sentinel:/i.test(o.url)) {
      return createRedisBackendFromConfig(parseSentinelUrl(withParams(o.url, params)));
    }
    if (/^redis\+cluster:/i.test(o.url)) {
      return createRedisBackendFromConfig(parseClusterUrl(withParams(o.url, params)));
    }
    let parsed: URL;
    try {
      parsed = new URL(o.url);
    } catch {
      throw new InvalidArgumentError('url', 'a redis:// or rediss:// URL', o.url);
    }
    if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
      throw new InvalidArgumentError('url', 'a redis:// or rediss:// URL', o.url);
    }
    for (const [k, v] of params) parsed.searchParams.set(k, v);
    return createRedisBackendFromConfig(parseRedisUrl(parsed));
  }
  const client = isNodeRedisClient(o.client)
    ? adaptNodeRedis(o.client)
    : isIoredisClient(o.client)
      ? o.client
      : undefined;
  if (client === undefined) {
    throw new InvalidArgumentError(
      'client',
      'an ioredis client (Redis or Cluster) or a connected node-redis client',
      describeClient(o.client),
    );
  }
  const config = parseRedisUrl(new URL(`redis://client${query}`));
  return new RedisBackend(client, false, config);
}

/** A backend on a client opened for `config` (closed with the backend). */
function createRedisBackendFromConfig(config: RedisUrlConfig): RedisBackend {
  const { client, epochs, boundsCommands } = openRedisClient(config);
  return new RedisBackend(
    client,
    true,
    { ...config, address: addressOfConfig(config), boundsCommands },
    epochs,
  );
}

/** `url` with `params` added to its query string. */
function withParams(url: string, params: URLSearchParams): string {
  if (params.size === 0) return url;
  return `${url}${url.includes('?') ? '&' : '?'}${params}`;
}
