/**
 * Semaphore permits through the sidecar: `permits` on `/v1/locks/{key}/acquire|renew|release` and
 * on fencelock.v1.Locks' Acquire, Renew and Release. At most `permits` owners hold the key, a
 * waiter is granted when a permit is released, the lock of the same key is another object, a
 * disagreeing permit count is refused with ERR_PERMITS_MISMATCH, and a bad count names the field.
 * Real `fencelock serve` processes on the real Redis and a SQLite file.
 */
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import type { StoreHarness } from '../handed/stores.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
import { HARNESSED_STORES } from './harnessed-stores.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  dropRedisKeys,
  lockPath,
  type ServerProcess,
  serveStore,
  sleep,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

describe.each(HARNESSED_STORES)('semaphore permits through the sidecar ($name)', ({ make }) => {
  let harness: StoreHarness;
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    const store = make();
    harness = store.harness;
    server = await serveStore(store.url(), ['--grpc-port', '0', '--max-wait', '10000']);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
    await harness?.close();
  });

  const http = (key: string, op: 'acquire' | 'renew' | 'release', body: unknown) =>
    call(server.url, lockPath(key, op), { body });
  const locks = (method: string, request: object) => unary(grpc.locks, method, request);

  it('HTTP: two of two permits held, a third owner waits for a release; renew and release by permit', async () => {
    const key = uniqueKey('sem-http');
    const a = await http(key, 'acquire', { owner: 'A', ttlMs: 10_000, permits: 2 });
    const b = await http(key, 'acquire', { owner: 'B', ttlMs: 10_000, permits: 2 });
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(a.body).toEqual({
      key,
      owner: 'A',
      ownerId: ownerIdFor('A', key),
      fencingToken: expect.stringMatching(/^[1-9][0-9]*$/),
      ttlMs: 10_000,
      permits: 2,
    });
    expect(BigInt(b.body.fencingToken)).toBeGreaterThan(BigInt(a.body.fencingToken));
    const busy = await http(key, 'acquire', { owner: 'C', ttlMs: 10_000, permits: 2 });
    expect([busy.status, busy.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    // The lock of the same key is another object: it is free.
    const lock = await http(key, 'acquire', { owner: 'L', ttlMs: 10_000 });
    expect(lock.status).toBe(200);
    expect(lock.body.permits).toBeUndefined();

    const waiting = http(key, 'acquire', { owner: 'C', ttlMs: 10_000, waitMs: 8_000, permits: 2 });
    await sleep(300);
    const renewed = await http(key, 'renew', {
      owner: 'A',
      fencingToken: a.body.fencingToken,
      ttlMs: 10_000,
      permits: 2,
    });
    expect(renewed.status).toBe(200);
    expect(renewed.body.permits).toBe(2);
    const released = await http(key, 'release', {
      owner: 'A',
      fencingToken: a.body.fencingToken,
      permits: 2,
    });
    expect(released.body).toEqual({ key, outcome: 'released' });
    const c = await waiting;
    expect(c.status).toBe(200);
    expect(BigInt(c.body.fencingToken)).toBeGreaterThan(BigInt(b.body.fencingToken));
    // Without `permits` the release is the lock's: A's permit token names no lock grant.
    const wrongObject = await http(key, 'release', {
      owner: 'B',
      fencingToken: b.body.fencingToken,
    });
    expect(wrongObject.body.errorCode).toBe('ERR_NOT_LOCK_OWNER');
    for (const [owner, grant] of [
      ['B', b],
      ['C', c],
    ] as const) {
      const done = await http(key, 'release', {
        owner,
        fencingToken: grant.body.fencingToken,
        permits: 2,
      });
      expect(done.status).toBe(200);
    }
    await http(key, 'release', { owner: 'L', fencingToken: lock.body.fencingToken });
  });

  it('HTTP: a disagreeing permit count is ERR_PERMITS_MISMATCH; a bad one names the field', async () => {
    const key = uniqueKey('sem-mismatch');
    const a = await http(key, 'acquire', { owner: 'A', ttlMs: 10_000, permits: 2 });
    const other = await http(key, 'acquire', { owner: 'B', ttlMs: 10_000, permits: 3 });
    expect([other.status, other.body.errorCode]).toEqual([409, 'ERR_PERMITS_MISMATCH']);
    for (const permits of [0, -1, 1.5, 10_001, '2']) {
      const bad = await http(key, 'acquire', { owner: 'B', ttlMs: 10_000, permits });
      expect(bad.status, String(permits)).toBe(400);
      expect(bad.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'permits' });
    }
    await http(key, 'release', { owner: 'A', fencingToken: a.body.fencingToken, permits: 2 });
  });

  it('gRPC: permits on Acquire, Renew and Release; 0 is the lock; a mismatch is FAILED_PRECONDITION', async () => {
    const key = uniqueKey('sem-grpc');
    const a = (await locks('Acquire', { key, owner: 'A', ttlMs: 10_000, permits: 2 })).response;
    expect(a).toMatchObject({ key, owner: 'A', ttlMs: 10_000, permits: 2 });
    const b = (await locks('Acquire', { key, owner: 'B', ttlMs: 10_000, permits: 2 })).response;
    const busy = await failure(locks('Acquire', { key, owner: 'C', ttlMs: 10_000, permits: 2 }));
    expect([busy.code, busy.errorCode]).toEqual([status.ABORTED, 'ERR_LOCK_BUSY']);
    const lock = (await locks('Acquire', { key, owner: 'L', ttlMs: 10_000 })).response;
    expect(lock.permits).toBe(0);
    const mismatch = await failure(
      locks('Acquire', { key, owner: 'D', ttlMs: 10_000, permits: 3 }),
    );
    expect([mismatch.code, mismatch.errorCode]).toEqual([
      status.FAILED_PRECONDITION,
      'ERR_PERMITS_MISMATCH',
    ]);
    const tooMany = await failure(
      locks('Acquire', { key, owner: 'D', ttlMs: 10_000, permits: 10_001 }),
    );
    expect([tooMany.code, tooMany.field]).toEqual([status.INVALID_ARGUMENT, 'permits']);
    const renewed = await locks('Renew', {
      key,
      owner: 'A',
      fencingToken: a.fencingToken,
      ttlMs: 10_000,
      permits: 2,
    });
    expect(renewed.response.permits).toBe(2);
    for (const [owner, grant] of [
      ['A', a],
      ['B', b],
    ] as const) {
      const done = await locks('Release', {
        key,
        owner,
        fencingToken: grant.fencingToken,
        permits: 2,
      });
      expect(done.response).toEqual({ key });
    }
    await locks('Release', { key, owner: 'L', fencingToken: lock.fencingToken });
  });
});
