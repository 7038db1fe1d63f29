/**
 * The Redis backend's client factory (`client.ts`) and connection wrapper (`connection.ts`),
 * without a server: clients are opened lazily, so nothing here connects.
 */
import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import {
  describeClient,
  isIoredisClient,
  openRedisClient,
} from '../../packages/fencelock/src/backends/redis/client.js';
import {
  isClusterClient,
  RedisConnection,
} from '../../packages/fencelock/src/backends/redis/connection.js';
import { FailoverEpoch } from '../../packages/fencelock/src/backends/redis/failover-epoch.js';
import {
  parseClusterUrl,
  parseRedisUrl,
  parseSentinelUrl,
} from '../../packages/fencelock/src/backends/redis/url.js';
import { BackendError, InvalidArgumentError } from '../../packages/fencelock/src/errors.js';

describe('openRedisClient', () => {
  it('opens a lazy single-node client on the URL, its commands bounded by the backend, and no epoch', () => {
    const { client, epochs, boundsCommands } = openRedisClient(
      parseRedisUrl(new URL('redis://10.1.2.3:6390/2?commandTimeoutMs=1234')),
    );
    try {
      expect(client).toBeInstanceOf(Redis);
      expect(isClusterClient(client)).toBe(false);
      expect(client.status).toBe('wait');
      const { host, port, db, commandTimeout, connectTimeout, enableAutoPipelining } = (
        client as Redis
      ).options;
      // The command timeout is kept by the backend's connection (one timer for all commands),
      // not by ioredis (a timer per command); no auto-pipelining (it would hold each command
      // until the next turn of the event loop).
      expect({
        host,
        port,
        db,
        commandTimeout,
        connectTimeout,
        enableAutoPipelining,
        boundsCommands,
      }).toEqual({
        host: '10.1.2.3',
        port: 6390,
        db: 2,
        commandTimeout: undefined,
        connectTimeout: 1234,
        enableAutoPipelining: false,
        boundsCommands: true,
      });
      expect(epochs).toBeUndefined();
    } finally {
      client.disconnect();
    }
  });

  it('opens a Sentinel client with its failover epoch', () => {
    const { client, epochs } = openRedisClient(
      parseSentinelUrl('redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster'),
    );
    try {
      expect(client.status).toBe('wait');
      expect((client as Redis).options.name).toBe('mymaster');
      expect((client as Redis).options.sentinels).toEqual([
        { host: '10.0.0.1', port: 26379 },
        { host: '10.0.0.2', port: 26379 },
      ]);
      expect(epochs).toBeInstanceOf(FailoverEpoch);
      // A Sentinel client keeps ioredis' own command timeout (it bounds each retry after a failover).
      expect((client as Redis).options.commandTimeout).toBe(5000);
    } finally {
      client.disconnect();
    }
  });

  it('opens a lazy Cluster client on the seed nodes', () => {
    const { client, epochs } = openRedisClient(
      parseClusterUrl('redis+cluster://10.0.0.1:7000,10.0.0.2:7001'),
    );
    try {
      expect(client).toBeInstanceOf(Cluster);
      expect(isClusterClient(client)).toBe(true);
      expect(client.status).toBe('wait');
      expect(epochs).toBeUndefined();
    } finally {
      client.disconnect();
    }
  });

  it('refuses a config that names no server rather than guess one', () => {
    const { url: _url, ...config } = parseRedisUrl(new URL('redis://10.1.2.3:6390'));
    expect(() => openRedisClient(config)).toThrow(InvalidArgumentError);
  });
});

describe('client recognition', () => {
  it('knows an ioredis client by its shape, not by instanceof', () => {
    const client = new Redis({ lazyConnect: true });
    try {
      expect(isIoredisClient(client)).toBe(true);
    } finally {
      client.disconnect();
    }
    const lookalike = Object.fromEntries(
      ['evalsha', 'eval', 'duplicate', 'subscribe', 'quit', 'disconnect'].map((m) => [m, () => 0]),
    );
    expect(isIoredisClient(lookalike)).toBe(true);
    expect(isIoredisClient({ ...lookalike, evalsha: undefined })).toBe(false);
    expect(isIoredisClient(null)).toBe(false);
  });

  it('describes what was passed instead, for the error', () => {
    expect(describeClient(new Map())).toBe('a Map instance');
    expect(describeClient({})).toBe('a plain object');
    expect(describeClient(42)).toBe('42');
  });
});

/** The error `pending` rejects with (fails the test when it resolves). */
async function failure(pending: Promise<unknown>): Promise<BackendError> {
  const outcome = await pending.then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(outcome).toBeInstanceOf(BackendError);
  return outcome as BackendError;
}

describe('RedisConnection', () => {
  it('wraps a failed command in a BackendError naming the operation and the server', async () => {
    const client = new Redis({ host: '10.9.8.7', port: 6999, lazyConnect: true });
    const connection = new RedisConnection(client, false, 'redis', 1_000);
    const cause = new Error('NOSCRIPT or worse');
    const error = await failure(connection.call('release', () => Promise.reject(cause)));
    expect(error).toBeInstanceOf(BackendError);
    expect(error.message).toContain('release (10.9.8.7:6999)');
    expect(error.cause).toBe(cause);
    // A synchronous throw is wrapped the same way.
    const thrown = await failure(
      connection.call('renew', () => {
        throw cause;
      }),
    );
    expect(thrown).toBeInstanceOf(BackendError);
    expect(thrown.cause).toBe(cause);
    await expect(connection.call('inspect', () => Promise.resolve(7))).resolves.toBe(7);
    client.disconnect();
  });

  it('refuses every call once closed, and leaves a client it does not own open', async () => {
    const client = new Redis({ lazyConnect: true });
    const connection = new RedisConnection(client, false, 'redis', 1_000);
    await connection.close();
    expect(connection.closed).toBe(true);
    let ran = false;
    const error = await failure(
      connection.call('acquire', async () => {
        ran = true;
      }),
    );
    expect(error).toBeInstanceOf(BackendError);
    expect(String(error.cause)).toContain('backend is closed');
    expect(ran).toBe(false);
    // Not owned: never connected or ended by the connection.
    expect(client.status).toBe('wait');
    client.disconnect();
  });

  it('bounds the first connection of a client it owns', async () => {
    // A port nothing listens on: ioredis would keep retrying; the call fails by the bound.
    const client = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true });
    client.on('error', () => undefined);
    const connection = new RedisConnection(client, true, 'redis', 300);
    const started = performance.now();
    const error = await failure(connection.call('acquire', () => client.ping()));
    expect(error).toBeInstanceOf(BackendError);
    expect(performance.now() - started).toBeLessThan(3_000);
    // Owned: closed by the connection, within its 1 s bound on QUIT.
    const closing = performance.now();
    await connection.close();
    expect(performance.now() - closing).toBeLessThan(1_500);
    await expect(connection.call('acquire', () => client.ping())).rejects.toThrow(/closed/);
  });
});
