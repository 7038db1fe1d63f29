/**
 * PostgreSQL lease mode, leader elections: what the contract cases cannot see.
 * - The layout: the leader's row (owner, term, value) in `fencelock_elections` and the candidates'
 *   line in `fencelock_election_waiters`, apart from the lock and the semaphore of the same key
 *   (each granted beside the leadership; `list` shows no election); nothing left once resigned.
 * - A lost reply is safe (the leader's repeated attempt keeps term and value), `abandon` drops a
 *   leadership whatever its term, and a lapsed leader's old term is refused by proclaim, renew
 *   and release even when the same owner leads again under a new term.
 * - Terms come from the schema's token sequence: greater after the election stood idle with no
 *   row left, after grants of other objects, and from a new backend.
 * - The watch: one LISTEN connection per backend however many watches, onChange at each grant,
 *   proclaim, release and withdrawal of its own key only, none after stop(), no session left
 *   after close(); a dropped LISTEN connection calls the watchers and is armed again.
 * - Without notifications (behind PgBouncer in transaction mode without `listenUrl`) the watch
 *   is a poll and an observer still sees every change.
 * - A schema of the previous version gets the election objects in place; its locks stay.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { parseNotice } from '../../../packages/fencelock/src/backends/postgres/listener.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import {
  type AttemptRequest,
  BackendError,
  createLocker,
  type ElectionLeader,
  type Granted,
  type LeaseRef,
} from '../../../packages/fencelock/src/index.js';
import { PGBOUNCER_URL } from '../../helpers/engines.js';
import { adminPool, dropSchema, eventually, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('election');
const admin = adminPool();
const electionsTable = `"${schema}".fencelock_elections`;
const lineTable = `"${schema}".fencelock_election_waiters`;
const opened: PostgresBackend[] = [];
const extraSchemas: string[] = [];

afterAll(async () => {
  await Promise.all(opened.map((b) => b.close()));
  for (const other of extraSchemas) await admin.query(`DROP SCHEMA IF EXISTS "${other}" CASCADE`);
  await dropSchema(admin, schema);
});

function backend(inSchema = schema, notifications = true): PostgresBackend {
  const made = createPostgresBackend({ url: PG_URL, schema: inSchema, poolSize: 4, notifications });
  opened.push(made as PostgresBackend);
  return made as PostgresBackend;
}

/** A candidate's attempt of `owner` (one hex digit, repeated) with `value`. */
function candidate(
  key: string,
  digit: string,
  value: string,
  ttlMs = 60_000,
  waiting = false,
): AttemptRequest {
  return {
    key,
    owner: digit.repeat(32),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: waiting,
    election: { value },
  };
}

/** Attempt, expecting a grant; the leadership's reference. */
async function grant(on: PostgresBackend, request: AttemptRequest): Promise<LeaseRef> {
  const result = await on.attempt(request);
  expect(result.granted).toBe(true);
  return {
    key: request.key,
    owner: request.owner,
    fencingToken: (result as Granted).token,
    election: true,
  };
}

/** The election's row and line as the server holds them. */
async function stateOf(key: string) {
  const row = await admin.query<{ owner: string; token: string; value: string }>(
    `SELECT owner, token::text AS token, value FROM ${electionsTable} WHERE key = $1`,
    [key],
  );
  const line = await admin.query<{ owner: string }>(
    `SELECT owner FROM ${lineTable} WHERE key = $1 ORDER BY seq`,
    [key],
  );
  return { row: row.rows[0], line: line.rows.map((r) => r.owner) };
}

/** Sessions listening on the channel of `inSchema` now. */
async function listeners(inSchema: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM pg_stat_activity WHERE query = $1`,
    [`LISTEN "fencelock:${inSchema}"`],
  );
  return Number(rows[0]!.n);
}

describe('PostgreSQL leader elections', () => {
  it('keeps the leader with its value in its own table, apart from the lock and the semaphore of the key; line entries are no leaders; nothing left after', async () => {
    const key = `layout:${randomUUID()}`;
    const locker = createLocker(backend());
    const other = createLocker(backend());
    const leading = await locker.election(key).campaign('host-a:1', { ttlMs: 30_000 });
    expect(await stateOf(key)).toEqual({
      row: { owner: leading.owner, token: String(leading.term), value: 'host-a:1' },
      line: [],
    });
    // `list` shows no election.
    const listed: string[] = [];
    for await (const held of other.list({ prefix: key })) listed.push(held.mode);
    expect(listed).toEqual([]);
    // The lock and the semaphore of the same key are other objects: both granted now.
    const lock = await other.tryAcquire(key, { ttlMs: 30_000 });
    const permit = await other.semaphore(key, { permits: 1 }).tryAcquire({ ttlMs: 30_000 });
    expect(lock).not.toBeNull();
    expect(permit).not.toBeNull();
    expect(lock!.fencingToken).toBeGreaterThan(leading.term);
    for await (const held of other.list({ prefix: key })) listed.push(held.mode);
    expect(listed.sort()).toEqual(['permits', 'write']);
    await lock!.release();
    await permit!.release();
    // A waiting candidate stands in the election's line and does not lead.
    const waiting = other.election(key).campaign('host-b:1', { ttlMs: 30_000 });
    expect(await eventually(async () => (await stateOf(key)).line.length === 1)).toBe(true);
    expect((await other.election(key).leader())?.owner).toBe(leading.owner);
    expect(await other.inspect(key)).toMatchObject({ holder: null });
    await leading.resign();
    const next = await waiting;
    expect(await stateOf(key)).toEqual({
      row: { owner: next.owner, token: String(next.term), value: 'host-b:1' },
      line: [],
    });
    await next.resign();
    expect(await stateOf(key)).toEqual({ row: undefined, line: [] });
    await Promise.all([locker.close(), other.close()]);
  });

  it('a lost reply is safe: the leader’s repeated attempt keeps term and value; abandon drops the leadership', async () => {
    const b = backend();
    const key = `retry:${randomUUID()}`;
    const request = candidate(key, 'a', 'first');
    const lease = await grant(b, request);
    expect(await b.proclaim(lease, 'second')).toBe('proclaimed');
    const again = await b.attempt(request);
    expect(again).toMatchObject({ granted: true, token: lease.fencingToken });
    expect(await b.leader(key)).toMatchObject({ owner: request.owner, value: 'second' });
    // Another candidate's single attempt neither leads nor stands in the line.
    expect((await b.attempt(candidate(key, 'b', 'other'))).granted).toBe(false);
    expect((await stateOf(key)).line).toEqual([]);
    await b.abandon(request);
    expect(await b.leader(key)).toBeNull();
    expect(await stateOf(key)).toEqual({ row: undefined, line: [] });
  });

  it('a lapsed term is refused by proclaim, renew and release, also when its owner leads again under a new term', async () => {
    const b = backend();
    const key = `lapse:${randomUUID()}`;
    const request = candidate(key, 'c', 'old', 200);
    const old = await grant(b, request);
    await sleep(300);
    expect(await b.leader(key)).toBeNull();
    expect(await b.proclaim(old, 'stale')).toBe('not-held');
    const renewed = await grant(b, { ...request, ttlMs: 30_000, election: { value: 'new' } });
    expect(renewed.fencingToken).toBeGreaterThan(old.fencingToken);
    expect(await b.proclaim(old, 'stale')).toBe('not-owner');
    expect(await b.renew(old, 30_000)).toEqual({ ok: false, reason: 'not-owner' });
    expect(await b.release(old)).toBe('not-owner');
    expect(await b.leader(key)).toMatchObject({ term: renewed.fencingToken, value: 'new' });
    expect(await b.proclaim(renewed, 'newer')).toBe('proclaimed');
    expect(await b.renew(renewed, 30_000)).toMatchObject({ ok: true });
    expect(await b.release(renewed)).toBe('released');
  });

  it('terms come from the schema’s sequence: greater after the election stood idle with no row left, and from a new backend', async () => {
    const key = `idle:${randomUUID()}`;
    const first = backend();
    const lease = await grant(first, candidate(key, 'd', 'one', 100));
    await sleep(200);
    // The lapsed row is swept: nothing of the election is left on the server.
    await admin.query(`DELETE FROM ${electionsTable} WHERE key = $1`, [key]);
    expect(await stateOf(key)).toEqual({ row: undefined, line: [] });
    await first.close();
    const second = backend();
    const next = await grant(second, candidate(key, 'e', 'two'));
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    const { rows } = await admin.query<{ last: string }>(
      `SELECT last_value::text AS last FROM "${schema}".fencelock_token_seq`,
    );
    expect(next.fencingToken).toBe(BigInt(rows[0]!.last));
    expect(await second.release(next)).toBe('released');
  });

  it('watches share the backend’s one LISTEN connection; each change of the key calls onChange, none after stop(); no session after close()', async () => {
    const own = uniqueSchema('election_watch');
    extraSchemas.push(own);
    const watching = backend(own);
    // Its statements NOTIFY all the same; it does not listen itself.
    const changing = backend(own, false);
    const key = `watch:${randomUUID()}`;
    const calls = { a: 0, b: 0, other: 0 };
    const a = await watching.watchElection(key, () => calls.a++);
    const b = await watching.watchElection(key, () => calls.b++);
    const other = await watching.watchElection(`other:${randomUUID()}`, () => calls.other++);
    expect(a.recheckAfterMs).toBe(30_000);
    expect(await listeners(own)).toBe(1);
    // Armed once LISTEN is confirmed: the listener called every watcher then.
    await sleep(200);
    const base = { ...calls };
    const step = async (what: () => Promise<unknown>) => {
      const before = calls.a;
      await what();
      expect(await eventually(() => calls.a > before)).toBe(true);
    };
    const request = candidate(key, 'f', 'v1');
    let lease: LeaseRef | undefined;
    await step(async () => {
      lease = await grant(changing, request);
    });
    await step(() => changing.proclaim(lease!, 'v2'));
    await step(() => changing.release(lease!));
    await step(() => grant(changing, request));
    await step(() => changing.abandon(request));
    await sleep(200);
    expect(calls.b - base.b).toBe(calls.a - base.a);
    expect(calls.other).toBe(base.other);
    b.stop();
    b.stop();
    const stoppedAt = calls.b;
    await step(() => grant(changing, request));
    await step(() => changing.abandon(request));
    await sleep(200);
    expect(calls.b).toBe(stoppedAt);
    a.stop();
    other.stop();
    expect(await listeners(own)).toBe(1);
    await watching.close();
    expect(await eventually(async () => (await listeners(own)) === 0)).toBe(true);
    await expect(watching.watchElection(key, () => undefined)).rejects.toBeInstanceOf(BackendError);
  });

  it('a dropped LISTEN connection calls the watchers, and the watch is armed again by itself', async () => {
    const own = uniqueSchema('election_drop');
    extraSchemas.push(own);
    const watching = backend(own);
    // Its statements NOTIFY all the same; it does not listen itself.
    const changing = backend(own, false);
    const key = `drop:${randomUUID()}`;
    let calls = 0;
    const watch = await watching.watchElection(key, () => calls++);
    await sleep(200);
    const base = calls;
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`, [
      `LISTEN "fencelock:${own}"`,
    ]);
    expect(await eventually(() => calls > base)).toBe(true);
    // Listening again with no attempt of its own (the watch asked for it).
    expect(await eventually(async () => (await listeners(own)) === 1, 10_000)).toBe(true);
    await sleep(200);
    const before = calls;
    const lease = await grant(changing, candidate(key, 'a', 'after'));
    expect(await eventually(() => calls > before)).toBe(true);
    await changing.release(lease);
    watch.stop();
  });

  it('without notifications the watch is a poll of 1 s; through PgBouncer (transaction mode) an observer still sees each change', async () => {
    const store = `${PGBOUNCER_URL}?pooler=transaction&notifications=false&schema=${schema}`;
    const pooled = createPostgresBackend({ url: store, poolSize: 2 }) as PostgresBackend;
    opened.push(pooled);
    const watch = await pooled.watchElection('poll', () => undefined);
    expect(watch.recheckAfterMs).toBe(1_000);
    watch.stop();
    const key = `poll:${randomUUID()}`;
    const leader = createLocker(pooled);
    const watcher = createLocker(
      createPostgresBackend({ url: store, poolSize: 2 }) as PostgresBackend,
    );
    const seen: (string | null)[] = [];
    const stop = new AbortController();
    const observing = (async () => {
      for await (const l of watcher.election(key).observe({ signal: stop.signal })) {
        seen.push((l as ElectionLeader | null)?.value ?? null);
      }
    })();
    expect(await eventually(() => seen.length === 1)).toBe(true);
    const leading = await leader.election(key).campaign('p1', { ttlMs: 30_000 });
    expect(await eventually(() => seen.includes('p1'), 5_000)).toBe(true);
    await leading.proclaim('p2');
    expect(await eventually(() => seen.includes('p2'), 5_000)).toBe(true);
    await leading.resign();
    expect(await eventually(() => seen.at(-1) === null && seen.length === 4, 5_000)).toBe(true);
    stop.abort();
    await observing;
    expect(seen).toEqual([null, 'p1', 'p2', null]);
    await Promise.all([leader.close(), watcher.close()]);
  });

  it('notices: an election’s line and change notices, apart from locks’ and semaphores’', () => {
    expect(parseNotice('e4:bbbbjobs:1')).toEqual({
      key: 'jobs:1',
      head: 'bbbb',
      election: 'line',
    });
    expect(parseNotice('e0:jobs:1')).toEqual({ key: 'jobs:1', head: undefined, election: 'line' });
    expect(parseNotice('c0:jobs:1')).toEqual({
      key: 'jobs:1',
      head: undefined,
      election: 'change',
    });
    // Bare keys that happen to start with e or c stay bare keys.
    expect(parseNotice('eu:1')).toEqual({ key: 'eu:1', head: undefined });
    expect(parseNotice('cart:7')).toEqual({ key: 'cart:7', head: undefined });
  });

  it('a schema of the previous version gets the election objects in place; its held lock stays; terms follow its tokens', async () => {
    const old = uniqueSchema('upgrade_election');
    extraSchemas.push(old);
    const current = sqlFor(old).setup;
    const previous = current.slice(0, current.indexOf('-- Leader elections'));
    expect(previous).toContain('fencelock_attempt_all');
    expect(previous).not.toContain('fencelock_elections');
    await admin.query(previous);
    const { rows } = await admin.query<{ token: string }>(
      `INSERT INTO "${old}".fencelock_leases (key, owner, token, expires_at)
       VALUES ('held', $1, nextval('"${old}".fencelock_token_seq'), clock_timestamp() + interval '60 seconds')
       RETURNING token::text AS token`,
      ['e'.repeat(32)],
    );
    const locker = createLocker(`${PG_URL}?schema=${old}`);
    try {
      expect(await locker.tryAcquire('held')).toBeNull();
      const leading = await locker.election('held').campaign('up', { ttlMs: 30_000 });
      expect(leading.term).toBeGreaterThan(BigInt(rows[0]!.token));
      expect(await locker.election('held').leader()).toMatchObject({ value: 'up' });
      expect(await leading.resign()).toBe('released');
      expect(await locker.inspect('held')).toMatchObject({ holder: { owner: 'e'.repeat(32) } });
    } finally {
      await locker.close();
    }
  });
});
