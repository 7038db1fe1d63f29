/**
 * The sidecar's gRPC server (`fencelock serve --grpc-port`), through clients that
 * @grpc/proto-loader builds from the shipped .proto files: fencelock.v1.Locks (a blocking
 * acquire returns when the holder releases, tokens increase, a cancelled or timed-out caller
 * stops waiting and gets nothing, renew / release outcomes, validation naming the .proto field,
 * the 16 KiB request limit), Dapr's runtime service (its checks, the fencing token in the
 * trailers, UNIMPLEMENTED for the rest), the token, and an in-process sidecar's shutdown. Real
 * sidecar processes on the real Redis and a SQLite file.
 */
import { type ServiceError, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSidecar, ownerIdFor } from '../../../packages/cli/src/server/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { type StoreHarness, sqliteHarness } from '../handed/stores.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
import { HARNESSED_STORES } from './harnessed-stores.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  dropRedisKeys,
  type ServerProcess,
  serveStore,
  sleep,
  TOKEN,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

describe.each(HARNESSED_STORES)('fencelock.v1.Locks over gRPC ($name)', ({ make }) => {
  let harness: StoreHarness;
  let server: ServerProcess;
  let grpc: GrpcClients;
  const locks = (method: string, request: object, options = {}) =>
    unary(grpc.locks, method, request, options);

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

  it('a blocking acquire returns when the holder releases, with a greater token', async () => {
    const key = uniqueKey('grpc-block');
    const a = (await locks('Acquire', { key, owner: 'A', ttlMs: 20_000 })).response;
    expect(a).toMatchObject({ key, owner: 'A', ownerId: ownerIdFor('A', key), ttlMs: 20_000 });
    expect(a.fencingToken).toMatch(/^[1-9]\d*$/);

    const started = performance.now();
    const waiting = locks('Acquire', { key, owner: 'B', ttlMs: 20_000, waitMs: 8_000 });
    await sleep(400);
    const released = await locks('Release', { key, owner: 'A', fencingToken: a.fencingToken });
    expect(released.response).toEqual({ key });
    const b = (await waiting).response;
    const waitedMs = performance.now() - started;
    expect(waitedMs).toBeGreaterThanOrEqual(350);
    expect(waitedMs).toBeLessThan(4_000);
    expect(b.owner).toBe('B');
    expect(BigInt(b.fencingToken)).toBeGreaterThan(BigInt(a.fencingToken));

    const seen = (await locks('Inspect', { key, owner: 'B' })).response;
    expect(seen.holder).toMatchObject({
      ownerId: ownerIdFor('B', key),
      fencingToken: b.fencingToken,
    });
    expect(seen.heldByOwner).toBe(true);
    expect(seen.lastFencingToken).toBe(b.fencingToken);
    await locks('Release', { key, owner: 'B', fencingToken: b.fencingToken });
    const free = (await locks('Inspect', { key })).response;
    expect(free.holder).toBeNull();
    expect(free.heldByOwner).toBeUndefined();
  });

  it('a caller that cancels mid-wait stops waiting and is granted nothing', async () => {
    const key = uniqueKey('grpc-cancel');
    const a = (await locks('Acquire', { key, owner: 'A', ttlMs: 20_000 })).response;
    const cancel = new AbortController();
    const waiting = failure(
      locks(
        'Acquire',
        { key, owner: 'B', ttlMs: 20_000, waitMs: 8_000 },
        { signal: cancel.signal },
      ),
    );
    await sleep(300);
    cancel.abort();
    expect((await waiting).code).toBe(status.CANCELLED);
    await locks('Release', { key, owner: 'A', fencingToken: a.fencingToken });
    // Had B still been waiting, the release would have handed it the key by now.
    await sleep(500);
    const seen = (await locks('Inspect', { key, owner: 'B' })).response;
    expect(seen.holder).toBeNull();
    expect(seen.heldByOwner).toBe(false);
  });

  it('a caller whose deadline passes stops waiting and is granted nothing', async () => {
    const key = uniqueKey('grpc-deadline');
    const a = (await locks('Acquire', { key, owner: 'A', ttlMs: 20_000 })).response;
    const timedOut = await failure(
      locks('Acquire', { key, owner: 'B', ttlMs: 20_000, waitMs: 8_000 }, { deadlineMs: 300 }),
    );
    expect(timedOut.code).toBe(status.DEADLINE_EXCEEDED);
    await locks('Release', { key, owner: 'A', fencingToken: a.fencingToken });
    await sleep(500);
    expect((await locks('Inspect', { key })).response.holder).toBeNull();
  });

  it('busy, timed out, renew and release outcomes carry their status and error code', async () => {
    const key = uniqueKey('grpc-outcomes');
    const a = (await locks('Acquire', { key, owner: 'A', ttlMs: 20_000 })).response;
    expect(await failure(locks('Acquire', { key, owner: 'B', ttlMs: 5_000 }))).toMatchObject({
      code: status.ABORTED,
      errorCode: 'ERR_LOCK_BUSY',
    });
    expect(
      await failure(locks('Acquire', { key, owner: 'B', ttlMs: 5_000, waitMs: 200 })),
    ).toMatchObject({ code: status.DEADLINE_EXCEEDED, errorCode: 'ERR_LOCK_TIMEOUT' });
    // The holder again: the same grant, TTL restarted.
    const again = (await locks('Acquire', { key, owner: 'A', ttlMs: 30_000 })).response;
    expect(again.fencingToken).toBe(a.fencingToken);

    const renewed = (
      await locks('Renew', { key, owner: 'A', fencingToken: a.fencingToken, ttlMs: 40_000 })
    ).response;
    expect(renewed).toMatchObject({ key, owner: 'A', fencingToken: a.fencingToken, ttlMs: 40_000 });
    const ttl = (await locks('Inspect', { key })).response.holder.ttlMs;
    expect(ttl).toBeGreaterThan(30_000);
    expect(ttl).toBeLessThanOrEqual(40_000);

    expect(
      await failure(locks('Renew', { key, owner: 'B', fencingToken: a.fencingToken, ttlMs: 1000 })),
    ).toMatchObject({ code: status.FAILED_PRECONDITION, errorCode: 'ERR_NOT_LOCK_OWNER' });
    expect(
      await failure(locks('Release', { key, owner: 'B', fencingToken: a.fencingToken })),
    ).toMatchObject({ code: status.FAILED_PRECONDITION, errorCode: 'ERR_NOT_LOCK_OWNER' });
    await locks('Release', { key, owner: 'A', fencingToken: a.fencingToken });
    expect(
      await failure(locks('Release', { key, owner: 'A', fencingToken: a.fencingToken })),
    ).toMatchObject({ code: status.NOT_FOUND, errorCode: 'ERR_LOCK_NOT_HELD' });
    expect(
      await failure(locks('Renew', { key, owner: 'A', fencingToken: a.fencingToken, ttlMs: 1000 })),
    ).toMatchObject({ code: status.NOT_FOUND, errorCode: 'ERR_LOCK_NOT_HELD' });
  });

  it('an empty owner in Acquire gets a random one, answered', async () => {
    const key = uniqueKey('grpc-random-owner');
    const grant = (await locks('Acquire', { key, ttlMs: 5_000 })).response;
    expect(grant.owner).toMatch(/^[0-9a-f]{32}$/);
    expect(grant.ownerId).toBe(ownerIdFor(grant.owner, key));
    await locks('Release', { key, owner: grant.owner, fencingToken: grant.fencingToken });
  });

  it.each([
    ['Acquire', { key: '', owner: 'A', ttlMs: 5_000 }, 'key'],
    ['Acquire', { key: 'k'.repeat(1025), owner: 'A', ttlMs: 5_000 }, 'key'],
    ['Acquire', { key: 'k', owner: 'A', ttlMs: 0 }, 'ttl_ms'],
    ['Acquire', { key: 'k', owner: 'A', ttlMs: 99 }, 'ttl_ms'],
    ['Acquire', { key: 'k', owner: 'A', ttlMs: 5_000, waitMs: 10_001 }, 'wait_ms'],
    ['Acquire', { key: 'k', owner: 'o'.repeat(1025), ttlMs: 5_000 }, 'owner'],
    ['Renew', { key: 'k', owner: '', fencingToken: '1', ttlMs: 5_000 }, 'owner'],
    ['Renew', { key: 'k', owner: 'A', fencingToken: '', ttlMs: 5_000 }, 'fencing_token'],
    ['Renew', { key: 'k', owner: 'A', fencingToken: '1', ttlMs: 0 }, 'ttl_ms'],
    ['Release', { key: 'k', owner: 'A', fencingToken: '01' }, 'fencing_token'],
    ['Inspect', { key: '' }, 'key'],
  ])(
    '%s refuses bad input with INVALID_ARGUMENT naming the field: %j',
    async (method, request, field) => {
      const refused = await failure(locks(method, request));
      expect(refused).toMatchObject({
        code: status.INVALID_ARGUMENT,
        errorCode: 'ERR_INVALID_ARGUMENT',
        field,
      });
      expect(refused.details).toMatch(new RegExp(`^invalid ${field}: expected `));
    },
  );

  it('refuses a string field that is not valid UTF-8, naming it (no U+FFFD stand-in)', async () => {
    // Raw protobuf: field 1 (key) and 2 (owner / resource_id) as length-delimited bytes, then
    // field 3 (ttl_ms / lock_owner) and 4; 0xFF is never valid in UTF-8.
    const raw = (method: string, bytes: number[]) =>
      failure(
        new Promise((resolve, reject) =>
          grpc.locks.makeUnaryRequest(
            method,
            (message: Buffer) => message,
            (answer: Buffer) => answer,
            Buffer.from(bytes),
            (error, value) => (error ? reject(error) : resolve(value)),
          ),
        ),
      );
    const key = [...Buffer.from(uniqueKey('utf8'))];
    expect(
      await raw('/fencelock.v1.Locks/Acquire', [
        0x0a,
        key.length + 1,
        ...key,
        0xff,
        0x12,
        1,
        0x41,
        0x18,
        0x88,
        0x27,
      ]),
    ).toMatchObject({
      code: status.INVALID_ARGUMENT,
      errorCode: 'ERR_INVALID_ARGUMENT',
      field: 'key',
    });
    expect(
      await raw('/dapr.proto.runtime.v1.Dapr/TryLockAlpha1', [
        0x0a,
        9,
        ...Buffer.from('lockstore'),
        0x12,
        key.length,
        ...key,
        0x1a,
        2,
        0x41,
        0xfe,
        0x20,
        30,
      ]),
    ).toMatchObject({
      code: status.INVALID_ARGUMENT,
      errorCode: 'ERR_MALFORMED_REQUEST',
      field: 'lock_owner',
    });
    expect(
      (await locks('Inspect', { key: Buffer.from(key).toString() })).response.holder,
    ).toBeNull();
  });

  it('refuses a message that is not well formed with INVALID_ARGUMENT, and skips unknown fields', async () => {
    const raw = (method: string, bytes: number[]) =>
      new Promise<{ error?: ServiceError; value?: Buffer }>((resolve) =>
        grpc.locks.makeUnaryRequest(
          method,
          (message: Buffer) => message,
          (answer: Buffer) => answer,
          Buffer.from(bytes),
          (error, value) => resolve(error ? { error } : { ...(value ? { value } : {}) }),
        ),
      );
    const key = [...Buffer.from(uniqueKey('cut'))];
    const ttlAndOwner = [0x18, 0xe0, 0xd4, 0x03, 0x12, 5, ...Buffer.from('alice')];
    // The key last, claiming more bytes than are left: its bytes must not be read as a key with
    // U+FFFD standing in (two such keys would be one lock).
    const cut = await raw('/fencelock.v1.Locks/Acquire', [
      ...ttlAndOwner,
      0x0a,
      key.length + 8,
      ...key,
      0xff,
    ]);
    expect(cut.error?.code).toBe(status.INVALID_ARGUMENT);
    expect(cut.error?.metadata.get('fencelock-field')).toEqual(['request']);
    expect(cut.error?.details).toMatch(/^invalid request: not a well-formed message/);
    // A varint of 11 bytes and an unknown wire type: never INTERNAL.
    for (const bytes of [
      [0x18, ...Array(11).fill(0xff)],
      [0xff, 0xff, 0xff, 0xff],
    ]) {
      expect((await raw('/fencelock.v1.Locks/Acquire', bytes)).error?.code).toBe(
        status.INVALID_ARGUMENT,
      );
    }
    // An unknown field (number 9) holding bytes that are not UTF-8 is skipped, as proto3 asks.
    const granted = await raw('/fencelock.v1.Locks/Acquire', [
      ...ttlAndOwner,
      0x0a,
      key.length,
      ...key,
      0x4a,
      1,
      0xff,
    ]);
    expect(granted.error).toBeUndefined();
    const holder = (await locks('Inspect', { key: Buffer.from(key).toString(), owner: 'alice' }))
      .response.holder;
    expect(holder).toMatchObject({ ownerId: ownerIdFor('alice', Buffer.from(key).toString()) });
    await locks('Release', {
      key: Buffer.from(key).toString(),
      owner: 'alice',
      fencingToken: holder.fencingToken,
    });
  });

  it('refuses a request over 2 MiB with RESOURCE_EXHAUSTED', async () => {
    const refused = await failure(
      locks('Acquire', {
        key: uniqueKey('big'),
        owner: 'x'.repeat(2 * 1024 * 1024 + 1),
        ttlMs: 5_000,
      }),
    );
    expect(refused.code).toBe(status.RESOURCE_EXHAUSTED);
  });

  it("Dapr's service: its checks in its order, the grant's token in the trailers", async () => {
    const dapr = (method: string, request: object) => unary(grpc.dapr, method, request);
    const key = uniqueKey('grpc-dapr');
    const lock = { storeName: 'lockstore', resourceId: key, lockOwner: 'A', expiryInSeconds: 30 };
    const granted = await dapr('TryLockAlpha1', lock);
    expect(granted.response).toEqual({ success: true });
    const token = granted.trailer.get('fencelock-fencing-token')[0];
    expect(granted.trailer.get('fencelock-ttl-ms')).toEqual(['30000']);
    const holder = (await locks('Inspect', { key })).response.holder;
    expect(holder).toMatchObject({ ownerId: ownerIdFor('A', key), fencingToken: token });
    expect((await dapr('TryLockAlpha1', { ...lock, lockOwner: 'B' })).response).toEqual({
      success: false,
    });

    for (const [request, field] of [
      [{ ...lock, expiryInSeconds: 0, resourceId: '' }, 'expiry_in_seconds'],
      [{ ...lock, resourceId: '', lockOwner: '' }, 'resource_id'],
      [{ ...lock, lockOwner: '', storeName: 'other' }, 'lock_owner'],
    ] as const) {
      expect(await failure(dapr('TryLockAlpha1', request))).toMatchObject({
        code: status.INVALID_ARGUMENT,
        errorCode: 'ERR_MALFORMED_REQUEST',
        field,
      });
    }
    expect(await failure(dapr('UnlockAlpha1', { ...lock, storeName: 'other' }))).toMatchObject({
      code: status.INVALID_ARGUMENT,
      errorCode: 'ERR_LOCK_STORE_NOT_FOUND',
      details: 'lock store "other" not found (this sidecar serves "lockstore")',
    });
    expect((await dapr('UnlockAlpha1', { ...lock, lockOwner: 'B' })).response).toEqual({
      status: 2,
    });
    expect((await dapr('UnlockAlpha1', lock)).response).toEqual({ status: 0 });
    expect((await dapr('UnlockAlpha1', lock)).response).toEqual({ status: 1 });
  });

  it("answers Dapr's other methods UNIMPLEMENTED, saying what it serves", async () => {
    for (const method of ['GetState', 'SaveState', 'SubscribeTopicEventsAlpha1', 'Shutdown']) {
      const refused = await failure(
        new Promise((resolve, reject) =>
          grpc.dapr.makeUnaryRequest(
            `/dapr.proto.runtime.v1.Dapr/${method}`,
            (message: Buffer) => message,
            (bytes: Buffer) => bytes,
            Buffer.alloc(0),
            (error, value) => (error ? reject(error) : resolve(value)),
          ),
        ),
      );
      expect(refused.code).toBe(status.UNIMPLEMENTED);
      expect(refused.details).toBe(
        `/dapr.proto.runtime.v1.Dapr/${method}: not served by fencelock, which serves only Dapr's lock and metadata methods (TryLockAlpha1, UnlockAlpha1, GetMetadata) and fencelock.v1.Locks`,
      );
    }
  });
});

describe('the token over gRPC', () => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(REDIS_URL, ['--grpc-port', '0'], {
      FENCELOCK_SERVER_TOKEN: TOKEN,
    });
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  it('is read from dapr-api-token or authorization: Bearer; else UNAUTHENTICATED', async () => {
    const key = uniqueKey('grpc-token');
    const inspect = (options: object) => unary(grpc.locks, 'Inspect', { key }, options);
    expect((await inspect({ token: TOKEN })).response.key).toBe(key);
    expect((await inspect({ metadata: { authorization: `Bearer ${TOKEN}` } })).response.key).toBe(
      key,
    );
    for (const options of [
      {},
      { token: `${TOKEN}x` },
      { metadata: { authorization: `Bearer ${TOKEN}x` } },
      { metadata: { authorization: TOKEN } },
    ]) {
      expect(await failure(inspect(options))).toMatchObject({
        code: status.UNAUTHENTICATED,
        errorCode: 'ERR_UNAUTHORIZED',
      });
    }
    // Nothing is locked without the token, on either service.
    const lock = { storeName: 'lockstore', resourceId: key, lockOwner: 'A', expiryInSeconds: 30 };
    expect(await failure(unary(grpc.dapr, 'TryLockAlpha1', lock))).toMatchObject({
      code: status.UNAUTHENTICATED,
    });
    expect(
      await failure(unary(grpc.locks, 'Acquire', { key, owner: 'A', ttlMs: 5000 })),
    ).toMatchObject({ code: status.UNAUTHENTICATED });
    expect((await inspect({ token: TOKEN })).response.holder).toBeNull();
  });
});

describe('an in-process sidecar with gRPC', () => {
  it('refuses a gRPC host beyond loopback without a token', async () => {
    const sidecar = createSidecar({ store: REDIS_URL });
    try {
      await expect(sidecar.listenGrpc({ host: '0.0.0.0', port: 0 })).rejects.toMatchObject({
        code: 'ERR_INVALID_ARGUMENT',
        argument: 'host',
      });
    } finally {
      await sidecar.close();
    }
  });

  it('close() ends a waiting Acquire with UNAVAILABLE and leaves no server, socket or timer', async () => {
    const harness = sqliteHarness();
    const count = () => {
      const counts: Record<string, number> = {};
      for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
      return counts;
    };
    try {
      const before = count();
      const sidecar = createSidecar({ store: `sqlite:${harness.db.name}` });
      const address = await sidecar.listenGrpc({ port: 0 });
      expect(address).toMatch(/^127\.0\.0\.1:\d+$/);
      const grpc = grpcClients(address);
      const key = uniqueKey('grpc-shutdown');
      await unary(grpc.locks, 'Acquire', { key, owner: 'A', ttlMs: 20_000 });
      const waiting = failure(
        unary(grpc.locks, 'Acquire', { key, owner: 'B', ttlMs: 20_000, waitMs: 30_000 }),
      );
      await sleep(300);
      const started = performance.now();
      await sidecar.close();
      expect(performance.now() - started).toBeLessThan(3_000);
      expect(await waiting).toMatchObject({
        code: status.UNAVAILABLE,
        errorCode: 'ERR_SHUTTING_DOWN',
      });
      // A call after the shutdown does not reach a server.
      expect((await failure(unary(grpc.locks, 'Inspect', { key }))).code).toBe(status.UNAVAILABLE);
      grpc.close();
      await sleep(200);
      const after = count();
      for (const resource of ['TCPServerWrap', 'TCPSocketWrap', 'Timeout']) {
        expect(after[resource] ?? 0, resource).toBeLessThanOrEqual(before[resource] ?? 0);
      }
      // A keeps its lease (the sidecar keeps no state): it ends by its TTL. B got nothing.
      expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('A', key));
    } finally {
      await harness.close();
    }
  });
});
