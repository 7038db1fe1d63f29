/**
 * `GET /v1/locks`: the held keys under a prefix through the sidecar, on the embedded store (held
 * by a locker of this process on the same file) and on PostgreSQL's advisory mode: entries as `locker.list` gives them (tokens as decimal strings), `limit` and the cursor to
 * resume with, bad query values answered 400 naming the field before the store is asked.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { PG_URL } from '../../helpers/engines.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  type ServerProcess,
  serveStore,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);

describe('GET /v1/locks (SQLite)', () => {
  const store = `sqlite:${join(mkdtempSync(join(tmpdir(), 'fencelock-list-')), 'locks.db')}`;
  const locker = createLocker(store);
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore(store, ['--grpc-port', '0']);
    grpc = grpcClients(server.grpcAddress!);
  });
  afterAll(async () => {
    grpc?.close();
    await locker.close();
    expect(await server?.stop()).toBe(0);
  });

  const list = (query: string) => call(server.url, `/v1/locks${query}`);

  it('answers the held keys under the prefix, a page at a time, with the cursor to go on', async () => {
    const prefix = `${uniqueKey('list')}:`;
    const keys = ['a', 'b', 'c', 'd', 'e'].map((s) => `${prefix}${s}`);
    const leases: Lease[] = await Promise.all(
      keys.map((k) => locker.acquire(k, { ttlMs: 20_000 })),
    );
    const reader = await locker.acquire(`${prefix}r`, { ttlMs: 20_000, mode: 'read' });
    const permit = await locker.semaphore(`${prefix}a`, { permits: 2 }).acquire({ ttlMs: 20_000 });
    try {
      const all = await list(`?prefix=${encodeURIComponent(prefix)}`);
      expect(all.status).toBe(200);
      expect(all.body.cursor).toBeNull();
      expect(all.body.locks.map((l: { key: string; mode: string }) => [l.key, l.mode])).toEqual([
        ...keys.map((k) => [k, 'write']),
        [`${prefix}r`, 'read'],
        [`${prefix}a`, 'permits'],
      ]);
      expect(all.body.locks[0]).toEqual({
        key: keys[0],
        mode: 'write',
        holders: [
          {
            owner: leases[0]!.owner,
            fencingToken: String(leases[0]!.fencingToken),
            ttlMs: expect.any(Number),
          },
        ],
        waiters: 0,
      });
      expect(all.body.locks[6]).toMatchObject({
        permits: 2,
        holders: [{ owner: permit.owner, fencingToken: String(permit.fencingToken) }],
      });

      const seen: string[] = [];
      let cursor = '';
      for (let i = 0; i < 10; i++) {
        const page = await list(
          `?prefix=${encodeURIComponent(prefix)}&limit=2&cursor=${encodeURIComponent(cursor)}`,
        );
        expect(page.status).toBe(200);
        expect(page.body.locks.length).toBeLessThanOrEqual(2);
        seen.push(
          ...page.body.locks.map((l: { key: string; mode: string }) => `${l.key} ${l.mode}`),
        );
        if (page.body.cursor === null) break;
        cursor = page.body.cursor;
      }
      expect(seen).toEqual(
        all.body.locks.map((l: { key: string; mode: string }) => `${l.key} ${l.mode}`),
      );
    } finally {
      await Promise.all([...leases, reader, permit].map((l) => l.release()));
    }
    expect((await list(`?prefix=${encodeURIComponent(prefix)}`)).body).toEqual({
      locks: [],
      cursor: null,
    });
  });

  it('gRPC List: the same entries, an empty cursor at the end, bad values named', async () => {
    const prefix = `${uniqueKey('grpc-list')}:`;
    const lease = await locker.acquire(`${prefix}k`, { ttlMs: 20_000 });
    const permit = await locker.semaphore(`${prefix}k`, { permits: 3 }).acquire({ ttlMs: 20_000 });
    try {
      const { response } = await unary(grpc.locks, 'List', { prefix, limit: 0, cursor: '' });
      expect(response).toEqual({
        locks: [
          {
            key: `${prefix}k`,
            mode: 'write',
            permits: 0,
            holders: [
              {
                owner: lease.owner,
                fencingToken: String(lease.fencingToken),
                ttlMs: expect.any(Number),
              },
            ],
            waiters: 0,
          },
          {
            key: `${prefix}k`,
            mode: 'permits',
            permits: 3,
            holders: [
              {
                owner: permit.owner,
                fencingToken: String(permit.fencingToken),
                ttlMs: expect.any(Number),
              },
            ],
            waiters: 0,
          },
        ],
        cursor: '',
      });
      const first = await unary(grpc.locks, 'List', { prefix, limit: 1, cursor: '' });
      expect(first.response.locks).toHaveLength(1);
      expect(first.response.cursor).not.toBe('');
      const rest = await unary(grpc.locks, 'List', {
        prefix,
        limit: 5,
        cursor: first.response.cursor,
      });
      expect(rest.response.locks.map((l: { mode: string }) => l.mode)).toEqual(['permits']);
    } finally {
      await Promise.all([lease.release(), permit.release()]);
    }
    const refused = await failure(
      unary(grpc.locks, 'List', { prefix: '', limit: 1001, cursor: '' }),
    );
    expect(refused).toMatchObject({ code: status.INVALID_ARGUMENT, field: 'limit' });
  });

  it('refuses bad query values with 400 naming the field', async () => {
    for (const [query, field] of [
      ['?limit=0', 'limit'],
      ['?limit=1001', 'limit'],
      ['?limit=ten', 'limit'],
      ['?cursor=nonsense', 'cursor'],
      ['?prefix=a%00b', 'prefix'],
      ['?other=1', 'other'],
    ] as const) {
      const answer = await list(query);
      expect(answer.status, query).toBe(400);
      expect(answer.body, query).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT' });
      if (field !== 'other') expect(answer.body.field, query).toBe(field);
    }
  });
});

describe("GET /v1/locks on PostgreSQL's advisory mode", () => {
  let server: ServerProcess;
  const url = `${PG_URL}?mode=advisory`;
  beforeAll(async () => {
    server = await serveStore(url);
  });
  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
  });

  it('lists the keys whose holder’s session holds the advisory lock', async () => {
    const holder = createLocker(url);
    try {
      const prefix = `list-advisory:${Math.random().toString(16).slice(2)}:`;
      const lease = await holder.acquire(`${prefix}job`, { ttlMs: 20_000 });
      const answer = await call(server.url, `/v1/locks?prefix=${encodeURIComponent(prefix)}`);
      expect(answer.status).toBe(200);
      expect(answer.body.locks).toEqual([
        expect.objectContaining({ key: `${prefix}job`, mode: 'write', waiters: 0 }),
      ]);
      expect(answer.body.locks[0].holders[0]).toMatchObject({
        owner: lease.owner,
        fencingToken: String(lease.fencingToken),
      });
      await lease.release();
    } finally {
      await holder.close();
    }
  });
});
