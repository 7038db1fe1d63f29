/**
 * Lock-delay through the sidecar: `lockDelayMs` on `POST /v1/locks/{key}/acquire`,
 * `/v1/locks/acquire-all` and `/v1/elections/{name}/campaign`, and `lock_delay_ms` on the gRPC
 * Acquire and Campaign (from the shipped .proto). A grant nobody renews ends by its TTL; the key
 * (or the election) then goes to nobody for the delay; a release clears it; bad values are
 * refused naming the field before the store is asked. A `fencelock serve` process per store.
 */
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

const TTL_MS = 400;
const LOCK_DELAY_MS = 1_500;
/** Timer and clock slack between this process and the store, ms. */
const SLACK_MS = 50;

describe.each(HARNESSED_STORES)('lock-delay through the sidecar ($name)', ({ make }) => {
  let harness: StoreHarness;
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    const store = make();
    harness = store.harness;
    server = await serveStore(store.url(), ['--grpc-port', '0', '--max-wait', '20000']);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
    await harness?.close();
  });

  const post = (path: string, body: unknown) => call(server.url, path, { body });
  const electionPath = (name: string, action: string) =>
    `/v1/elections/${encodeURIComponent(name)}/${action}`;

  /**
   * After a grant made at or after `sentAt` that nobody renews: a single attempt past its TTL is
   * refused, and a waiting one is granted no earlier than the TTL plus the delay.
   */
  async function expectDelayed(
    sentAt: number,
    tryOnce: () => Promise<{ status: number; body: { errorCode?: string } }>,
    wait: () => Promise<{ status: number }>,
  ): Promise<void> {
    await sleep(TTL_MS + 200);
    const early = await tryOnce();
    expect([early.status, early.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    const later = await wait();
    expect(later.status).toBe(200);
    expect(performance.now() - sentAt).toBeGreaterThanOrEqual(TTL_MS + LOCK_DELAY_MS - SLACK_MS);
  }

  it('an acquire with lockDelayMs that ends by its TTL keeps the key from everyone for the delay', async () => {
    const key = uniqueKey('http-delay');
    const sentAt = performance.now();
    const first = await post(lockPath(key, 'acquire'), {
      owner: 'A',
      ttlMs: TTL_MS,
      lockDelayMs: LOCK_DELAY_MS,
    });
    expect(first.status).toBe(200);
    await expectDelayed(
      sentAt,
      () => post(lockPath(key, 'acquire'), { owner: 'B', ttlMs: 5_000 }),
      () => post(lockPath(key, 'acquire'), { owner: 'B', ttlMs: 5_000, waitMs: 10_000 }),
    );
  });

  it('a release of the live grant clears the delay', async () => {
    const key = uniqueKey('http-release');
    const first = await post(lockPath(key, 'acquire'), {
      owner: 'A',
      ttlMs: 5_000,
      lockDelayMs: 30_000,
    });
    const released = await post(lockPath(key, 'release'), {
      owner: 'A',
      fencingToken: first.body.fencingToken,
    });
    expect(released.body.outcome).toBe('released');
    const next = await post(lockPath(key, 'acquire'), { owner: 'B', ttlMs: 5_000 });
    expect(next.status).toBe(200);
    expect(BigInt(next.body.fencingToken)).toBeGreaterThan(BigInt(first.body.fencingToken));
  });

  it('acquire-all carries lockDelayMs to every key', async () => {
    const keys = [uniqueKey('all-a'), uniqueKey('all-b')];
    const sentAt = performance.now();
    const first = await post('/v1/locks/acquire-all', {
      keys,
      owner: 'A',
      ttlMs: TTL_MS,
      lockDelayMs: LOCK_DELAY_MS,
    });
    expect(first.status).toBe(200);
    await expectDelayed(
      sentAt,
      () => post(lockPath(keys[1]!, 'acquire'), { owner: 'B', ttlMs: 5_000 }),
      () => post('/v1/locks/acquire-all', { keys, owner: 'B', ttlMs: 5_000, waitMs: 10_000 }),
    );
  });

  it('a campaign with lockDelayMs: nobody leads for the delay after a leadership that ran out', async () => {
    const name = uniqueKey('campaign-delay');
    const sentAt = performance.now();
    const first = await post(electionPath(name, 'campaign'), {
      owner: 'A',
      value: 'a',
      ttlMs: TTL_MS,
      lockDelayMs: LOCK_DELAY_MS,
    });
    expect(first.status).toBe(200);
    await expectDelayed(
      sentAt,
      () =>
        post(electionPath(name, 'campaign'), { owner: 'B', value: 'b', ttlMs: 5_000, waitMs: 0 }),
      () =>
        post(electionPath(name, 'campaign'), {
          owner: 'B',
          value: 'b',
          ttlMs: 5_000,
          waitMs: 10_000,
        }),
    );
  });

  it.each([
    ['above the maximum', { lockDelayMs: 60_001 }],
    ['not an integer', { lockDelayMs: 1.5 }],
    ['negative', { lockDelayMs: -1 }],
    ['with permits', { lockDelayMs: 1_000, permits: 2 }],
    ['with a read grant', { lockDelayMs: 1_000, mode: 'read' }],
  ])('refuses lockDelayMs %s with 400 naming it, and takes nothing', async (_, extra) => {
    const key = uniqueKey('http-bad');
    const refused = await post(lockPath(key, 'acquire'), { owner: 'A', ttlMs: 5_000, ...extra });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'lockDelayMs' });
    expect(await harness.rawLease(key)).toBeNull();
  });

  it('gRPC Acquire and Campaign take lock_delay_ms; a bad one is INVALID_ARGUMENT naming it', async () => {
    const key = uniqueKey('grpc-delay');
    const sentAt = performance.now();
    await unary(grpc.locks, 'Acquire', {
      key,
      owner: 'A',
      ttlMs: TTL_MS,
      lockDelayMs: LOCK_DELAY_MS,
    });
    await sleep(TTL_MS + 200);
    expect(
      await failure(unary(grpc.locks, 'Acquire', { key, owner: 'B', ttlMs: 5_000 })),
    ).toMatchObject({ code: status.ABORTED, errorCode: 'ERR_LOCK_BUSY' });
    await unary(grpc.locks, 'Acquire', { key, owner: 'B', ttlMs: 5_000, waitMs: 10_000 });
    expect(performance.now() - sentAt).toBeGreaterThanOrEqual(TTL_MS + LOCK_DELAY_MS - SLACK_MS);

    const name = uniqueKey('grpc-campaign');
    const campaignAt = performance.now();
    await unary(grpc.locks, 'Campaign', {
      name,
      owner: 'A',
      value: 'a',
      ttlMs: TTL_MS,
      lockDelayMs: LOCK_DELAY_MS,
    });
    await unary(grpc.locks, 'Campaign', {
      name,
      owner: 'B',
      value: 'b',
      ttlMs: 5_000,
      waitMs: 10_000,
    });
    expect(performance.now() - campaignAt).toBeGreaterThanOrEqual(
      TTL_MS + LOCK_DELAY_MS - SLACK_MS,
    );

    const bad = await failure(
      unary(grpc.locks, 'Acquire', {
        key: uniqueKey('grpc-bad'),
        owner: 'A',
        ttlMs: 5_000,
        lockDelayMs: 60_001,
      }),
    );
    expect([bad.code, bad.errorCode, bad.field]).toEqual([
      status.INVALID_ARGUMENT,
      'ERR_INVALID_ARGUMENT',
      'lock_delay_ms',
    ]);
  });
});
