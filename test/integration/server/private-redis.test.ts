/**
 * Sidecar processes over a private `redis-server` of this file (never the shared one): the
 * engine's own command statistics show how a blocking acquire through `/v1/locks` waits, and
 * stopping the engine shows how each API answers an engine failure (Dapr's 500 `ERR_TRY_LOCK` /
 * `ERR_UNLOCK` with `status: 3`, fencelock's 503 `ERR_BACKEND`). A store that answers nothing
 * within a wait (PostgreSQL on a closed port) is a 503 too, not a busy lock.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../../helpers/ports.js';
import { settledWithin } from '../../helpers/promises.js';
import type { PrivateRedis } from '../../helpers/redis-server.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  lockPath,
  type ServerProcess,
  serveStore,
  startOwnRedis,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);

/** Lua script runs (every lock operation is one) since the last `CONFIG RESETSTAT`. */
async function scriptRuns(raw: Redis): Promise<number> {
  const info = await raw.info('commandstats');
  let runs = 0;
  for (const [, calls] of info.matchAll(/^cmdstat_(?:eval|evalsha|fcall)(?:_ro)?:calls=(\d+)/gm)) {
    runs += Number(calls);
  }
  return runs;
}

describe('a blocking acquire through /v1/locks', () => {
  let redis: PrivateRedis;
  let raw: Redis;
  let server: ServerProcess;

  beforeAll(async () => {
    redis = await startOwnRedis();
    raw = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    server = await serveStore(redis.url);
  });

  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
    await raw?.quit();
    await redis?.stop();
  });

  it('waits for the release notification: a few engine attempts while the key is held 3 s, not a poll', async () => {
    const key = 'wait:event-driven';
    const acquire = (body: unknown) => call(server.url, lockPath(key, 'acquire'), { body });
    const a = await acquire({ owner: 'A', ttlMs: 20_000 });
    expect(a.status).toBe(200);
    await raw.config('RESETSTAT');
    const startedAt = performance.now();
    const waiting = acquire({ owner: 'B', ttlMs: 5000, waitMs: 20_000 });
    expect(await settledWithin(waiting, 3000)).toBe(false);
    // The waiter listens on the key's release channel (and on nothing else: this engine is ours).
    const channels = (await raw.pubsub('CHANNELS', '*')) as string[];
    expect(channels).toEqual([`fencelock:{${key}}:released`]);
    expect(await raw.pubsub('NUMSUB', channels[0]!)).toEqual([channels[0], 1]);
    const attempts = await scriptRuns(raw);
    const heldMs = performance.now() - startedAt;

    const released = await call(server.url, lockPath(key, 'release'), {
      body: { owner: 'A', fencingToken: a.body.fencingToken },
    });
    expect(released.status).toBe(200);
    const b = await waiting;
    expect(b.status).toBe(200);
    expect(BigInt(b.body.fencingToken)).toBeGreaterThan(BigInt(a.body.fencingToken));

    // One attempt, then one every 0.5 s at most (the backend's re-check for a lost message,
    // which keeps its place in line) until the release wakes it. A waiter polling with the
    // retry backoff (20 ms doubling to 500 ms, full jitter) makes about 17 in 3 s; a loop of
    // one-shot attempts, dozens.
    expect(attempts).toBeGreaterThanOrEqual(1);
    expect(attempts).toBeLessThanOrEqual(Math.ceil(heldMs / 500) + 3);
    await call(server.url, lockPath(key, 'release'), {
      body: { owner: 'B', fencingToken: b.body.fencingToken },
    });
  });
});

describe('when the engine fails', () => {
  let redis: PrivateRedis;
  let server: ServerProcess;

  beforeAll(async () => {
    redis = await startOwnRedis();
    server = await serveStore(`${redis.url}?commandTimeoutMs=500`);
  });

  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
    await redis?.stop();
  });

  it("answers Dapr's 500 ERR_TRY_LOCK and ERR_UNLOCK (status 3), and fencelock's 503 ERR_BACKEND", async () => {
    const dapr = (op: 'lock' | 'unlock', body: unknown) =>
      call(server.url, `/v1.0-alpha1/${op}/lockstore`, { body });
    const ext = (action: string, body: unknown) =>
      call(server.url, lockPath('engine-down', action), { body });
    const lockBody = { resourceId: 'engine-down', lockOwner: 'vader', expiryInSeconds: 30 };
    expect((await dapr('lock', lockBody)).body).toEqual({ success: true });

    await redis.stop();

    const locked = await dapr('lock', lockBody);
    expect(locked.status).toBe(500);
    expect(locked.body.errorCode).toBe('ERR_TRY_LOCK');
    expect(locked.body.message).toMatch(/^failed to try acquiring lock: /);
    expect(locked.body).not.toHaveProperty('status');
    const unlocked = await dapr('unlock', { resourceId: 'engine-down', lockOwner: 'vader' });
    expect(unlocked.status).toBe(500);
    expect(unlocked.body).toMatchObject({ errorCode: 'ERR_UNLOCK', status: 3 });
    expect(unlocked.body.message).toMatch(/^failed to release lock: /);

    // fencelock's own routes keep their codes.
    const acquired = await ext('acquire', { owner: 'A', ttlMs: 1000 });
    expect(acquired.status).toBe(503);
    expect(acquired.body.errorCode).toBe('ERR_BACKEND');
    const releasedExt = await ext('release', { owner: 'A', fencingToken: '1' });
    expect(releasedExt.status).toBe(503);
    expect(releasedExt.body.errorCode).toBe('ERR_BACKEND');
    // The sidecar itself is fine: it does not ask the store for /healthz.
    expect((await call(server.url, '/healthz')).status).toBe(200);
  });
});

describe('when the store answers no attempt within the wait', () => {
  it('a waiting acquire answers 503 ERR_BACKEND, not 409 busy (PostgreSQL retrying a refused connection)', async () => {
    // A loopback port nothing listens on: the statements retry the refused connection within
    // commandTimeoutMs (5 s), past the request's waitMs.
    const port = await closedPort();
    const server = await serveStore(`postgres://fencelock@127.0.0.1:${port}/fencelock`);
    try {
      const answer = await call(server.url, lockPath('unreachable', 'acquire'), {
        body: { owner: 'A', ttlMs: 5000, waitMs: 1000 },
      });
      expect(answer.status).toBe(503);
      expect(answer.body.errorCode).toBe('ERR_BACKEND');
      expect(answer.body.message).toMatch(/got no answer from the engine after/);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  });
});
