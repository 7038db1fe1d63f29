/**
 * Read grants through the sidecar: `mode: "read"` on `POST /v1/locks/{key}/acquire` and
 * `mode: LOCK_MODE_READ` on fencelock.v1.Locks' Acquire, on every engine with read locks (Redis,
 * Redlock, etcd, ZooKeeper, PostgreSQL lease mode, SQLite): readers share the key, a writer is
 * refused while they hold it and granted once the last one released (by its fencing token), a
 * reader is refused while the writer holds it. PostgreSQL's advisory mode has no read locks:
 * refused with 400 / INVALID_ARGUMENT naming `mode`. Real `fencelock serve` processes on the
 * engines of scripts/services.sh and a SQLite file.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import {
  ETCD_ENDPOINTS,
  PG_URL,
  REDIS_URL,
  REDLOCK_NODE_URLS,
  ZK_HOSTS,
} from '../../helpers/engines.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
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

const suffix = randomBytes(4).toString('hex');
const schema = `fencelock_sidecar_read_${suffix}`;
const advisorySchema = `fencelock_sidecar_read_adv_${suffix}`;

afterAll(async () => {
  const admin = new pg.Pool({ connectionString: PG_URL, max: 1 });
  try {
    for (const s of [schema, advisorySchema]) {
      await admin.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    }
  } finally {
    await admin.end();
  }
});

const hosts = (urls: readonly string[], scheme: string) =>
  urls.map((u) => u.replace(`${scheme}://`, '')).join(',');

const STORES = [
  { name: 'redis', url: () => REDIS_URL },
  { name: 'redlock', url: () => `redlock://${hosts(REDLOCK_NODE_URLS, 'redis')}` },
  { name: 'etcd', url: () => `etcd://${hosts(ETCD_ENDPOINTS, 'http')}/sidecar-read-${suffix}` },
  { name: 'zookeeper', url: () => `zk://${ZK_HOSTS}/sidecar-read-${suffix}` },
  { name: 'postgres', url: () => `${PG_URL}?schema=${schema}` },
  {
    name: 'sqlite',
    url: () => `sqlite:${join(mkdtempSync(join(tmpdir(), 'fencelock-read-')), 'locks.db')}`,
  },
] as const;

/** gRPC `fencelock.v1.LockMode` numbers. */
const MODE = { unspecified: 0, write: 1, read: 2 } as const;

describe.each(STORES)('read grants through the sidecar ($name)', ({ url }) => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(url(), ['--grpc-port', '0', '--max-wait', '10000']);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  const http = (key: string, op: 'acquire' | 'renew' | 'release', body: unknown) =>
    call(server.url, lockPath(key, op), { body });
  const locks = (method: string, request: object) => unary(grpc.locks, method, request);

  it('HTTP: readers share the key, a writer waits for the last one; renew and release by token', async () => {
    const key = uniqueKey('read-http');
    const r1 = await http(key, 'acquire', { owner: 'R1', ttlMs: 10_000, mode: 'read' });
    const r2 = await http(key, 'acquire', { owner: 'R2', ttlMs: 10_000, mode: 'read' });
    expect([r1.status, r2.status]).toEqual([200, 200]);
    expect(r1.body).toMatchObject({
      key,
      owner: 'R1',
      ownerId: ownerIdFor('R1', key),
      fencingToken: expect.stringMatching(/^[1-9][0-9]*$/),
      mode: 'read',
    });
    expect(r2.body.mode).toBe('read');
    expect(r2.body.fencingToken).not.toBe(r1.body.fencingToken);

    // A writer is excluded while they read.
    const busy = await http(key, 'acquire', { owner: 'W', ttlMs: 10_000 });
    expect([busy.status, busy.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    const writer = http(key, 'acquire', { owner: 'W', ttlMs: 10_000, waitMs: 9_000 });
    await sleep(300);

    const renewed = await http(key, 'renew', {
      owner: 'R1',
      fencingToken: r1.body.fencingToken,
      ttlMs: 10_000,
    });
    expect(renewed.status).toBe(200);
    expect(renewed.body.fencingToken).toBe(r1.body.fencingToken);
    // Another token of R1's is not R1's grant: refused, and the grant stays.
    const wrong = await http(key, 'release', {
      owner: 'R1',
      fencingToken: (BigInt(r2.body.fencingToken) + BigInt(r1.body.fencingToken)).toString(),
    });
    expect([404, 409]).toContain(wrong.status);
    expect(await http(key, 'release', { owner: 'R1', fencingToken: r1.body.fencingToken })).toEqual(
      expect.objectContaining({ status: 200, body: { key, outcome: 'released' } }),
    );
    // R2 still reads: the writer still waits.
    const early = await Promise.race([
      writer.then(() => 'answered'),
      sleep(500).then(() => 'waiting'),
    ]);
    expect(early).toBe('waiting');
    const second = await http(key, 'release', { owner: 'R2', fencingToken: r2.body.fencingToken });
    expect(second.body).toEqual({ key, outcome: 'released' });

    const w = await writer;
    expect(w.status).toBe(200);
    expect(w.body.mode).toBeUndefined();
    expect(BigInt(w.body.fencingToken)).toBeGreaterThan(BigInt(r2.body.fencingToken));
    expect(BigInt(w.body.fencingToken)).toBeGreaterThan(BigInt(r1.body.fencingToken));
    // A reader is excluded while the writer holds.
    const readBusy = await http(key, 'acquire', { owner: 'R3', ttlMs: 10_000, mode: 'read' });
    expect([readBusy.status, readBusy.body.errorCode]).toEqual([409, 'ERR_LOCK_BUSY']);
    // R1's grant is gone: releasing it again deletes nothing of the writer's.
    const again = await http(key, 'release', { owner: 'R1', fencingToken: r1.body.fencingToken });
    expect([404, 409]).toContain(again.status);
    const done = await http(key, 'release', { owner: 'W', fencingToken: w.body.fencingToken });
    expect(done.body).toEqual({ key, outcome: 'released' });
  });

  it('gRPC: LOCK_MODE_READ on Acquire shares the key, excludes a writer; Release by token', async () => {
    const key = uniqueKey('read-grpc');
    const a = (await locks('Acquire', { key, owner: 'R1', ttlMs: 10_000, mode: MODE.read }))
      .response;
    const b = (await locks('Acquire', { key, owner: 'R2', ttlMs: 10_000, mode: MODE.read }))
      .response;
    expect(a).toMatchObject({ key, owner: 'R1', ownerId: ownerIdFor('R1', key), mode: MODE.read });
    expect(b.mode).toBe(MODE.read);
    const busy = await failure(
      locks('Acquire', { key, owner: 'W', ttlMs: 10_000, mode: MODE.write }),
    );
    expect([busy.code, busy.errorCode]).toEqual([status.ABORTED, 'ERR_LOCK_BUSY']);
    const unknown = await failure(locks('Acquire', { key, owner: 'X', ttlMs: 10_000, mode: 7 }));
    expect([unknown.code, unknown.field]).toEqual([status.INVALID_ARGUMENT, 'mode']);
    const withPermits = await failure(
      locks('Acquire', { key, owner: 'X', ttlMs: 10_000, mode: MODE.read, permits: 2 }),
    );
    expect([withPermits.code, withPermits.field]).toEqual([status.INVALID_ARGUMENT, 'mode']);
    for (const [owner, grant] of [
      ['R1', a],
      ['R2', b],
    ] as const) {
      const done = await locks('Release', { key, owner, fencingToken: grant.fencingToken });
      expect(done.response).toEqual({ key });
    }
    const w = (await locks('Acquire', { key, owner: 'W', ttlMs: 10_000 })).response;
    expect(w.mode).toBe(MODE.unspecified);
    await locks('Release', { key, owner: 'W', fencingToken: w.fencingToken });
  });
});

describe('read grants on a store without read locks (PostgreSQL advisory mode)', () => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(`${PG_URL}?mode=advisory&schema=${advisorySchema}`, [
      '--grpc-port',
      '0',
    ]);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  it('refuses mode read with 400 / INVALID_ARGUMENT naming mode; write still works', async () => {
    const key = uniqueKey('read-advisory');
    const refused = await call(server.url, lockPath(key, 'acquire'), {
      body: { owner: 'R1', ttlMs: 10_000, mode: 'read' },
    });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'mode' });
    expect(refused.body.message).toMatch(/advisory/);
    const viaGrpc = await failure(
      unary(grpc.locks, 'Acquire', { key, owner: 'R1', ttlMs: 10_000, mode: MODE.read }),
    );
    expect([viaGrpc.code, viaGrpc.errorCode, viaGrpc.field]).toEqual([
      status.INVALID_ARGUMENT,
      'ERR_INVALID_ARGUMENT',
      'mode',
    ]);
    const multi = await call(server.url, '/v1/locks/acquire-all', {
      body: { keys: [key, `${key}:2`], owner: 'R1', ttlMs: 10_000, mode: 'read' },
    });
    expect([multi.status, multi.body.field]).toEqual([400, 'mode']);
    // Nothing was taken by the refused acquires.
    const info = await call(server.url, lockPath(key));
    expect(info.body.holder).toBeNull();
    const write = await call(server.url, lockPath(key, 'acquire'), {
      body: { owner: 'W', ttlMs: 10_000, mode: 'write' },
    });
    expect(write.status).toBe(200);
    const done = await call(server.url, lockPath(key, 'release'), {
      body: { owner: 'W', fencingToken: write.body.fencingToken },
    });
    expect(done.body).toEqual({ key, outcome: 'released' });
  });
});
