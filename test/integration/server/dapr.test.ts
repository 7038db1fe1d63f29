/**
 * Dapr's distributed-lock API on the sidecar: request and response shapes, unlock statuses,
 * validation (400 `ERR_MALFORMED_REQUEST` naming the field), store names (400
 * `ERR_LOCK_STORE_NOT_FOUND`), bodies read as JSON whatever their Content-Type, and the TTL the
 * engine applies. A `fencelock serve` process per store (the real Redis, a SQLite file, etcd,
 * ZooKeeper) on a loopback port. Engine failures: `private-redis.test.ts`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import { MAX_TIMER_MS } from '../../../packages/fencelock/src/index.js';
import { useNamespace as useEtcdNamespace } from '../etcd/support.js';
import type { StoreHarness } from '../handed/stores.js';
import { useNamespace as useZkNamespace } from '../zookeeper/support.js';
import { HARNESSED_STORES } from './harnessed-stores.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  dropRedisKeys,
  type ServerProcess,
  serveStore,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

describe.each(HARNESSED_STORES)('Dapr lock API ($name)', ({ make }) => {
  let harness: StoreHarness;
  let server: ServerProcess;
  let base: string;

  beforeAll(async () => {
    const store = make();
    harness = store.harness;
    server = await serveStore(store.url());
    base = server.url;
  });

  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
    await harness?.close();
  });

  const lock = (body: unknown, store = 'lockstore') =>
    call(base, `/v1.0-alpha1/lock/${store}`, { body });
  const unlock = (body: unknown, store = 'lockstore') =>
    call(base, `/v1.0-alpha1/unlock/${store}`, { body });

  it('lock answers { success: true } with the token in a header, then false for another owner', async () => {
    const resourceId = uniqueKey('dapr-lock');
    const first = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 60 });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ success: true });
    expect(first.headers.get('content-type')).toMatch(/^application\/json/);
    // A decimal string: '1' on the SQLite store, the server clock in µs on Redis.
    const token = first.headers.get('fencelock-fencing-token');
    expect(token).toMatch(/^[1-9][0-9]*$/);
    expect(first.headers.get('fencelock-ttl-ms')).toBe('60000');

    const other = await lock({ resourceId, lockOwner: 'luke', expiryInSeconds: 60 });
    expect(other.status).toBe(200);
    expect(other.body).toEqual({ success: false });
    expect(other.headers.get('fencelock-fencing-token')).toBeNull();

    // The engine holds it for vader's owner id.
    const raw = await harness.rawLease(resourceId);
    expect(raw?.owner).toBe(ownerIdFor('vader', resourceId));
    expect(raw?.token).toBe(BigInt(token!));

    // The same owner again: idempotent, same token, TTL restarted.
    const again = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 30 });
    expect(again.body).toEqual({ success: true });
    expect(again.headers.get('fencelock-fencing-token')).toBe(token);
    expect((await unlock({ resourceId, lockOwner: 'vader' })).body).toEqual({ status: 0 });
  });

  it('unlock answers status 0 released, 1 no such lock, 2 another owner — all with HTTP 200', async () => {
    const resourceId = uniqueKey('dapr-unlock');
    const vader = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 60 });
    expect(vader.body).toEqual({ success: true });

    const foreign = await unlock({ resourceId, lockOwner: 'luke' });
    expect(foreign.status).toBe(200);
    expect(foreign.body).toEqual({ status: 2 });
    // Nothing of vader's was deleted.
    expect((await harness.rawLease(resourceId))?.owner).toBe(ownerIdFor('vader', resourceId));

    const own = await unlock({ resourceId, lockOwner: 'vader' });
    expect(own.status).toBe(200);
    expect(own.body).toEqual({ status: 0 });
    expect(await harness.rawLease(resourceId)).toBeNull();

    const gone = await unlock({ resourceId, lockOwner: 'vader' });
    expect(gone.status).toBe(200);
    expect(gone.body).toEqual({ status: 1 });

    // Free again: luke gets it, with a higher fencing token.
    const luke = await lock({ resourceId, lockOwner: 'luke', expiryInSeconds: 60 });
    expect(luke.body).toEqual({ success: true });
    expect(BigInt(luke.headers.get('fencelock-fencing-token')!)).toBeGreaterThan(
      BigInt(vader.headers.get('fencelock-fencing-token')!),
    );
    await unlock({ resourceId, lockOwner: 'luke' });
  });

  it('applies expiryInSeconds as seconds: 2 s is an engine TTL in (1000, 2000] ms (T07)', async () => {
    const resourceId = uniqueKey('dapr-ttl');
    const answer = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 2 });
    expect(answer.headers.get('fencelock-ttl-ms')).toBe('2000');
    const raw = await harness.rawLease(resourceId);
    expect(raw!.ttlMs).toBeGreaterThan(1000);
    expect(raw!.ttlMs).toBeLessThanOrEqual(2000);
    await unlock({ resourceId, lockOwner: 'vader' });
  });

  const INVALID_EXPIRY: readonly [string, string][] = [
    ['0', '0'],
    ['-1', '-1'],
    ['123.45', '123.45'],
    ['"60" (a string)', '"60"'],
    ['2**53', String(2 ** 53)],
    ['1e999 (Infinity once parsed)', '1e999'],
    ['null', 'null'],
    [
      `${Math.floor(MAX_TIMER_MS / 1000) + 1} (past the longest TTL)`,
      String(Math.floor(MAX_TIMER_MS / 1000) + 1),
    ],
  ];

  it.each(INVALID_EXPIRY)(
    'refuses expiryInSeconds %s with 400 ERR_MALFORMED_REQUEST naming the field (T06)',
    async (_label, json) => {
      const resourceId = uniqueKey('dapr-t06');
      const answer = await call(base, '/v1.0-alpha1/lock/lockstore', {
        raw: `{"resourceId":${JSON.stringify(resourceId)},"lockOwner":"vader","expiryInSeconds":${json}}`,
      });
      expect(answer.status).toBe(400);
      expect(answer.body.errorCode).toBe('ERR_MALFORMED_REQUEST');
      expect(answer.body.field).toBe('expiryInSeconds');
      expect(answer.body.message).toContain('expiryInSeconds');
      expect(answer.body.message).toContain('[1, 2147483]');
      expect(await harness.rawLease(resourceId)).toBeNull();
      expect(await harness.rawFence(resourceId)).toBeNull();
    },
  );

  it.each([
    ['no resourceId', { lockOwner: 'vader', expiryInSeconds: 5 }, 'resourceId'],
    [
      'an empty resourceId',
      { resourceId: '', lockOwner: 'vader', expiryInSeconds: 5 },
      'resourceId',
    ],
    [
      'a numeric resourceId',
      { resourceId: 7, lockOwner: 'vader', expiryInSeconds: 5 },
      'resourceId',
    ],
    [
      'a resourceId over 1024 UTF-8 bytes',
      { resourceId: 'é'.repeat(600), lockOwner: 'vader', expiryInSeconds: 5 },
      'resourceId',
    ],
    ['no lockOwner', { resourceId: 'x', expiryInSeconds: 5 }, 'lockOwner'],
    ['an empty lockOwner', { resourceId: 'x', lockOwner: '', expiryInSeconds: 5 }, 'lockOwner'],
    ['no expiryInSeconds', { resourceId: 'x', lockOwner: 'vader' }, 'expiryInSeconds'],
    ['an array body', [1, 2], 'body'],
  ])(
    'refuses a lock with %s: 400 ERR_MALFORMED_REQUEST naming the field',
    async (_label, body, field) => {
      const answer = await lock(body);
      expect(answer.status).toBe(400);
      expect(answer.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field });
      expect(answer.body.message).toContain(field);
    },
  );

  it('refuses a lockOwner with a lone surrogate (400 naming lockOwner): it would alias the name with U+FFFD', async () => {
    const resourceId = uniqueKey('dapr-surrogate');
    // The holder names itself "\ufffd"; a caller naming itself "\ud800" must not be the same owner.
    expect((await lock({ resourceId, lockOwner: '\ufffd', expiryInSeconds: 30 })).body).toEqual({
      success: true,
    });
    for (const lockOwner of ['\ud800', 'job-\udfff', '\udc00\ud800']) {
      const unlocked = await unlock({ resourceId, lockOwner });
      expect(unlocked.status, JSON.stringify(lockOwner)).toBe(400);
      expect(unlocked.body).toMatchObject({
        errorCode: 'ERR_MALFORMED_REQUEST',
        field: 'lockOwner',
      });
      expect(unlocked.body.message).toContain('well-formed');
      const locked = await lock({ resourceId: `${resourceId}:2`, lockOwner, expiryInSeconds: 30 });
      expect(locked.status).toBe(400);
      expect(locked.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'lockOwner' });
    }
    expect(await harness.rawLease(`${resourceId}:2`)).toBeNull();
    // The holder is untouched; a surrogate pair (one code point) is a fine name.
    expect(await harness.rawLease(resourceId)).not.toBeNull();
    expect((await unlock({ resourceId, lockOwner: '\ufffd' })).body).toEqual({ status: 0 });
    expect(
      (await lock({ resourceId, lockOwner: 'job-\ud83d\udd12', expiryInSeconds: 30 })).body,
    ).toEqual({ success: true });
    expect((await unlock({ resourceId, lockOwner: 'job-\ud83d\udd12' })).body).toEqual({
      status: 0,
    });
  });

  it('refuses an unlock without lockOwner, malformed JSON and an empty body with 400 ERR_MALFORMED_REQUEST', async () => {
    const noOwner = await unlock({ resourceId: 'x' });
    expect(noOwner.status).toBe(400);
    expect(noOwner.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'lockOwner' });
    expect(noOwner.body).not.toHaveProperty('status');
    const malformed = await call(base, '/v1.0-alpha1/lock/lockstore', {
      raw: '{"resourceId":"x","lockOwner":"vader","expiryInSeconds":NaN}',
    });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'body' });
    // Dapr reads an empty body as the empty request, then refuses its empty fields.
    for (const contentType of ['application/json', null]) {
      const empty = await call(base, '/v1.0-alpha1/lock/lockstore', { raw: '', contentType });
      expect(empty.status, String(contentType)).toBe(400);
      expect(empty.body.errorCode).toBe('ERR_MALFORMED_REQUEST');
    }
  });

  it('refuses a body that is not valid UTF-8 (a lenient decoding would make k\\xFF and k\\xFE one key)', async () => {
    const resourceId = uniqueKey('dapr-utf8');
    const bytes = (tail: number) =>
      new Uint8Array([
        ...new TextEncoder().encode(`{"resourceId":"${resourceId}`),
        tail,
        ...new TextEncoder().encode('","lockOwner":"vader","expiryInSeconds":30}'),
      ]);
    for (const tail of [0xff, 0xfe, 0xc0]) {
      const answer = await call(base, '/v1.0-alpha1/lock/lockstore', { raw: bytes(tail) });
      expect(answer.status).toBe(400);
      expect(answer.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'body' });
    }
    expect(await harness.rawLease(`${resourceId}\uFFFD`)).toBeNull();
  });

  it('reads the body as JSON whatever its Content-Type, as Dapr does (curl -d sends a form type)', async () => {
    const resourceId = uniqueKey('dapr-content-type');
    const json = (value: unknown) => JSON.stringify(value);
    const form = await call(base, '/v1.0-alpha1/lock/lockstore', {
      raw: json({ resourceId, lockOwner: 'vader', expiryInSeconds: 30 }),
      contentType: 'application/x-www-form-urlencoded',
    });
    expect(form.status).toBe(200);
    expect(form.body).toEqual({ success: true });
    expect(form.headers.get('fencelock-fencing-token')).toMatch(/^[1-9][0-9]*$/);
    expect((await harness.rawLease(resourceId))?.owner).toBe(ownerIdFor('vader', resourceId));
    const text = await call(base, '/v1.0-alpha1/lock/lockstore', {
      raw: json({ resourceId, lockOwner: 'luke', expiryInSeconds: 30 }),
      contentType: 'text/plain',
    });
    expect(text.body).toEqual({ success: false });
    const none = await call(base, '/v1.0-alpha1/unlock/lockstore', {
      raw: json({ resourceId, lockOwner: 'vader' }),
      contentType: null,
    });
    expect(none.status).toBe(200);
    expect(none.body).toEqual({ status: 0 });
    expect(await harness.rawLease(resourceId)).toBeNull();
    // A real form body is not JSON: 400, never 415.
    const notJson = await call(base, '/v1.0-alpha1/lock/lockstore', {
      raw: `resourceId=${resourceId}&lockOwner=vader&expiryInSeconds=5`,
      contentType: 'application/x-www-form-urlencoded',
    });
    expect(notJson.status).toBe(400);
    expect(notJson.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'body' });
    expect(await harness.rawLease(resourceId)).toBeNull();
  });

  it('answers 400 ERR_LOCK_STORE_NOT_FOUND for another store name, as Dapr does, and 404 for another route', async () => {
    const resourceId = uniqueKey('dapr-store');
    const other = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 5 }, 'redisStore');
    expect(other.status).toBe(400);
    expect(other.body.errorCode).toBe('ERR_LOCK_STORE_NOT_FOUND');
    expect(other.body.message).toContain('redisStore');
    const otherUnlock = await unlock({ resourceId, lockOwner: 'vader' }, 'redisStore');
    expect(otherUnlock.status).toBe(400);
    expect(otherUnlock.body.errorCode).toBe('ERR_LOCK_STORE_NOT_FOUND');
    expect(await harness.rawLease(resourceId)).toBeNull();
    const badPath = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 5 }, '%E0%A4%A');
    expect(badPath.status).toBe(400);
    expect(badPath.body).toMatchObject({ errorCode: 'ERR_MALFORMED_REQUEST', field: 'storeName' });
    const unknownRoute = await call(base, '/v1.0/state/lockstore');
    expect(unknownRoute.status).toBe(404);
    expect(unknownRoute.body.errorCode).toBe('ERR_NOT_FOUND');
  });

  it('ignores unknown fields in Dapr bodies, as Dapr does', async () => {
    const resourceId = uniqueKey('dapr-extra');
    const answer = await lock({ resourceId, lockOwner: 'vader', expiryInSeconds: 5, extra: 1 });
    expect(answer.body).toEqual({ success: true });
    expect((await unlock({ resourceId, lockOwner: 'vader', extra: true })).body).toEqual({
      status: 0,
    });
  });
});

const etcd = useEtcdNamespace('sidecar-dapr');
const zk = useZkNamespace('sidecar-dapr');

describe.each([
  { name: 'etcd', url: () => etcd.url },
  { name: 'zookeeper', url: () => zk.url },
])('one lockOwner on several resources ($name: contenders are tracked by owner id)', ({ url }) => {
  let server: ServerProcess;

  beforeAll(async () => {
    server = await serveStore(url());
  });

  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
  });

  it('locks and unlocks each resource on its own', async () => {
    const base = server.url;
    const [r1, r2] = [uniqueKey('multi-1'), uniqueKey('multi-2')];
    const lock = (resourceId: string) =>
      call(base, '/v1.0-alpha1/lock/lockstore', {
        body: { resourceId, lockOwner: 'app-1', expiryInSeconds: 30 },
      });
    const unlock = (resourceId: string, lockOwner = 'app-1') =>
      call(base, '/v1.0-alpha1/unlock/lockstore', { body: { resourceId, lockOwner } });
    expect((await lock(r1)).body).toEqual({ success: true });
    expect((await lock(r2)).body).toEqual({ success: true });
    const info = await call(base, `/v1/locks/${encodeURIComponent(r1)}?owner=app-1`);
    expect(info.body.heldByOwner).toBe(true);
    expect(info.body.holder.ownerId).toBe(ownerIdFor('app-1', r1));
    expect((await unlock(r1, 'app-2')).body).toEqual({ status: 2 });
    expect((await unlock(r1)).body).toEqual({ status: 0 });
    expect((await unlock(r2)).body).toEqual({ status: 0 });
    expect((await unlock(r2)).body).toEqual({ status: 1 });
  });
});
