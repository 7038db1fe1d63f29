/**
 * Leader elections through the sidecar: `/v1/elections/{name}/{campaign,renew,proclaim,resign}`,
 * `GET /v1/elections/{name}` and its Server-Sent Events (`/observe`), and the same as
 * fencelock.v1.Locks' Campaign, RenewLeadership, Proclaim, Resign, Leader and the streaming
 * Observe. A campaign waits server-side and is granted on the leader's resign with a greater
 * term, a caller that hangs up leaves the line, observers see each change, a candidate's owner
 * id is never its lock's, a 64 KiB value fits, and bad input is refused before any engine call
 * (by a sidecar whose store cannot be opened). A `fencelock serve` process over a SQLite file;
 * the last block runs the factory in this process, to see that a disconnected observer leaves no
 * watch or timer behind.
 */
import { type ClientReadableStream, Metadata, type ServiceError, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ownerIdFor } from '../../../packages/cli/src/server/index.js';
import { candidateIdFor } from '../../../packages/cli/src/server/owner.js';
import { SSE_HEARTBEAT_MS } from '../../../packages/cli/src/server/routes/event-stream.js';
import type { ElectionWatch } from '../../../packages/fencelock/src/index.js';
import { settledWithin } from '../../helpers/promises.js';
import { sqliteHarness } from '../handed/stores.js';
import { failure, type GrpcClients, grpcClients, unary } from './grpc-support.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  lockPath,
  openEvents,
  type ServerProcess,
  serveStore,
  sleep,
  startInProcess,
  trackIntervals,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);

/** `/v1/elections/<name>[/<action>]` with the name URL-encoded. */
function electionPath(name: string, action?: string): string {
  return `/v1/elections/${encodeURIComponent(name)}${action ? `/${action}` : ''}`;
}

/** Poll `check` until it returns something other than undefined, or fail after `timeoutMs`. */
async function until<T>(check: () => T | undefined, timeoutMs = 5_000, what = 'a condition') {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const found = check();
    if (found !== undefined) return found;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** A server stream of a gRPC client: its messages, and how it ended. */
interface GrpcStream {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary message fields
  readonly messages: any[];
  readonly ended: Promise<{ code: number; details: string }>;
  cancel(): void;
}

function grpcStream(client: unknown, method: string, request: object): GrpcStream {
  const fn = (client as Record<string, (r: object, m: Metadata) => ClientReadableStream<unknown>>)[
    method
  ]!;
  const stream = fn.call(client, request, new Metadata());
  // biome-ignore lint/suspicious/noExplicitAny: see GrpcStream
  const messages: any[] = [];
  stream.on('data', (message) => messages.push(message));
  const ended = new Promise<{ code: number; details: string }>((resolve) => {
    stream.on('error', (error: ServiceError) => resolve(error));
    stream.on('status', (s) => resolve(s));
  });
  return { messages, ended, cancel: () => stream.cancel() };
}

describe('/v1/elections and fencelock.v1.Locks elections (sqlite)', () => {
  let harness: ReturnType<typeof sqliteHarness>;
  let server: ServerProcess;
  let base: string;
  let grpc: GrpcClients;

  beforeAll(async () => {
    harness = sqliteHarness();
    server = await serveStore(`sqlite:${harness.db.name}`, [
      '--grpc-port',
      '0',
      '--max-wait',
      '10000',
    ]);
    base = server.url;
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
    await harness?.close();
  });

  const post = (name: string, action: string, body: unknown, signal?: AbortSignal) =>
    call(base, electionPath(name, action), { body, ...(signal ? { signal } : {}) });
  const leaderOf = (name: string) => call(base, electionPath(name));
  /** Reads the leader until it counts `count` candidates (a campaign lines up after its call). */
  const candidatesReach = async (name: string, count: number) => {
    const deadline = performance.now() + 5_000;
    for (;;) {
      const seen = (await leaderOf(name)).body.leader?.candidates;
      if (seen === count || performance.now() > deadline) return seen;
      await sleep(20);
    }
  };
  const locks = (method: string, request: object, options = {}) =>
    unary(grpc.locks, method, request, options);

  it('campaign → leader → proclaim → renew → resign, with the term as a decimal string', async () => {
    const name = uniqueKey('round-trip');
    const won = await post(name, 'campaign', { owner: 'A', value: 'http://a:80', ttlMs: 5_000 });
    expect(won.status).toBe(200);
    expect(won.body).toEqual({
      name,
      owner: 'A',
      ownerId: candidateIdFor('A', name),
      term: expect.stringMatching(/^[1-9][0-9]*$/),
      ttlMs: 5_000,
      value: 'http://a:80',
    });
    const { term } = won.body;
    // A candidate's owner id is not the id of the same caller's lock of that name.
    expect(won.body.ownerId).not.toBe(ownerIdFor('A', name));

    const seen = await leaderOf(name);
    expect(seen.status).toBe(200);
    expect(seen.body).toEqual({
      name,
      leader: {
        ownerId: candidateIdFor('A', name),
        term,
        value: 'http://a:80',
        ttlMs: expect.any(Number),
        candidates: 1,
      },
    });
    expect(seen.body.leader.ttlMs).toBeGreaterThan(3_000);
    expect(seen.body.leader.ttlMs).toBeLessThanOrEqual(5_000);

    const proclaimed = await post(name, 'proclaim', { owner: 'A', term, value: 'http://a:81' });
    expect(proclaimed.status).toBe(200);
    expect(proclaimed.body).toEqual({ name, outcome: 'proclaimed' });
    expect((await leaderOf(name)).body.leader).toMatchObject({ term, value: 'http://a:81' });

    const renewed = await post(name, 'renew', { owner: 'A', term, ttlMs: 20_000 });
    expect(renewed.status).toBe(200);
    expect(renewed.body).toEqual({
      name,
      owner: 'A',
      ownerId: candidateIdFor('A', name),
      term,
      ttlMs: 20_000,
    });
    expect((await leaderOf(name)).body.leader.ttlMs).toBeGreaterThan(15_000);

    // The lock of the same name is another object: A can take it, and its lock routes do not
    // reach the leadership.
    const lock = await call(base, lockPath(name, 'acquire'), {
      body: { owner: 'A', ttlMs: 5_000 },
    });
    expect(lock.status).toBe(200);
    expect(lock.body.ownerId).toBe(ownerIdFor('A', name));
    expect(
      (await call(base, lockPath(name, 'release'), { body: { owner: 'A', fencingToken: term } }))
        .body.outcome,
    ).toBe('not-owner');
    expect((await leaderOf(name)).body.leader.term).toBe(term);

    const resigned = await post(name, 'resign', { owner: 'A', term });
    expect(resigned.status).toBe(200);
    expect(resigned.body).toEqual({ name, outcome: 'released' });
    expect((await leaderOf(name)).body).toEqual({ name, leader: null });

    // A leader no more: refusals are answers (404 not-held), as for a lock's renew / release.
    for (const [action, body] of [
      ['resign', { owner: 'A', term }],
      ['proclaim', { owner: 'A', term, value: 'late' }],
      ['renew', { owner: 'A', term, ttlMs: 5_000 }],
    ] as const) {
      const late = await post(name, action, body);
      expect(late.status, action).toBe(404);
      expect(late.body).toMatchObject({ errorCode: 'ERR_LOCK_NOT_HELD', outcome: 'not-held' });
      expect(late.body.message).toContain(`${action} of election "${name}"`);
    }
    expect((await leaderOf(name)).body.leader).toBeNull();
    await call(base, lockPath(name, 'release'), {
      body: { owner: 'A', fencingToken: lock.body.fencingToken },
    });
  });

  it('a second campaign waits, and is granted on resign with a greater term', async () => {
    const name = uniqueKey('handover');
    const a = (await post(name, 'campaign', { owner: 'A', value: 'a', ttlMs: 20_000 })).body;
    const waiting = post(name, 'campaign', { owner: 'B', value: 'b', ttlMs: 20_000 });
    expect(await settledWithin(waiting, 400)).toBe(false);

    // Not the leader: B can neither proclaim, renew nor resign with A's term (409 not-owner).
    for (const [action, body] of [
      ['proclaim', { owner: 'B', term: a.term, value: 'b!' }],
      ['renew', { owner: 'B', term: a.term, ttlMs: 5_000 }],
      ['resign', { owner: 'B', term: a.term }],
    ] as const) {
      const refused = await post(name, action, body);
      expect(refused.status, action).toBe(409);
      expect(refused.body).toMatchObject({ errorCode: 'ERR_NOT_LOCK_OWNER', outcome: 'not-owner' });
    }
    // A one-shot campaign is busy; a bounded one times out, as an acquire does.
    const busy = await post(name, 'campaign', { owner: 'C', value: 'c', ttlMs: 5_000, waitMs: 0 });
    expect(busy.status).toBe(409);
    expect(busy.body.errorCode).toBe('ERR_LOCK_BUSY');
    const late = await post(name, 'campaign', {
      owner: 'C',
      value: 'c',
      ttlMs: 5_000,
      waitMs: 200,
    });
    expect(late.status).toBe(409);
    expect(late.body.errorCode).toBe('ERR_LOCK_TIMEOUT');
    expect((await leaderOf(name)).body.leader).toMatchObject({ term: a.term, value: 'a' });

    expect((await post(name, 'resign', { owner: 'A', term: a.term })).status).toBe(200);
    const b = await waiting;
    expect(b.status).toBe(200);
    expect(b.body).toMatchObject({
      name,
      owner: 'B',
      ownerId: candidateIdFor('B', name),
      value: 'b',
    });
    expect(BigInt(b.body.term)).toBeGreaterThan(BigInt(a.term));
    expect((await leaderOf(name)).body.leader).toMatchObject({
      ownerId: candidateIdFor('B', name),
      term: b.body.term,
      value: 'b',
    });
    await post(name, 'resign', { owner: 'B', term: b.body.term });
  });

  it('a caller that hangs up while its campaign waits leaves the line', async () => {
    const name = uniqueKey('hang-up');
    const a = (await post(name, 'campaign', { owner: 'A', value: 'a', ttlMs: 20_000 })).body;
    const controller = new AbortController();
    const waiting = post(
      name,
      'campaign',
      { owner: 'B', value: 'b', ttlMs: 20_000 },
      controller.signal,
    );
    waiting.catch(() => undefined);
    expect(await candidatesReach(name, 2)).toBe(2);
    controller.abort();
    await expect(waiting).rejects.toThrow();
    expect(await candidatesReach(name, 1)).toBe(1);
    expect((await post(name, 'resign', { owner: 'A', term: a.term })).status).toBe(200);
    // Longer than a waiter's longest backoff: a candidate still in line would lead by now.
    await sleep(1_200);
    expect((await leaderOf(name)).body.leader).toBeNull();
  });

  it('observe streams null → leader → new value → next leader as Server-Sent Events', async () => {
    const name = uniqueKey('observe');
    const stream = await openEvents(base, electionPath(name, 'observe'));
    try {
      expect(stream.response.status).toBe(200);
      expect(stream.response.headers.get('content-type')).toMatch(/^text\/event-stream/);
      await until(() => stream.events[0], 5_000, 'the first event');
      expect(stream.events[0]).toEqual({ name, leader: null });

      const a = (await post(name, 'campaign', { owner: 'A', value: 'a1', ttlMs: 20_000 })).body;
      await until(() => stream.events.find((e) => e.leader?.value === 'a1'), 5_000, 'A');
      await post(name, 'proclaim', { owner: 'A', term: a.term, value: 'a2' });
      await until(() => stream.events.find((e) => e.leader?.value === 'a2'), 5_000, "A's a2");
      const waiting = post(name, 'campaign', { owner: 'B', value: 'b1', ttlMs: 20_000 });
      await sleep(200);
      await post(name, 'resign', { owner: 'A', term: a.term });
      const b = (await waiting).body;
      await until(() => stream.events.find((e) => e.leader?.value === 'b1'), 5_000, 'B');

      const leaders = stream.events.filter((e) => e.leader !== null).map((e) => e.leader);
      expect(leaders).toEqual([
        {
          ownerId: candidateIdFor('A', name),
          term: a.term,
          value: 'a1',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
        {
          ownerId: candidateIdFor('A', name),
          term: a.term,
          value: 'a2',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
        {
          ownerId: candidateIdFor('B', name),
          term: b.term,
          value: 'b1',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
      ]);
      // Between A and B, at most the "nobody leads" of A's resign.
      expect(stream.events.length).toBeLessThanOrEqual(5);
      await post(name, 'resign', { owner: 'B', term: b.term });
      await until(() => (stream.events.at(-1)?.leader === null ? true : undefined), 5_000, 'null');
    } finally {
      await stream.close();
    }
  });

  it('observe of a bad name is a JSON 400, not a stream', async () => {
    const answer = await call(base, electionPath('é'.repeat(600), 'observe'));
    expect(answer.status).toBe(400);
    expect(answer.headers.get('content-type')).toMatch(/^application\/json/);
    expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'name' });
  });

  it('a value of 64 KiB fits, however JSON spells it; one byte more is refused naming value', async () => {
    const name = uniqueKey('big-value');
    // 65,536 control characters: 1 UTF-8 byte each, 6 bytes each in JSON (\u0001): 384 KiB.
    const escaped = '\u0001'.repeat(65_536);
    const won = await post(name, 'campaign', { owner: 'A', value: escaped, ttlMs: 5_000 });
    expect(won.status).toBe(200);
    expect((await leaderOf(name)).body.leader.value).toBe(escaped);
    const wide = 'é'.repeat(32_768); // 65,536 UTF-8 bytes
    const proclaimed = await post(name, 'proclaim', {
      owner: 'A',
      term: won.body.term,
      value: wide,
    });
    expect(proclaimed.status).toBe(200);
    expect((await leaderOf(name)).body.leader.value).toBe(wide);
    const over = await post(name, 'proclaim', {
      owner: 'A',
      term: won.body.term,
      value: `${wide}x`,
    });
    expect(over.status).toBe(400);
    expect(over.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'value' });
    expect((await leaderOf(name)).body.leader.value).toBe(wide);
    // Over gRPC too.
    const grpcValue = (await locks('Leader', { name })).response.leader.value;
    expect(grpcValue).toBe(wide);
    await post(name, 'resign', { owner: 'A', term: won.body.term });
  });

  it('gRPC: Campaign → Leader → Proclaim → RenewLeadership → Resign; a waiting Campaign is granted on Resign', async () => {
    const name = uniqueKey('grpc-round-trip');
    expect((await locks('Leader', { name })).response).toEqual({ name, leader: null });
    const a = (await locks('Campaign', { name, owner: 'A', value: 'a1', ttlMs: 20_000 })).response;
    expect(a).toEqual({
      name,
      owner: 'A',
      ownerId: candidateIdFor('A', name),
      term: expect.stringMatching(/^[1-9][0-9]*$/),
      ttlMs: 20_000,
      value: 'a1',
    });
    expect(
      (await locks('Proclaim', { name, owner: 'A', term: a.term, value: 'a2' })).response,
    ).toEqual({ name, outcome: 'proclaimed' });
    expect((await locks('Leader', { name })).response.leader).toEqual({
      ownerId: candidateIdFor('A', name),
      term: a.term,
      value: 'a2',
      ttlMs: expect.any(Number),
      candidates: 1,
    });
    const renewed = (
      await locks('RenewLeadership', { name, owner: 'A', term: a.term, ttlMs: 30_000 })
    ).response;
    expect(renewed).toMatchObject({ name, owner: 'A', term: a.term, ttlMs: 30_000 });

    // One attempt (wait_ms 0) is busy; unset wait_ms waits (up to --max-wait).
    expect(
      await failure(locks('Campaign', { name, owner: 'C', value: 'c', ttlMs: 5_000, waitMs: 0 })),
    ).toMatchObject({ code: status.ABORTED, errorCode: 'ERR_LOCK_BUSY' });
    expect(
      await failure(locks('Campaign', { name, owner: 'C', value: 'c', ttlMs: 5_000, waitMs: 200 })),
    ).toMatchObject({ code: status.DEADLINE_EXCEEDED, errorCode: 'ERR_LOCK_TIMEOUT' });
    const waiting = locks('Campaign', { name, owner: 'B', value: 'b', ttlMs: 20_000 });
    expect(await settledWithin(waiting, 400)).toBe(false);
    expect((await locks('Leader', { name })).response.leader.candidates).toBe(2);
    expect(
      await failure(locks('Proclaim', { name, owner: 'B', term: a.term, value: 'x' })),
    ).toMatchObject({ code: status.FAILED_PRECONDITION, errorCode: 'ERR_NOT_LOCK_OWNER' });
    expect((await locks('Resign', { name, owner: 'A', term: a.term })).response).toEqual({
      name,
      outcome: 'released',
    });
    const b = (await waiting).response;
    expect(b).toMatchObject({ owner: 'B', value: 'b' });
    expect(BigInt(b.term)).toBeGreaterThan(BigInt(a.term));
    expect(
      await failure(locks('RenewLeadership', { name, owner: 'A', term: a.term, ttlMs: 5_000 })),
    ).toMatchObject({ code: status.FAILED_PRECONDITION, errorCode: 'ERR_NOT_LOCK_OWNER' });
    await locks('Resign', { name, owner: 'B', term: b.term });
    expect(await failure(locks('Resign', { name, owner: 'B', term: b.term }))).toMatchObject({
      code: status.NOT_FOUND,
      errorCode: 'ERR_LOCK_NOT_HELD',
    });
  });

  it('gRPC: a cancelled Campaign leaves the line', async () => {
    const name = uniqueKey('grpc-cancel');
    const a = (await locks('Campaign', { name, owner: 'A', value: 'a', ttlMs: 20_000 })).response;
    const cancel = new AbortController();
    const waiting = failure(
      locks('Campaign', { name, owner: 'B', value: 'b', ttlMs: 20_000 }, { signal: cancel.signal }),
    );
    await sleep(300);
    cancel.abort();
    expect((await waiting).code).toBe(status.CANCELLED);
    await locks('Resign', { name, owner: 'A', term: a.term });
    await sleep(1_200);
    expect((await locks('Leader', { name })).response.leader).toBeNull();
  });

  it('gRPC: Observe streams null → leader → new value → next leader', async () => {
    const name = uniqueKey('grpc-observe');
    const stream = grpcStream(grpc.locks, 'Observe', { name });
    try {
      await until(() => stream.messages[0], 5_000, 'the first message');
      expect(stream.messages[0]).toEqual({ name, leader: null });
      const a = (await locks('Campaign', { name, owner: 'A', value: 'a1', ttlMs: 20_000 }))
        .response;
      await until(() => stream.messages.find((m) => m.leader?.value === 'a1'), 5_000, 'A');
      await locks('Proclaim', { name, owner: 'A', term: a.term, value: 'a2' });
      await until(() => stream.messages.find((m) => m.leader?.value === 'a2'), 5_000, 'a2');
      const waiting = locks('Campaign', { name, owner: 'B', value: 'b1', ttlMs: 20_000 });
      await sleep(200);
      await locks('Resign', { name, owner: 'A', term: a.term });
      const b = (await waiting).response;
      await until(() => stream.messages.find((m) => m.leader?.value === 'b1'), 5_000, 'B');
      expect(stream.messages.filter((m) => m.leader !== null).map((m) => m.leader)).toEqual([
        {
          ownerId: candidateIdFor('A', name),
          term: a.term,
          value: 'a1',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
        {
          ownerId: candidateIdFor('A', name),
          term: a.term,
          value: 'a2',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
        {
          ownerId: candidateIdFor('B', name),
          term: b.term,
          value: 'b1',
          ttlMs: expect.any(Number),
          candidates: 1,
        },
      ]);
      await locks('Resign', { name, owner: 'B', term: b.term });
    } finally {
      stream.cancel();
    }
    expect((await stream.ended).code).toBe(status.CANCELLED);
  });
});

/**
 * Bad input is refused before any engine call: this sidecar's store is a SQLite file under
 * `/dev/null`, which cannot be opened, so anything that reached the store would be a 503
 * ERR_BACKEND (UNAVAILABLE), as the first case shows.
 */
describe('bad election input is refused before the store is asked (400 / INVALID_ARGUMENT)', () => {
  let server: ServerProcess;
  let grpc: GrpcClients;

  beforeAll(async () => {
    server = await serveStore('sqlite:/dev/null/elections.db', [
      '--grpc-port',
      '0',
      '--max-wait',
      '10000',
    ]);
    grpc = grpcClients(server.grpcAddress!);
  });

  afterAll(async () => {
    grpc?.close();
    expect(await server?.stop()).toBe(0);
  });

  it('a good request reaches the store, which fails (503 / UNAVAILABLE)', async () => {
    const answer = await call(server.url, electionPath('e', 'campaign'), {
      body: { owner: 'A', value: 'v', ttlMs: 1_000, waitMs: 0 },
    });
    expect(answer.status).toBe(503);
    expect(answer.body.errorCode).toBe('ERR_BACKEND');
    expect(
      await failure(
        unary(grpc.locks, 'Campaign', { name: 'e', owner: 'A', value: 'v', ttlMs: 1_000 }),
      ),
    ).toMatchObject({ code: status.UNAVAILABLE, errorCode: 'ERR_BACKEND' });
  });

  const TERM = '7';
  it.each([
    ['a value that is not a string', 'campaign', { value: 42, ttlMs: 1_000 }, 'value'],
    ['a value with NUL', 'campaign', { value: 'a\u0000b', ttlMs: 1_000 }, 'value'],
    ['a value with a lone surrogate', 'campaign', { value: 'a\ud800', ttlMs: 1_000 }, 'value'],
    [
      'a value of 65,537 UTF-8 bytes',
      'campaign',
      { value: `${'é'.repeat(32_768)}x`, ttlMs: 1_000 },
      'value',
    ],
    ['no value', 'campaign', { ttlMs: 1_000 }, 'value'],
    ['ttlMs 0', 'campaign', { value: 'v', ttlMs: 0 }, 'ttlMs'],
    ['waitMs past --max-wait', 'campaign', { value: 'v', ttlMs: 1_000, waitMs: 10_001 }, 'waitMs'],
    ['an empty owner', 'campaign', { owner: '', value: 'v', ttlMs: 1_000 }, 'owner'],
    ['an unknown field', 'campaign', { value: 'v', ttlMs: 1_000, term: TERM }, 'term'],
    ['a NUL value in proclaim', 'proclaim', { owner: 'A', term: TERM, value: '\u0000' }, 'value'],
    ['term 0', 'proclaim', { owner: 'A', term: '0', value: 'v' }, 'term'],
    ['a numeric term', 'renew', { owner: 'A', term: 7, ttlMs: 1_000 }, 'term'],
    ['a term with a leading zero', 'resign', { owner: 'A', term: '07' }, 'term'],
    ['a negative term', 'resign', { owner: 'A', term: '-7' }, 'term'],
    ['a term past 2^128', 'resign', { owner: 'A', term: '9'.repeat(39) }, 'term'],
    ['no term', 'resign', { owner: 'A' }, 'term'],
    ['no owner', 'renew', { term: TERM, ttlMs: 1_000 }, 'owner'],
  ])('HTTP refuses %s: 400 naming %s', async (_label, action, body, field) => {
    const answer = await call(server.url, electionPath('e', action), { body });
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field });
  });

  it('HTTP refuses a name over 1024 UTF-8 bytes or with NUL: 400 naming name', async () => {
    for (const name of ['é'.repeat(600), 'a\u0000b']) {
      for (const [action, body] of [
        ['campaign', { value: 'v', ttlMs: 1_000 }],
        ['resign', { owner: 'A', term: TERM }],
        [undefined, undefined],
      ] as const) {
        const answer = await call(server.url, electionPath(name, action), body ? { body } : {});
        expect(answer.status, `${action}`).toBe(400);
        expect(answer.body).toMatchObject({ errorCode: 'ERR_INVALID_ARGUMENT', field: 'name' });
      }
    }
  });

  it.each([
    [
      'a value with NUL',
      'Campaign',
      { name: 'e', owner: 'A', value: 'a\u0000b', ttlMs: 1_000 },
      'value',
    ],
    [
      'a value of 65,538 UTF-8 bytes',
      'Campaign',
      { name: 'e', owner: 'A', value: 'é'.repeat(32_769), ttlMs: 1_000 },
      'value',
    ],
    [
      'a value with a lone surrogate',
      'Campaign',
      { name: 'e', owner: 'A', value: 'a\ud800', ttlMs: 1_000 },
      'value',
    ],
    ['an empty name', 'Campaign', { name: '', owner: 'A', value: 'v', ttlMs: 1_000 }, 'name'],
    ['ttl_ms 0', 'Campaign', { name: 'e', owner: 'A', value: 'v', ttlMs: 0 }, 'ttl_ms'],
    [
      'wait_ms past --max-wait',
      'Campaign',
      { name: 'e', owner: 'A', value: 'v', ttlMs: 1_000, waitMs: 10_001 },
      'wait_ms',
    ],
    ['term 0', 'Proclaim', { name: 'e', owner: 'A', term: '0', value: 'v' }, 'term'],
    ['a NUL value', 'Proclaim', { name: 'e', owner: 'A', term: TERM, value: '\u0000' }, 'value'],
    [
      'a term that is not decimal',
      'RenewLeadership',
      { name: 'e', owner: 'A', term: 'x', ttlMs: 1_000 },
      'term',
    ],
    [
      'an empty owner',
      'RenewLeadership',
      { name: 'e', owner: '', term: TERM, ttlMs: 1_000 },
      'owner',
    ],
    ['an empty term', 'Resign', { name: 'e', owner: 'A', term: '' }, 'term'],
    ['a term with a leading zero', 'Resign', { name: 'e', owner: 'A', term: '07' }, 'term'],
    ['an empty name', 'Leader', { name: '' }, 'name'],
  ])(
    'gRPC refuses %s in %s: INVALID_ARGUMENT naming the field',
    async (_label, method, request, field) => {
      const refused = await failure(unary(grpc.locks, method, request));
      expect(refused).toMatchObject({
        code: status.INVALID_ARGUMENT,
        errorCode: 'ERR_INVALID_ARGUMENT',
        field,
      });
    },
  );

  it('gRPC Observe of a bad name ends with INVALID_ARGUMENT', async () => {
    const stream = grpcStream(grpc.locks, 'Observe', { name: '' });
    expect(await stream.ended).toMatchObject({ code: status.INVALID_ARGUMENT });
    expect(stream.messages).toEqual([]);
  });
});

/**
 * `createSidecar` in this process, with the store's `watchElection` counted: an observer that
 * disconnects (HTTP) or cancels (gRPC) leaves no watch on the engine, and no heartbeat timer.
 */
describe('an observer that goes away stops its watch', () => {
  it('SSE disconnect and gRPC cancel each stop the engine watch and the heartbeat; close ends the rest', async () => {
    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}` });
    try {
      const backend = await sidecar.locker.backend();
      const watchElection = backend.watchElection!.bind(backend);
      let active = 0;
      backend.watchElection = async (key, onChange) => {
        const watch: ElectionWatch = await watchElection(key, onChange);
        active += 1;
        let stopped = false;
        return {
          recheckAfterMs: watch.recheckAfterMs,
          stop() {
            if (!stopped) active -= 1;
            stopped = true;
            watch.stop();
          },
        };
      };
      // The streams' heartbeat timers still running.
      const heartbeatsLeft = trackIntervals([SSE_HEARTBEAT_MS]);

      const name = uniqueKey('observer-leak');
      const stream = await openEvents(url, electionPath(name, 'observe'));
      await until(() => stream.events[0], 5_000, 'the first event');
      expect(active).toBe(1);
      expect(heartbeatsLeft()).toBe(1);
      await stream.close();
      await until(() => (active === 0 ? true : undefined), 3_000, 'the watch to stop');
      await until(
        () => (heartbeatsLeft() === 0 ? true : undefined),
        3_000,
        'the heartbeat to stop',
      );

      const grpcAddress = await sidecar.listenGrpc({ port: 0 });
      const clients = grpcClients(grpcAddress);
      try {
        const observed = grpcStream(clients.locks, 'Observe', { name });
        await until(() => observed.messages[0], 5_000, 'the first message');
        expect(active).toBe(1);
        observed.cancel();
        await until(() => (active === 0 ? true : undefined), 3_000, 'the gRPC watch to stop');
        // A shutdown ends the streams still open (OK), with their watches.
        const second = await openEvents(url, electionPath(name, 'observe'));
        const third = grpcStream(clients.locks, 'Observe', { name });
        await until(() => (active === 2 ? true : undefined), 5_000, 'two watches');
        await sidecar.close();
        await second.ended;
        expect((await third.ended).code).toBe(status.OK);
        expect(active).toBe(0);
        expect(heartbeatsLeft()).toBe(0);
      } finally {
        clients.close();
      }
    } finally {
      vi.restoreAllMocks();
      await sidecar.close();
      await harness.close();
    }
  });
});
