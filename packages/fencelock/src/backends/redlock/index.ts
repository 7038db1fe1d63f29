/**
 * `fencelock/redlock`: Redlock over N independent Redis nodes (ioredis), one Lua script per
 * operation on each node, with a fencing token and per-node outcomes on every failed vote.
 *
 * @example
 * import { createLocker } from 'fencelock';
 * const locker = createLocker('redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379');
 */
import { Redis } from 'ioredis';
import { InvalidArgumentError } from '../../errors.js';
import { DISCONNECT_TIMEOUT_MS, describeClient, isIoredisClient } from '../redis/client.js';
import {
  adaptNodeRedis,
  isNodeRedisClient,
  type NodeRedisClientLike,
} from '../redis/node-redis.js';
import { RedlockBackend, SLOW_VOTE_TIMEOUT_MS } from './backend.js';
import type { RedlockNode } from './node.js';
import {
  assertNodeCount,
  DEFAULT_NODE_TIMEOUT_MS,
  type RedlockUrlConfig,
  validatePrefix,
} from './url.js';

export { RedlockBackend } from './backend.js';
export type { RedlockNode } from './node.js';
export { type NodeResult, permitQuorumOf, quorumOf } from './quorum.js';
export { NODE_RESTARTED_WARNING } from './restarts.js';
export { parseRedlockUrl, type RedlockUrlConfig } from './url.js';

/** Options of `createRedlockBackend`. */
export interface RedlockBackendOptions {
  /**
   * An odd number (≥ 3) of independent Redis nodes: `redis://host:port` URLs (connections the
   * backend opens and closes) or ioredis clients (yours; they stay open after `close()`).
   */
  readonly nodes: readonly (string | Redis | NodeRedisClientLike)[];
  /** Key prefix. @default 'fencelock' */
  readonly prefix?: string;
  /**
   * Longest wait for one node's answer, ms; a vote never waits longer for a silent node (and at
   * most a tenth of the lease's TTL). @default 200
   */
  readonly nodeTimeoutMs?: number;
}

/**
 * Create a Redlock backend from `{ nodes }` or a checked URL config. No connection is made
 * before the first lock operation.
 * @throws InvalidArgumentError for an even or too small number of nodes, a node that is neither a
 *   redis:// URL nor an ioredis client (named in the error), or a bad option.
 */
export function createRedlockBackend(
  options: RedlockBackendOptions | RedlockUrlConfig,
): RedlockBackend {
  if (typeof options !== 'object' || options === null || !Array.isArray(options.nodes)) {
    throw new InvalidArgumentError('options', '{ nodes: [...] }', options);
  }
  assertNodeCount(options.nodes.length);
  const prefix = validatePrefix(options.prefix ?? 'fencelock');
  const nodeTimeoutMs = options.nodeTimeoutMs ?? DEFAULT_NODE_TIMEOUT_MS;
  if (!Number.isInteger(nodeTimeoutMs) || nodeTimeoutMs < 1 || nodeTimeoutMs > 60_000) {
    throw new InvalidArgumentError('nodeTimeoutMs', 'an integer in [1, 60000]', nodeTimeoutMs);
  }
  const nodes = options.nodes.map((node, i) => toNode(node, i, nodeTimeoutMs));
  return new RedlockBackend(nodes, prefix, nodeTimeoutMs);
}

function toNode(node: unknown, index: number, nodeTimeoutMs: number): RedlockNode {
  if (typeof node === 'string') {
    let url: URL;
    try {
      url = new URL(node);
    } catch {
      throw new InvalidArgumentError(
        `nodes[${index}]`,
        'a redis:// URL or an ioredis client',
        node,
      );
    }
    if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') {
      throw new InvalidArgumentError(
        `nodes[${index}]`,
        'a redis:// URL or an ioredis client',
        node,
      );
    }
    const client = new Redis(node, {
      lazyConnect: true,
      // A node that is down fails at once: a command queued offline and sent minutes later
      // would set a key nobody waits for. The vote's per-node timeout bounds a silent node.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      // Votes are bounded by their own per-node timeout; this only ends a command nobody waits
      // for, after the longest a vote waits (inspect's).
      commandTimeout: Math.max(nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS),
      connectTimeout: Math.max(nodeTimeoutMs, 1_000),
      // Reconnect to a node that came back within half a second (ioredis waits up to 2 s).
      retryStrategy: (times: number) => Math.min(times * 50, 500),
      // After close(): a socket that does not end at once is destroyed (see redis/client.ts).
      disconnectTimeout: DISCONNECT_TIMEOUT_MS,
    });
    client.on('error', () => undefined);
    return { name: `${url.hostname}:${url.port || 6379}`, client, owned: true };
  }
  if (isIoredisClient(node)) {
    const { host, port } = node.options;
    return { name: `${host}:${port}`, client: node, owned: false };
  }
  if (isNodeRedisClient(node)) {
    const client = adaptNodeRedis(node);
    const { host, port } = client.options;
    return { name: `${host}:${port}`, client, owned: false };
  }
  throw new InvalidArgumentError(
    `nodes[${index}]`,
    'a redis:// URL, an ioredis client or a connected node-redis client',
    describeClient(node),
  );
}
