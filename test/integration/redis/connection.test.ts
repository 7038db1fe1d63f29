/**
 * Connection behaviour of the Redis backend: nothing connects before the first operation, and
 * an unreachable server is named in the error.
 */
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  BackendError,
  createLocker,
  InvalidArgumentError,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { closedPort } from '../../helpers/ports.js';

const admin = new Redis(REDIS_URL);
afterAll(() => admin.quit());

async function clientCount(): Promise<number> {
  const list = (await admin.client('LIST')) as string;
  return list.trim().split('\n').length;
}

describe('redis connection', () => {
  it('opens no connection until the first lock operation', async () => {
    const before = await clientCount();
    const locker = createLocker(REDIS_URL);
    await new Promise((r) => setTimeout(r, 300));
    expect(await clientCount()).toBe(before);
    await locker.inspect('connection-test');
    expect(await clientCount()).toBe(before + 1);
    await locker.close();
    await new Promise((r) => setTimeout(r, 100));
    expect(await clientCount()).toBe(before);
  });

  it('names the address and the connection error when the server is unreachable', async () => {
    const locker = createLocker('redis://127.0.0.1:1');
    const error = await locker.acquire('k').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).message).toContain(
      '127.0.0.1:1 unreachable: connection refused',
    );
    expect((error as BackendError).unreachable).toBe('connection-refused');
    // The client's own error stays as the cause.
    expect((error as BackendError).cause).toBeInstanceOf(Error);
    await locker.close();
  });

  it('gives up within commandTimeoutMs when no Sentinel answers (ioredis would retry forever)', async () => {
    // Found by trying to break it: tryAcquire on such a store never returned.
    const port = await closedPort();
    const locker = createLocker(`redis+sentinel://127.0.0.1:${port}/mymaster?commandTimeoutMs=500`);
    const startedAt = performance.now();
    const error = await locker.tryAcquire('k').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).message).toContain(`127.0.0.1:${port} unreachable:`);
    expect(['connection-closed', 'no-answer']).toContain((error as BackendError).unreachable);
    expect(performance.now() - startedAt).toBeLessThan(5_000);
    await locker.close();
  });

  it('rejects a client that is not an ioredis client, without dumping it', () => {
    let error: unknown;
    try {
      createRedisBackend({ client: { get: () => 1 } as never });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    // Named by what it is, never dumped (a client may hold passwords).
    expect((error as InvalidArgumentError).received).toBe('a plain object');
  });
});

describe('redis db selection', () => {
  it('fails every operation on a db the server does not have, instead of using db 0', async () => {
    const key = `db-test-${process.pid}-${Date.now()}`;
    const locker = createLocker(`${REDIS_URL}/99`);
    const error = await locker.tryAcquire(key).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).message).toContain('DB index is out of range');
    expect(await admin.exists(`fencelock:{${key}}:lock`)).toBe(0);
    expect(await admin.exists(`fencelock:{${key}}:fence`)).toBe(0);
    await locker.close();
  });
});
