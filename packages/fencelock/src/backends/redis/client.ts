/**
 * The Redis clients: the ioredis client a checked store URL names (one node, a Sentinel
 * deployment with its failover epoch, or a Cluster), opened lazily, and the recognition of a
 * client the user passes (an ioredis client by its shape, a node-redis client through its
 * adapter in `node-redis.ts`). Shared by the Redis and Redlock backends.
 */
import { Cluster, Redis } from 'ioredis';
import { InvalidArgumentError } from '../../errors.js';
import { FailoverEpoch } from './failover-epoch.js';
import type { RedisUrlConfig } from './url.js';

/** How long a closed client's socket may take to end before it is destroyed, ms. */
export const DISCONNECT_TIMEOUT_MS = 10;

/** A client the backend opened for a URL config, with the failover epoch on Sentinel. */
export interface OpenedRedisClient {
  readonly client: Redis | Cluster;
  /** On Sentinel: the failover epoch that prefixes every token; undefined otherwise. */
  readonly epochs: FailoverEpoch | undefined;
  /**
   * The client has no command timeout of its own (a single node): the backend's connection
   * bounds each command by `commandTimeoutMs` (`command-deadlines.ts`, one timer for all).
   */
  readonly boundsCommands: boolean;
}

/**
 * Open (lazily: no connection before the first command) the client `config` names. Commands,
 * and connecting, time out after `config.commandTimeoutMs`.
 * @throws InvalidArgumentError for a config that names no server (no `url`, Sentinel or Cluster).
 */
export function openRedisClient(config: RedisUrlConfig): OpenedRedisClient {
  const options = {
    commandTimeout: config.commandTimeoutMs,
    maxRetriesPerRequest: 2,
    // A server that accepts no connection, or never completes one, is given up on as soon as a
    // command would be.
    connectTimeout: config.commandTimeoutMs,
    // After close(): a socket that does not end at once is destroyed (ioredis waits 2 s, and
    // its timer would keep the process alive that long).
    disconnectTimeout: DISCONNECT_TIMEOUT_MS,
    // Connect on the first command, not at construction.
    lazyConnect: true,
  };
  const { sentinel, cluster } = config;
  if (cluster) {
    const client = new Cluster(
      cluster.map((n) => ({ host: n.host, port: n.port })),
      {
        lazyConnect: true,
        // Asking the seeds for the slots is given up on as a command would be.
        slotsRefreshTimeout: config.commandTimeoutMs,
        redisOptions: options,
      },
    );
    return { client, epochs: undefined, boundsCommands: false };
  }
  if (sentinel === undefined) {
    // parseRedisUrl always sets `url`; never fall back to a server other than the one named.
    if (config.url === undefined)
      throw new InvalidArgumentError('url', 'a redis:// URL', undefined);
    // No `commandTimeout`: ioredis would arm and clear a timer per command; the connection
    // keeps the same bound with one timer (`boundsCommands`). No auto-pipelining: it holds each
    // command until the next turn of the event loop (setImmediate), so a renewal asked for just
    // before the loop stalls would reach the server only after the stall, when the lease may
    // already be counted lost (test/integration/handed/t02-renew-after-vanish.test.ts).
    const { commandTimeout: _perCommandTimer, ...single } = options;
    return {
      client: new Redis(config.url, single),
      epochs: undefined,
      boundsCommands: true,
    };
  }
  const client = new Redis({
    ...options,
    // A failover takes seconds (2.2 s measured with down-after 1 s): a command keeps waiting
    // for the client to reach the new primary, still bounded by commandTimeoutMs.
    maxRetriesPerRequest: 20,
    // A Sentinel that accepts the connection and never answers is given up on too.
    sentinelCommandTimeout: config.commandTimeoutMs,
    // ioredis asks the Sentinels for the current primary, and again after a failover.
    sentinels: sentinel.sentinels.map((s) => ({ host: s.host, port: s.port })),
    name: sentinel.name,
    db: sentinel.db,
    ...(sentinel.username ? { username: sentinel.username } : {}),
    ...(sentinel.password ? { password: sentinel.password } : {}),
  });
  return {
    client,
    epochs: new FailoverEpoch(client, sentinel, config.commandTimeoutMs),
    boundsCommands: false,
  };
}

/**
 * An ioredis client, by shape rather than `instanceof`: an application and fencelock may load
 * two copies of ioredis (npm link, monorepos), and both are fine.
 */
export function isIoredisClient(value: unknown): value is Redis {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Record<string, unknown>;
  return ['evalsha', 'eval', 'duplicate', 'subscribe', 'quit', 'disconnect'].every(
    (m) => typeof c[m] === 'function',
  );
}

/** What was passed as a client, for the error: its constructor's name, or its type. */
export function describeClient(value: unknown): string {
  if (typeof value !== 'object' || value === null) return String(value);
  const name = (value as { constructor?: { name?: string } }).constructor?.name;
  return name && name !== 'Object' ? `a ${name} instance` : 'a plain object';
}
