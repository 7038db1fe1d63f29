/**
 * Parse `redis://[user:pass@]host:port[/db]` and `rediss://…` (TLS) store URLs without importing
 * the engine client. Query parameters: `prefix` (key prefix, default `fencelock`),
 * `notifications` (`false` turns pub/sub waiting off), `commandTimeoutMs`.
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter } from '../../options.js';

/** A checked Redis store URL. */
export interface RedisUrlConfig {
  readonly url: string;
  readonly prefix: string;
  readonly notifications: boolean;
  readonly commandTimeoutMs: number;
}

const PARAMS = new Set(['prefix', 'notifications', 'commandTimeoutMs']);

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
  for (const name of url.searchParams.keys()) {
    if (!PARAMS.has(name)) {
      throw new InvalidArgumentError(`store parameter ${name}`, [...PARAMS].join(', '), name);
    }
  }
  const prefix = url.searchParams.get('prefix') ?? 'fencelock';
  if (prefix === '' || /[{}]/.test(prefix)) {
    throw new InvalidArgumentError(
      'store parameter prefix',
      'a non-empty string without { or }',
      prefix,
    );
  }
  const notifications = url.searchParams.get('notifications') ?? 'true';
  if (notifications !== 'true' && notifications !== 'false') {
    throw new InvalidArgumentError('store parameter notifications', 'true or false', notifications);
  }
  const timeout = integerParameter(url.searchParams, 'commandTimeoutMs', 5000, 1, 600_000);
  const bare = new URL(url.href);
  bare.search = '';
  return {
    url: bare.href,
    prefix,
    notifications: notifications === 'true',
    commandTimeoutMs: timeout,
  };
}
