/**
 * fencelock's `/v1/locks/{key}` extensions on the sidecar: grants with fencing tokens and
 * effective TTLs, renew / release / inspect by owner and token, scenarios T01 variant c and T06
 * through HTTP, fencelock's own error codes (unchanged by Dapr's), a blocking acquire that
 * returns when the holder releases, and a caller that hangs up while waiting. A `fencelock serve`
 * process per store (the real Redis and a SQLite file) on a loopback port. The last block runs
 * the factory in this process, for what only it can show (see there). Event-driven waiting and
 * engine failures: `private-redis.test.ts`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import { MAX_TIMER_MS, MIN_TTL_MS, ttlRule } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { settledWithin } from '../../helpers/promises.js';
import { redisHarness, type StoreHarness, sqliteHarness } from '../handed/stores.js';
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
  startInProcess,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

describe.each(HARNESSED_STORES)('/v1/locks ($name)', ({ make }) => {
  let harness: StoreHarness;
  let server: ServerProcess;
  let base: string;

  beforeAll(async () => {
    const store = make();
    harness = store.harness;
    server = await serveStore(store.url(), ['--max-wait', '30000']);
    base = server.url;
  });

  afterAll(async () => {
    expect(await server?.stop()).toBe(0);
    await harness?.close();
  });

  const acquire = (key: string, body: unknown, signal?: AbortSignal) =>
    call(base, lockPath(key, 'acquire'), { body, ...(signal ? { signal } : {}) });
  const renew = (key: string, body: unknown) => call(base, lockPath(key, 'renew'), { body });
  const release = (key: string, body: unknown) => call(base, lockPath(key, 'release'), { body });
  const inspect = (key: string, owner?: string) =>
    call(
      base,
      `${lockPath(key)}${owner === undefined ? '' : `?owner=${encodeURIComponent(owner)}`}`,
    );

  it('acquire → inspect → renew → release, with the token as a decimal string', async () => {
    const key = uniqueKey('cycle');
    const granted = await acquire(key, { owner: 'worker-1', ttlMs: 5000 });
    expect(granted.status).toBe(200);
    const token: string = granted.body.fencingToken;
    expect(granted.body).toEqual({
      key,
      owner: 'worker-1',
      ownerId: ownerIdFor('worker-1', key),
      fencingToken: expect.stringMatching(/^[1-9][0-9]*$/),
      ttlMs: 5000,
    });

    const seen = await inspect(key, 'worker-1');
    expect(seen.status).toBe(200);
    expect(seen.body.key).toBe(key);
    expect(seen.body.holder.ownerId).toBe(ownerIdFor('worker-1', key));
    expect(seen.body.holder.fencingToken).toBe(token);
    expect(seen.body.holder.ttlMs).toBeGreaterThan(3000);
    expect(seen.body.holder.ttlMs).toBeLessThanOrEqual(5000);
    expect(seen.body.lastFencingToken).toBe(token);
    expect(seen.body.heldByOwner).toBe(true);
    expect((await inspect(key, 'worker-2')).body.heldByOwner).toBe(false);

    const renewed = await renew(key, { owner: 'worker-1', fencingToken: token, ttlMs: 20_000 });
    expect(renewed.status).toBe(200);
    expect(renewed.body).toEqual({
      key,
      owner: 'worker-1',
      ownerId: ownerIdFor('worker-1', key),
      fencingToken: token,
      ttlMs: 20_000,
    });
    const raw = await harness.rawLease(key);
    expect(raw!.ttlMs).toBeGreaterThan(15_000);

    const released = await release(key, { owner: 'worker-1', fencingToken: token });
    expect(released.status).toBe(200);
    expect(released.body).toEqual({ key, outcome: 'released' });
    const after = await inspect(key);
    // Redis keeps the key's counter; SQLite keeps nothing of a free key.
    expect(after.body).toEqual({
      key,
      holder: null,
      lastFencingToken: harness.lastTokenOutlivesHolder ? token : '0',
    });
  });

  it('makes up an owner name when none is given, and answers it', async () => {
    const key = uniqueKey('no-owner');
    const granted = await acquire(key, { ttlMs: 5000 });
    expect(granted.status).toBe(200);
    expect(granted.body.owner).toMatch(/^[0-9a-f]{32}$/);
    expect(granted.body.ownerId).toBe(ownerIdFor(granted.body.owner, key));
    expect(
      (await release(key, { owner: granted.body.owner, fencingToken: granted.body.fencingToken }))
        .status,
    ).toBe(200);
  });

  it('answers 409 ERR_LOCK_BUSY to a one-shot acquire of a held key', async () => {
    const key = uniqueKey('busy');
    const a = await acquire(key, { owner: 'a', ttlMs: 5000 });
    const busy = await acquire(key, { owner: 'b', ttlMs: 5000 });
    expect(busy.status).toBe(409);
    expect(busy.body.errorCode).toBe('ERR_LOCK_BUSY');
    const timedOut = await acquire(key, { owner: 'b', ttlMs: 5000, waitMs: 150 });
    expect(timedOut.status).toBe(409);
    expect(timedOut.body.errorCode).toBe('ERR_LOCK_TIMEOUT');
    expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('a', key));
    await release(key, { owner: 'a', fencingToken: a.body.fencingToken });
  });

  it('T01 variant c: a late release answers 409 not-owner and leaves the new holder untouched', async () => {
    const k = uniqueKey('t01c');
    // 1. A acquires k with ttlMs 200 (nothing renews a sidecar grant) and sleeps 600 ms.
    const a = await acquire(k, { owner: 'A', ttlMs: 200 });
    expect(a.status).toBe(200);
    await sleep(600);
    // 2. B acquires k with ttlMs 10000.
    const b = await acquire(k, { owner: 'B', ttlMs: 10_000 });
    expect(b.status).toBe(200);
    expect(BigInt(b.body.fencingToken)).toBeGreaterThan(BigInt(a.body.fencingToken));
    // 3. A releases late.
    const late = await release(k, { owner: 'A', fencingToken: a.body.fencingToken });
    expect(late.status).toBe(409);
    expect(late.body.errorCode).toBe('ERR_NOT_LOCK_OWNER');
    expect(late.body.outcome).toBe('not-owner');
    expect(late.body.message).toContain('release');
    expect(late.body.message).toContain(`"${k}"`);
    // k still carries B's owner id and token, with more than 8000 ms left.
    const raw = await harness.rawLease(k);
    expect(raw?.owner).toBe(ownerIdFor('B', k));
    expect(raw?.token).toBe(BigInt(b.body.fencingToken));
    expect(raw!.ttlMs).toBeGreaterThan(8000);
    // A third client cannot get in; B's own release works.
    expect((await acquire(k, { owner: 'C', ttlMs: 1000 })).body.errorCode).toBe('ERR_LOCK_BUSY');
    const own = await release(k, { owner: 'B', fencingToken: b.body.fencingToken });
    expect(own.status).toBe(200);
    expect(own.body.outcome).toBe('released');
    expect(await harness.rawLease(k)).toBeNull();
  });

  it('T01 variant c, b: a late release with no new holder answers 404 not-held and creates nothing', async () => {
    const k = uniqueKey('t01c-b');
    const a = await acquire(k, { owner: 'A', ttlMs: 200 });
    await sleep(600);
    const late = await release(k, { owner: 'A', fencingToken: a.body.fencingToken });
    expect(late.status).toBe(404);
    expect(late.body.errorCode).toBe('ERR_LOCK_NOT_HELD');
    expect(late.body.outcome).toBe('not-held');
    expect(await harness.rawLease(k)).toBeNull();
    expect((await inspect(k)).body).toEqual({
      key: k,
      holder: null,
      lastFencingToken: harness.lastTokenOutlivesHolder ? a.body.fencingToken : '0',
    });
    // Dapr's unlock tells the same cases apart by status.
    const dapr = await call(base, '/v1.0-alpha1/unlock/lockstore', {
      body: { resourceId: k, lockOwner: 'A' },
    });
    expect(dapr.body).toEqual({ status: 1 });
  });

  it('one owner can neither renew nor release another owner’s lease (409)', async () => {
    const key = uniqueKey('foreign');
    const a = await acquire(key, { owner: 'A', ttlMs: 5000 });
    const token = a.body.fencingToken as string;
    const foreignRenew = await renew(key, { owner: 'B', fencingToken: token, ttlMs: 5000 });
    expect(foreignRenew.status).toBe(409);
    expect(foreignRenew.body).toMatchObject({
      errorCode: 'ERR_NOT_LOCK_OWNER',
      outcome: 'not-owner',
    });
    const foreignRelease = await release(key, { owner: 'B', fencingToken: token });
    expect(foreignRelease.status).toBe(409);
    expect(foreignRelease.body.errorCode).toBe('ERR_NOT_LOCK_OWNER');
    // The right owner with a wrong token is refused too.
    const wrongToken = await release(key, { owner: 'A', fencingToken: '99' });
    expect(wrongToken.status).toBe(409);
    expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('A', key));
    expect((await release(key, { owner: 'A', fencingToken: token })).status).toBe(200);
    const late = await renew(key, { owner: 'A', fencingToken: token, ttlMs: 5000 });
    expect(late.status).toBe(404);
    expect(late.body.errorCode).toBe('ERR_LOCK_NOT_HELD');
    expect(await harness.rawLease(key)).toBeNull();
  });

  it('a blocking acquire returns when the holder releases', async () => {
    const key = uniqueKey('blocking');
    const a = await acquire(key, { owner: 'A', ttlMs: 20_000 });
    const waiting = acquire(key, { owner: 'B', ttlMs: 5000, waitMs: 25_000 });
    expect(await settledWithin(waiting, 400)).toBe(false);
    expect((await release(key, { owner: 'A', fencingToken: a.body.fencingToken })).status).toBe(
      200,
    );
    const b = await waiting;
    expect(b.status).toBe(200);
    expect(b.body.owner).toBe('B');
    expect(BigInt(b.body.fencingToken)).toBeGreaterThan(BigInt(a.body.fencingToken));
    expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('B', key));
    await release(key, { owner: 'B', fencingToken: b.body.fencingToken });
  });

  it('a caller that hangs up while waiting stops waiting and is granted nothing', async () => {
    const key = uniqueKey('hang-up');
    const a = await acquire(key, { owner: 'A', ttlMs: 20_000 });
    const controller = new AbortController();
    const waiting = acquire(key, { owner: 'B', ttlMs: 20_000, waitMs: 25_000 }, controller.signal);
    waiting.catch(() => undefined);
    await sleep(200);
    controller.abort();
    await expect(waiting).rejects.toThrow();
    await sleep(200);
    await release(key, { owner: 'A', fencingToken: a.body.fencingToken });
    // Longer than a waiter's longest backoff (500 ms): a waiter still there would hold it now.
    await sleep(1200);
    // B's wait ended with the connection: nobody holds the key, and B was never granted it
    // (where the key's counter stays, it did not move past A's token).
    expect(await harness.rawLease(key)).toBeNull();
    expect((await inspect(key)).body.lastFencingToken).toBe(
      harness.lastTokenOutlivesHolder ? a.body.fencingToken : '0',
    );
  });

  it('a key with slashes, spaces and non-ASCII characters travels URL-encoded', async () => {
    const key = `${uniqueKey('odd')}/orders 42/ünïcødé`;
    const granted = await acquire(key, { owner: 'A', ttlMs: 5000 });
    expect(granted.status).toBe(200);
    expect(granted.body.key).toBe(key);
    expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('A', key));
    expect((await inspect(key)).body.holder.fencingToken).toBe(granted.body.fencingToken);
    expect(
      (await release(key, { owner: 'A', fencingToken: granted.body.fencingToken })).status,
    ).toBe(200);
  });

  const INVALID_TTL: readonly [string, string][] = [
    ['0', '0'],
    ['-1', '-1'],
    ['"1000" (a string)', '"1000"'],
    ['"NaN" (a string)', '"NaN"'],
    ['null', 'null'],
    [`${MIN_TTL_MS - 1} (below the shortest TTL)`, String(MIN_TTL_MS - 1)],
    ['2**53', String(2 ** 53)],
    ['1e999 (Infinity once parsed)', '1e999'],
    [`${MAX_TIMER_MS + 1} (past the longest TTL)`, String(MAX_TIMER_MS + 1)],
  ];

  it.each(INVALID_TTL)(
    'T06: refuses ttlMs %s with 400 ERR_INVALID_ARGUMENT naming ttlMs and its range; nothing reaches the engine',
    async (_label, json) => {
      const key = uniqueKey('t06');
      for (const action of ['acquire', 'renew'] as const) {
        const body =
          action === 'acquire'
            ? `{"owner":"A","ttlMs":${json},"waitMs":5000}`
            : `{"owner":"A","fencingToken":"1","ttlMs":${json}}`;
        const answer = await call(base, lockPath(key, action), { raw: body });
        expect(answer.status, action).toBe(400);
        expect(answer.body.errorCode).toBe('ERR_INVALID_ARGUMENT');
        expect(answer.body.field).toBe('ttlMs');
        expect(answer.body.message).toContain('ttlMs');
        expect(answer.body.message).toContain(ttlRule());
      }
      expect(await harness.rawLease(key)).toBeNull();
      expect(await harness.rawFence(key)).toBeNull();
    },
  );

  it('T06: NaN itself is not JSON: 400 ERR_INVALID_ARGUMENT for the body, nothing reaches the engine', async () => {
    const key = uniqueKey('t06-nan');
    const answer = await call(base, lockPath(key, 'acquire'), {
      raw: '{"owner":"A","ttlMs":NaN}',
    });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'body' });
    expect(await harness.rawFence(key)).toBeNull();
  });

  it('T06: ttlMs 123.45 is rounded up to 124 ms, reported, and applied by the engine', async () => {
    const key = uniqueKey('t06-round');
    const answer = await acquire(key, { owner: 'A', ttlMs: 123.45 });
    expect(answer.status).toBe(200);
    expect(answer.body.ttlMs).toBe(124);
    const raw = await harness.rawLease(key);
    expect(raw?.owner).toBe(ownerIdFor('A', key));
    expect(raw!.ttlMs).toBeGreaterThan(0);
    expect(raw!.ttlMs).toBeLessThanOrEqual(124);
  });

  it.each([
    [
      'waitMs past the server limit',
      'acquire',
      { owner: 'A', ttlMs: 1000, waitMs: 30_001 },
      'waitMs',
    ],
    ['a negative waitMs', 'acquire', { owner: 'A', ttlMs: 1000, waitMs: -1 }, 'waitMs'],
    ['an unknown field', 'acquire', { owner: 'A', ttlMs: 1000, tll: 5 }, 'tll'],
    ['no ttlMs', 'acquire', { owner: 'A' }, 'ttlMs'],
    ['an empty owner', 'acquire', { owner: '', ttlMs: 1000 }, 'owner'],
    ['a numeric token', 'renew', { owner: 'A', fencingToken: 1, ttlMs: 1000 }, 'fencingToken'],
    ['a token that is not decimal', 'release', { owner: 'A', fencingToken: '0x1' }, 'fencingToken'],
    ['token 0', 'release', { owner: 'A', fencingToken: '0' }, 'fencingToken'],
    ['a token past 2^128', 'release', { owner: 'A', fencingToken: '9'.repeat(39) }, 'fencingToken'],
    ['no token', 'release', { owner: 'A' }, 'fencingToken'],
  ])('refuses %s: 400 naming %s', async (_label, action, body, field) => {
    const key = uniqueKey('bad');
    const answer = await call(base, lockPath(key, action), { body });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field });
    expect(await harness.rawFence(key)).toBeNull();
  });

  it('refuses an owner with a lone surrogate (400 naming owner): it would alias the name with U+FFFD', async () => {
    const key = uniqueKey('surrogate');
    const granted = await acquire(key, { owner: '\ufffd', ttlMs: 30_000 });
    expect(granted.status).toBe(200);
    const fencingToken = granted.body.fencingToken;
    for (const [action, body] of [
      ['acquire', { owner: '\ud800', ttlMs: 30_000 }],
      ['renew', { owner: '\ud800', fencingToken, ttlMs: 30_000 }],
      ['release', { owner: '\ud800', fencingToken }],
      ['release', { owner: 'a\udfffb', fencingToken }],
    ] as const) {
      const answer = await call(base, lockPath(key, action), { body });
      expect(answer.status, `${action} ${JSON.stringify(body.owner)}`).toBe(400);
      expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'owner' });
      expect(answer.body.message).toContain('well-formed');
    }
    // A query string cannot carry a lone surrogate: %ED%A0%80 (U+D800 as UTF-8 bytes) is not
    // valid UTF-8, stays undecoded, and names another owner.
    const inspected = await call(base, `${lockPath(key)}?owner=%ED%A0%80`);
    expect(inspected.body.heldByOwner).toBe(false);
    // The holder kept its lease; a surrogate pair (one code point) is a fine name.
    expect((await inspect(key, '\ufffd')).body.heldByOwner).toBe(true);
    expect((await release(key, { owner: '\ufffd', fencingToken })).status).toBe(200);
    expect((await acquire(key, { owner: '\ud83d\udd12', ttlMs: 30_000 })).status).toBe(200);
  });

  it('refuses a body that is not valid UTF-8 (400 naming body): owner bytes FF and FE would both read as U+FFFD', async () => {
    const key = uniqueKey('utf8-body');
    const granted = await acquire(key, { owner: '\ufffd', ttlMs: 30_000 });
    expect(granted.status).toBe(200);
    const body = (action: string) =>
      new Uint8Array([
        ...new TextEncoder().encode('{"owner":"'),
        0xfe,
        ...new TextEncoder().encode(
          action === 'acquire'
            ? '","ttlMs":30000}'
            : `","fencingToken":"${granted.body.fencingToken}"}`,
        ),
      ]);
    for (const action of ['acquire', 'release']) {
      const answer = await call(base, lockPath(key, action), { raw: body(action) });
      expect(answer.status, action).toBe(400);
      expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'body' });
    }
    // The holder named U+FFFD kept its lease.
    expect((await inspect(key, '\ufffd')).body.heldByOwner).toBe(true);
    expect(
      (await release(key, { owner: '\ufffd', fencingToken: granted.body.fencingToken })).status,
    ).toBe(200);
  });

  it('refuses a key over 1024 UTF-8 bytes with 400 naming key', async () => {
    const answer = await acquire('é'.repeat(600), { owner: 'A', ttlMs: 1000 });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'key' });
  });

  it('refuses a path that is not valid percent-encoded UTF-8 with 400 naming key', async () => {
    for (const path of ['/v1/locks/%E0%A4%A/acquire', '/v1/locks/%ED%A0%80/acquire']) {
      const answer = await call(base, path, { body: { owner: 'A', ttlMs: 1000 } });
      expect(answer.status, path).toBe(400);
      expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'key' });
    }
  });

  it('keeps its own codes: a body not sent as JSON is 415, malformed JSON 400 ERR_INVALID_ARGUMENT', async () => {
    const key = uniqueKey('media-type');
    // text/plain too: JSON sent as text is 415, not a 400 about a string body (it was).
    for (const contentType of [
      'application/x-www-form-urlencoded',
      'text/plain',
      'text/plain; charset=utf-8',
      null,
    ]) {
      for (const [path, body] of [
        [lockPath(key, 'acquire'), { owner: 'A', ttlMs: 1000 }],
        ['/v1/locks/acquire-all', { keys: [key], owner: 'A', ttlMs: 1000 }],
      ] as const) {
        const answer = await call(base, path, { raw: JSON.stringify(body), contentType });
        expect(answer.status, `${path} ${contentType}`).toBe(415);
        expect(answer.body.errorCode).toBe('ERR_UNSUPPORTED_MEDIA_TYPE');
      }
    }
    const malformed = await call(base, lockPath(key, 'acquire'), { raw: '{"owner":' });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'body' });
    expect(await harness.rawFence(key)).toBeNull();
  });

  it('healthz answers without a token; metrics in Prometheus text', async () => {
    expect((await call(base, '/healthz')).body).toEqual({ status: 'ok' });
    const metrics = await call(base, '/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(metrics.text).toContain('# TYPE fencelock_acquire_attempts_total counter');
  });
});

/**
 * `createSidecar` in this process, for what a sidecar process cannot show: that `close()` takes
 * fencelock's metrics out of the caller's registry and leaves no server, socket or timer in the
 * process, and how the factory itself refuses bad options. (SIGTERM of a sidecar process:
 * `process.test.ts`.)
 */
describe('shutdown of an in-process sidecar', () => {
  it('ends a waiting acquire with 503 ERR_SHUTTING_DOWN and closes its store', async () => {
    const harness = redisHarness();
    const { sidecar, url } = await startInProcess({ store: REDIS_URL });
    try {
      const key = uniqueKey('shutdown');
      const a = await call(url, lockPath(key, 'acquire'), { body: { owner: 'A', ttlMs: 20_000 } });
      expect(a.status).toBe(200);
      const waiting = call(url, lockPath(key, 'acquire'), {
        body: { owner: 'B', ttlMs: 20_000, waitMs: 25_000 },
      });
      await sleep(300);
      const closing = sidecar.close();
      const answer = await waiting;
      expect(answer.status).toBe(503);
      expect(answer.body.errorCode).toBe('ERR_SHUTTING_DOWN');
      await closing;
      // A's lease was not released by the shutdown: it ends by its TTL (the sidecar keeps no
      // state). B got nothing.
      expect((await harness.rawLease(key))?.owner).toBe(ownerIdFor('A', key));
      await expect(fetch(`${url}/healthz`)).rejects.toThrow();
      expect(sidecar.registry.getMetricsAsArray()).toHaveLength(0);
    } finally {
      await sidecar.close();
      await harness.close();
    }
  });

  it('leaves no server, socket or timer behind after close', async () => {
    const harness = sqliteHarness();
    const count = () => {
      const counts: Record<string, number> = {};
      for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
      return counts;
    };
    try {
      const before = count();
      const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}` });
      const key = uniqueKey('leaks');
      const a = await call(url, lockPath(key, 'acquire'), { body: { owner: 'A', ttlMs: 5000 } });
      const timedOut = await call(url, lockPath(key, 'acquire'), {
        body: { owner: 'B', ttlMs: 5000, waitMs: 100 },
      });
      expect(timedOut.body.errorCode).toBe('ERR_LOCK_TIMEOUT');
      await call(url, lockPath(key, 'release'), {
        body: { owner: 'A', fencingToken: a.body.fencingToken },
      });
      await call(url, '/metrics');
      await sidecar.close();
      await sleep(200); // the client's side of closed connections
      const after = count();
      for (const resource of ['TCPServerWrap', 'TCPSocketWrap', 'Timeout']) {
        expect(after[resource] ?? 0, resource).toBeLessThanOrEqual(before[resource] ?? 0);
      }
    } finally {
      await harness.close();
    }
  });

  it('refuses to listen beyond loopback without a token', async () => {
    const { createSidecar } = await import('../../../packages/cli/src/server/index.js');
    const sidecar = createSidecar({ store: REDIS_URL });
    try {
      await expect(sidecar.listen({ host: '0.0.0.0', port: 0 })).rejects.toMatchObject({
        code: 'ERR_INVALID_ARGUMENT',
        argument: 'host',
      });
      expect(() => createSidecar({ store: REDIS_URL, token: 'short' })).toThrow(/token/);
    } finally {
      await sidecar.close();
    }
  });

  it.each([
    ['postgres://u:S3cretPw@127.0.0.1:99999/db', 'postgres://u:***@127.0.0.1:99999/db'],
    ['redis://:S3cretPw@127.0.0.1:6390/x', 'redis://:***@127.0.0.1:6390/x'],
    ['postgres://u@127.0.0.1/db?password=S3cretPw#x', 'postgres://u@127.0.0.1/db?password=***#x'],
  ])('refuses the malformed store URL %s without echoing its password', async (store, shown) => {
    const { createSidecar } = await import('../../../packages/cli/src/server/index.js');
    let error: unknown;
    try {
      createSidecar({ store });
    } catch (e) {
      error = e;
    }
    expect(error).toMatchObject({
      code: 'ERR_INVALID_ARGUMENT',
      argument: 'store',
      received: shown,
    });
    expect((error as Error).message).not.toContain('S3cretPw');
    expect((error as Error).message).toContain(JSON.stringify(shown));
  });
});
