/**
 * Several keys at once through the sidecar, all or nothing: `POST /v1/locks/acquire-all` and
 * `POST /v1/locks/release-all`, and fencelock.v1.Locks' AcquireAll and ReleaseAll. Keys are
 * deduplicated and sorted, each granted with its own owner id and fencing token; a held key means
 * none is taken (409 / ABORTED), a waiting acquire gets every key once it is released, two
 * clients taking overlapping keys in opposite orders never deadlock, and bad input is refused
 * before the store is asked anything. Real `fencelock serve` processes on the real Redis, etcd
 * and a SQLite file; a late grant (the caller gone) on an in-process SQLite locker.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import {
  acquireAll,
  type LockOperationsContext,
} from '../../../packages/cli/src/server/lock-operations.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS, REDIS_URL } from '../../helpers/engines.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  dropRedisKeys,
  lockPath,
  postTooLarge,
  type ServerProcess,
  serveStore,
  sleep,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

const suffix = randomBytes(4).toString('hex');
const sqliteFile = () => join(mkdtempSync(join(tmpdir(), 'fencelock-multi-')), 'locks.db');

const STORES = [
  { name: 'redis', url: () => REDIS_URL },
  {
    name: 'etcd',
    url: () =>
      `etcd://${ETCD_ENDPOINTS.map((e) => e.replace('http://', '')).join(',')}/sidecar-multi-${suffix}`,
  },
  { name: 'sqlite', url: () => `sqlite:${sqliteFile()}` },
] as const;

describe.each(STORES)('all-or-nothing multi-key locks through the sidecar ($name)', ({ url }) => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(url(), ['--grpc-port', '0', '--max-wait', '20000']);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  const acquireAllHttp = (body: unknown, signal?: AbortSignal) =>
    call(server.url, '/v1/locks/acquire-all', { body, ...(signal ? { signal } : {}) });
  const releaseAllHttp = (body: unknown) => call(server.url, '/v1/locks/release-all', { body });
  const holderOf = async (key: string) => (await call(server.url, lockPath(key))).body.holder;
  const refsOf = (grants: readonly { key: string; fencingToken: string }[]) =>
    grants.map(({ key, fencingToken }) => ({ key, fencingToken }));

  it('HTTP: grants every key, deduplicated and sorted, each with its owner id and token', async () => {
    const [k1, k2, k3] = [uniqueKey('m-a'), uniqueKey('m-b'), uniqueKey('m-c')].sort() as [
      string,
      string,
      string,
    ];
    const answer = await acquireAllHttp({ keys: [k3, k1, k2, k1], owner: 'A', ttlMs: 10_000 });
    expect(answer.status).toBe(200);
    expect(answer.body.owner).toBe('A');
    expect(answer.body.grants.map((g: { key: string }) => g.key)).toEqual([k1, k2, k3]);
    for (const grant of answer.body.grants) {
      expect(grant).toEqual({
        key: grant.key,
        owner: 'A',
        ownerId: ownerIdFor('A', grant.key),
        fencingToken: expect.stringMatching(/^[1-9][0-9]*$/),
        ttlMs: expect.any(Number),
      });
      const holder = await holderOf(grant.key);
      expect(holder).toMatchObject({
        ownerId: ownerIdFor('A', grant.key),
        fencingToken: grant.fencingToken,
      });
    }
    const released = await releaseAllHttp({ owner: 'A', grants: refsOf(answer.body.grants) });
    expect(released.status).toBe(200);
    expect(released.body).toEqual({
      outcomes: [k1, k2, k3].map((key) => ({ key, outcome: 'released' })),
    });
    for (const key of [k1, k2, k3]) expect(await holderOf(key)).toBeNull();
    // Released twice: nobody holds the keys any more.
    const again = await releaseAllHttp({ owner: 'A', grants: refsOf(answer.body.grants) });
    expect(again.body.outcomes.map((o: { outcome: string }) => o.outcome)).toEqual([
      'not-held',
      'not-held',
      'not-held',
    ]);
  });

  it('HTTP: one key held → 409 and none taken; released → the waiting client gets all', async () => {
    const [k1, k2, k3] = [uniqueKey('m-a'), uniqueKey('m-b'), uniqueKey('m-c')].sort() as [
      string,
      string,
      string,
    ];
    const b = await call(server.url, lockPath(k2, 'acquire'), {
      body: { owner: 'B', ttlMs: 10_000 },
    });
    expect(b.status).toBe(200);
    const busy = await acquireAllHttp({ keys: [k1, k2, k3], owner: 'A', ttlMs: 10_000 });
    expect([busy.status, busy.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    expect(await holderOf(k1)).toBeNull();
    expect(await holderOf(k3)).toBeNull();

    const timedOut = await acquireAllHttp({
      keys: [k3, k2, k1],
      owner: 'C',
      ttlMs: 10_000,
      waitMs: 400,
    });
    expect([timedOut.status, timedOut.body.errorCode]).toEqual([409, 'ERR_LOCK_TIMEOUT']);
    expect(timedOut.body.message).toContain(k2);
    expect(await holderOf(k1)).toBeNull();

    const waiting = acquireAllHttp({
      keys: [k3, k2, k1],
      owner: 'A',
      ttlMs: 10_000,
      waitMs: 15_000,
    });
    await sleep(400);
    const releasedB = await call(server.url, lockPath(k2, 'release'), {
      body: { owner: 'B', fencingToken: b.body.fencingToken },
    });
    expect(releasedB.status).toBe(200);
    const all = await waiting;
    expect(all.status).toBe(200);
    expect(all.body.grants.map((g: { key: string }) => g.key)).toEqual([k1, k2, k3]);
    expect(BigInt(all.body.grants[1].fencingToken)).toBeGreaterThan(BigInt(b.body.fencingToken));
    // B's late release-all of its old grant deletes nothing of A's.
    const stale = await releaseAllHttp({
      owner: 'B',
      grants: [{ key: k2, fencingToken: b.body.fencingToken }],
    });
    expect(stale.body.outcomes).toEqual([{ key: k2, outcome: 'not-owner' }]);
    const done = await releaseAllHttp({ owner: 'A', grants: refsOf(all.body.grants) });
    expect(done.body.outcomes.every((o: { outcome: string }) => o.outcome === 'released')).toBe(
      true,
    );
  });

  it('HTTP: two clients taking overlapping keys in opposite orders never deadlock, never overlap', async () => {
    const keys = [uniqueKey('m-x'), uniqueKey('m-y'), uniqueKey('m-z')];
    const reversed = [...keys].reverse();
    let inside = 0;
    let overlaps = 0;
    const rounds = 25;
    const client = async (owner: string, order: readonly string[]) => {
      for (let i = 0; i < rounds; i += 1) {
        const got = await acquireAllHttp({ keys: order, owner, ttlMs: 10_000, waitMs: 15_000 });
        expect(got.status, JSON.stringify(got.body)).toBe(200);
        inside += 1;
        if (inside > 1) overlaps += 1;
        await sleep(2);
        inside -= 1;
        const released = await releaseAllHttp({ owner, grants: refsOf(got.body.grants) });
        expect(released.body.outcomes.map((o: { outcome: string }) => o.outcome)).toEqual([
          'released',
          'released',
          'released',
        ]);
      }
      return owner;
    };
    const finished = await Promise.race([
      Promise.all([client('P', keys), client('Q', reversed)]),
      sleep(50_000).then(() => 'stuck'),
    ]);
    expect(finished).toEqual(['P', 'Q']);
    expect(overlaps).toBe(0);
  }, 60_000);

  it('HTTP: read grants on several keys are shared, a writer of one of them is refused', async () => {
    const keys = [uniqueKey('m-r1'), uniqueKey('m-r2')].sort();
    const r1 = await acquireAllHttp({ keys, owner: 'R1', ttlMs: 10_000, mode: 'read' });
    const r2 = await acquireAllHttp({ keys, owner: 'R2', ttlMs: 10_000, mode: 'read' });
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(r1.body.grants.map((g: { mode: string }) => g.mode)).toEqual(['read', 'read']);
    const writer = await acquireAllHttp({ keys: [keys[1]], owner: 'W', ttlMs: 10_000 });
    expect([writer.status, writer.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    for (const [owner, answer] of [
      ['R1', r1],
      ['R2', r2],
    ] as const) {
      const done = await releaseAllHttp({ owner, grants: refsOf(answer.body.grants) });
      expect(done.body.outcomes.map((o: { outcome: string }) => o.outcome)).toEqual([
        'released',
        'released',
      ]);
    }
    const w = await acquireAllHttp({ keys: [keys[1]], owner: 'W', ttlMs: 10_000 });
    expect(w.status).toBe(200);
    await releaseAllHttp({ owner: 'W', grants: refsOf(w.body.grants) });
  });

  it('HTTP: bad input is a 400 naming the field, and nothing is taken', async () => {
    const key = uniqueKey('m-bad');
    const tooMany = Array.from({ length: 1_001 }, (_, i) => `k${i}`);
    const cases: [unknown, string][] = [
      [{ keys: key, owner: 'A', ttlMs: 10_000 }, 'keys'],
      [{ keys: [], owner: 'A', ttlMs: 10_000 }, 'keys'],
      [{ keys: tooMany, owner: 'A', ttlMs: 10_000 }, 'keys'],
      [{ keys: [key, ''], owner: 'A', ttlMs: 10_000 }, 'keys[1]'],
      [{ keys: [key, 7], owner: 'A', ttlMs: 10_000 }, 'keys[1]'],
      [{ keys: [key, 'nul\u0000'], owner: 'A', ttlMs: 10_000 }, 'keys[1]'],
      [{ keys: [key, '€'.repeat(400)], owner: 'A', ttlMs: 10_000 }, 'keys[1]'],
      [{ keys: [key], owner: 'A' }, 'ttlMs'],
      [{ keys: [key], owner: 'A', ttlMs: '10000' }, 'ttlMs'],
      [{ keys: [key], owner: '', ttlMs: 10_000 }, 'owner'],
      [{ keys: [key], owner: 'A', ttlMs: 10_000, mode: 'shared' }, 'mode'],
      [{ keys: [key], owner: 'A', ttlMs: 10_000, waitMs: 20_001 }, 'waitMs'],
      [{ keys: [key], owner: 'A', ttlMs: 10_000, permits: 2 }, 'permits'],
    ];
    for (const [body, field] of cases) {
      const answer = await acquireAllHttp(body);
      expect(answer.status, field).toBe(400);
      expect(answer.body, field).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field });
    }
    expect(await holderOf(key)).toBeNull();

    const releases: [unknown, string][] = [
      [{ owner: 'A', grants: 'x' }, 'grants'],
      [{ owner: 'A', grants: [] }, 'grants'],
      [{ owner: 'A', grants: [{ key }] }, 'grants[0].fencingToken'],
      [{ owner: 'A', grants: [{ key, fencingToken: '0' }] }, 'grants[0].fencingToken'],
      [{ owner: 'A', grants: [{ key, fencingToken: 5 }] }, 'grants[0].fencingToken'],
      [{ owner: 'A', grants: [{ key: '', fencingToken: '5' }] }, 'grants[0].key'],
      [{ owner: 'A', grants: [{ key: 'n\u0000', fencingToken: '5' }] }, 'grants[0].key'],
      [
        {
          owner: 'A',
          grants: [
            { key, fencingToken: '5' },
            { key, fencingToken: '6' },
          ],
        },
        'grants',
      ],
      [{ grants: [{ key, fencingToken: '5' }] }, 'owner'],
      [{ owner: 'A', grants: [{ key, fencingToken: '5', ttlMs: 1 }] }, 'grants[0].ttlMs'],
    ];
    for (const [body, field] of releases) {
      const answer = await releaseAllHttp(body);
      expect(answer.status, field).toBe(400);
      expect(answer.body, field).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field });
    }
  });

  it('gRPC: AcquireAll and ReleaseAll; a held key is ABORTED and none is taken; bad input named', async () => {
    const [k1, k2] = [uniqueKey('m-g1'), uniqueKey('m-g2')].sort() as [string, string];
    const locks = (method: string, request: object) => unary(grpc.locks, method, request);
    const got = (await locks('AcquireAll', { keys: [k2, k1, k2], ttlMs: 10_000 })).response;
    expect(got.owner).toMatch(/^[0-9a-f]{32}$/);
    expect(got.grants.map((g: { key: string }) => g.key)).toEqual([k1, k2]);
    expect(got.grants[0]).toMatchObject({
      key: k1,
      owner: got.owner,
      ownerId: ownerIdFor(got.owner, k1),
      mode: 0,
    });
    const busy = await failure(
      locks('AcquireAll', { keys: [k1, uniqueKey('m-g3')], ttlMs: 10_000 }),
    );
    expect([busy.code, busy.errorCode]).toEqual([status.ABORTED, 'ERR_LOCK_BUSY']);
    const released = await locks('ReleaseAll', {
      owner: got.owner,
      grants: got.grants.map((g: { key: string; fencingToken: string }) => ({
        key: g.key,
        fencingToken: g.fencingToken,
      })),
    });
    expect(released.response).toEqual({
      outcomes: [
        { key: k1, outcome: 'released' },
        { key: k2, outcome: 'released' },
      ],
    });
    const read = (await locks('AcquireAll', { keys: [k1], owner: 'R', ttlMs: 10_000, mode: 2 }))
      .response;
    expect(read.grants[0].mode).toBe(2);
    await locks('ReleaseAll', {
      owner: 'R',
      grants: [{ key: k1, fencingToken: read.grants[0].fencingToken }],
    });

    const bad: [string, object, string][] = [
      ['AcquireAll', { keys: [], ttlMs: 10_000 }, 'keys'],
      ['AcquireAll', { keys: [k1, ''], ttlMs: 10_000 }, 'keys[1]'],
      ['AcquireAll', { keys: [k1], ttlMs: 10_000, mode: 9 }, 'mode'],
      ['AcquireAll', { keys: [k1], ttlMs: 0 }, 'ttl_ms'],
      ['ReleaseAll', { owner: 'A', grants: [] }, 'grants'],
      [
        'ReleaseAll',
        { owner: 'A', grants: [{ key: k1, fencingToken: 'x' }] },
        'grants[0].fencing_token',
      ],
      ['ReleaseAll', { owner: 'A', grants: [{ key: '', fencingToken: '5' }] }, 'grants[0].key'],
    ];
    for (const [method, request, field] of bad) {
      const refused = await failure(locks(method, request));
      expect([refused.code, refused.errorCode, refused.field], field).toEqual([
        status.INVALID_ARGUMENT,
        'ERR_INVALID_ARGUMENT',
        field,
      ]);
    }
    expect(await holderOf(k1)).toBeNull();
  });

  it('gRPC: a nested string that is not UTF-8 is refused naming it (no U+FFFD stand-in)', async () => {
    // ReleaseAllRequest { owner = 1: "A", grants = 2: GrantRef { key = 1: 0xFF, fencing_token = 2: "5" } }
    const grantRef = [0x0a, 1, 0xff, 0x12, 1, 0x35];
    const bytes = [0x0a, 1, 0x41, 0x12, grantRef.length, ...grantRef];
    const refused = await failure(
      new Promise((resolve, reject) =>
        grpc.locks.makeUnaryRequest(
          '/fencelock.v1.Locks/ReleaseAll',
          (message: Buffer) => message,
          (answer: Buffer) => answer,
          Buffer.from(bytes),
          (error, value) => (error ? reject(error) : resolve(value)),
        ),
      ),
    );
    expect([refused.code, refused.field]).toEqual([status.INVALID_ARGUMENT, 'grants[0].key']);
  });

  it('HTTP: a caller that hangs up while waiting is granted nothing, and holds nothing after', async () => {
    const [k1, k2] = [uniqueKey('m-h1'), uniqueKey('m-h2')].sort() as [string, string];
    const b = await call(server.url, lockPath(k2, 'acquire'), {
      body: { owner: 'B', ttlMs: 10_000 },
    });
    const gone = new AbortController();
    const waiting = acquireAllHttp({ keys: [k1, k2], ttlMs: 10_000, waitMs: 15_000 }, gone.signal);
    await sleep(400);
    // While it waits for k2 it holds k1 (the smaller key).
    expect(await holderOf(k1)).not.toBeNull();
    gone.abort();
    await expect(waiting).rejects.toThrow();
    await sleep(400);
    expect(await holderOf(k1)).toBeNull();
    await call(server.url, lockPath(k2, 'release'), {
      body: { owner: 'B', fencingToken: b.body.fencingToken },
    });
    await sleep(400);
    expect(await holderOf(k1)).toBeNull();
    expect(await holderOf(k2)).toBeNull();
  });
});

describe('the body limits: 16 KiB for one key, 2 MiB for the multi-key routes (SQLite)', () => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(`sqlite:${sqliteFile()}`, ['--grpc-port', '0']);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  it('1,000 keys are acquired and released in one call each; larger bodies are 413 naming the limits', async () => {
    // 1,000 keys of 60 characters: the release-all body is about 110 KB.
    const keys = Array.from(
      { length: 1_000 },
      (_, i) => `${uniqueKey('limit')}:${String(i).padStart(30, '0')}`,
    );
    const acquired = await call(server.url, '/v1/locks/acquire-all', {
      body: { keys, owner: 'A', ttlMs: 30_000 },
    });
    expect(acquired.status).toBe(200);
    expect(acquired.body.grants).toHaveLength(1_000);
    const grants = acquired.body.grants.map((g: { key: string; fencingToken: string }) => ({
      key: g.key,
      fencingToken: g.fencingToken,
    }));
    expect(JSON.stringify({ owner: 'A', grants }).length).toBeGreaterThan(100_000);
    const released = await call(server.url, '/v1/locks/release-all', {
      body: { owner: 'A', grants },
    });
    expect(released.status).toBe(200);
    expect(released.body.outcomes.every((o: { outcome: string }) => o.outcome === 'released')).toBe(
      true,
    );

    const single = await call(server.url, lockPath(uniqueKey('limit'), 'acquire'), {
      body: { owner: 'x'.repeat(17 * 1024), ttlMs: 1_000 },
    });
    expect(single.status).toBe(413);
    expect(single.body).toMatchObject({ errorCode: 'ERR_BODY_TOO_LARGE' });
    expect(single.body.message).toMatch(
      /at most 16384 bytes \(2097152 on acquire-all and release-all\)/,
    );
    // The sidecar answers before it reads the body, and closes the connection (CI run 40: fetch
    // failed writing the rest of the 2 MiB, EPIPE).
    const huge = await postTooLarge(server.url, '/v1/locks/acquire-all', {
      keys: ['a'],
      owner: 'x'.repeat(2 * 1024 * 1024),
      ttlMs: 1_000,
    });
    expect(huge.status).toBe(413);
    expect(huge.body).toMatchObject({ errorCode: 'ERR_BODY_TOO_LARGE' });

    // gRPC: the same 2 MiB for every call.
    const refused = await failure(
      unary(grpc.locks, 'Acquire', {
        key: uniqueKey('big'),
        owner: 'x'.repeat(2 * 1024 * 1024 + 1),
        ttlMs: 5_000,
      }),
    );
    expect(refused.code).toBe(status.RESOURCE_EXHAUSTED);
  }, 60_000);
});

describe('multi-key grants whose caller went away (in-process, SQLite)', () => {
  const locker = createLocker(`sqlite:${sqliteFile()}`);
  afterAll(() => locker.close());

  /** The locker, except that `gone` is aborted just as the grants come back. */
  function leavingAtGrant(gone: AbortController): Locker {
    return new Proxy(locker, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (property !== 'tryAcquireAllForOwner' && property !== 'acquireAllForOwner') {
          return typeof value === 'function' ? value.bind(target) : value;
        }
        return async (...args: unknown[]) => {
          const grants = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          gone.abort();
          return grants;
        };
      },
    });
  }

  const context = (used: Locker): LockOperationsContext => ({
    locker: used,
    storeName: 'lockstore',
    maxWaitMs: 60_000,
    shutdown: new AbortController().signal,
    allowed: () => 'any',
  });

  it.each([0, 1_000])(
    'releases them when the sidecar made up the owner (waitMs %i)',
    async (waitMs) => {
      const keys = [`late-all-a-${waitMs}-${suffix}`, `late-all-b-${waitMs}-${suffix}`];
      const gone = new AbortController();
      await expect(
        acquireAll(context(leavingAtGrant(gone)), {
          keys,
          ttlMs: 60_000,
          waitMs,
          signal: gone.signal,
        }),
      ).rejects.toMatchObject({ body: { errorCode: 'ERR_LOCK_TIMEOUT' } });
      for (const key of keys) expect((await locker.inspect(key)).holder).toBeNull();
    },
  );

  it('leaves them for their TTL when the caller named the owner', async () => {
    const keys = [`late-all-named-a-${suffix}`, `late-all-named-b-${suffix}`];
    const gone = new AbortController();
    const answer = await acquireAll(context(leavingAtGrant(gone)), {
      keys,
      owner: 'A',
      ttlMs: 60_000,
      signal: gone.signal,
    });
    for (const grant of answer.grants) {
      expect((await locker.inspect(grant.key)).holder?.fencingToken).toBe(
        BigInt(grant.fencingToken),
      );
    }
  });
});
