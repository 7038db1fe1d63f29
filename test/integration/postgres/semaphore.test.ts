/**
 * PostgreSQL lease mode, semaphores: what the engine stores (a row per permit and a line per
 * semaphore, apart from the locks' tables; nothing once idle), exactly N grants among attempts
 * made at the same moment, the one NOTIFY per freed permit addressed to the waiter it lets in, a
 * lapsed permit taken over but never one renewed in time, the sweep, the permit count kept by a
 * waiter alone, mixed renewal batches, and a schema of the previous version brought up to date.
 *
 * Most cases call the backend directly (attempt with `permits`, release, abandon) so that the
 * line and the notices are exact; the contract suite runs the same through `locker.semaphore`.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import {
  parseNotice,
  permitLineOf,
  ReleaseListener,
} from '../../../packages/fencelock/src/backends/postgres/listener.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import {
  type AttemptRequest,
  createLocker,
  type Granted,
  type LeaseRef,
  PermitsMismatchError,
} from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, eventually, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('semaphore');
const admin = adminPool();
const permitsTable = `"${schema}".fencelock_permits`;
const lineTable = `"${schema}".fencelock_permit_waiters`;
const opened: PostgresBackend[] = [];

afterAll(async () => {
  await Promise.all(opened.map((b) => b.close()));
  await dropSchema(admin, schema);
});

function backend(poolSize = 4): PostgresBackend {
  const made = createPostgresBackend({ url: PG_URL, schema, poolSize }) as PostgresBackend;
  opened.push(made);
  return made;
}

/** An owner id of 32 hex digits. */
function ownerOf(digit: string): string {
  return digit.repeat(32);
}

/** A permit attempt of `owner` (one hex digit, repeated) on a semaphore of `permits`. */
function permitAttempt(
  key: string,
  digit: string,
  waiting: boolean,
  permits = 2,
  ttlMs = 60_000,
): AttemptRequest {
  return {
    key,
    owner: ownerOf(digit),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: waiting,
    permits,
  };
}

/** Attempt, expecting a grant; the permit's reference. */
async function grant(on: PostgresBackend, request: AttemptRequest): Promise<LeaseRef> {
  const result = await on.attempt(request);
  expect(result.granted).toBe(true);
  return {
    key: request.key,
    owner: request.owner,
    fencingToken: (result as Granted).token,
    permits: request.permits,
  };
}

/** Owners holding a permit of `key`, and in its line (head first). */
async function stateOf(key: string): Promise<{ holders: string[]; line: string[] }> {
  const holders = await admin.query<{ owner: string }>(
    `SELECT owner FROM ${permitsTable} WHERE key = $1 ORDER BY token`,
    [key],
  );
  const line = await admin.query<{ owner: string }>(
    `SELECT owner FROM ${lineTable} WHERE key = $1 ORDER BY seq`,
    [key],
  );
  return { holders: holders.rows.map((r) => r.owner), line: line.rows.map((r) => r.owner) };
}

/** Notices of the schema's channel, heard on a connection of the test's own. */
async function listenToNotices(): Promise<{ notices: string[]; stop(): Promise<void> }> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const notices: string[] = [];
  client.on('notification', (message) => notices.push(message.payload ?? ''));
  await client.query(`LISTEN "fencelock:${schema}"`);
  return { notices, stop: () => client.end() };
}

describe('PostgreSQL semaphores', () => {
  it('stores a row per permit and a line apart from the locks; an idle semaphore leaves no row', async () => {
    const b = backend();
    const key = `sem:rows:${randomUUID()}`;
    const first = await grant(b, permitAttempt(key, 'a', true));
    const second = await grant(b, permitAttempt(key, 'b', true));
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    const waiting = await b.attempt(permitAttempt(key, 'c', true));
    expect(waiting).toMatchObject({ granted: false, queued: true });
    const { rows } = await admin.query(
      `SELECT owner, token::text AS token, permits FROM ${permitsTable} WHERE key = $1 ORDER BY token`,
      [key],
    );
    expect(rows).toEqual([
      { owner: ownerOf('a'), token: String(first.fencingToken), permits: 2 },
      { owner: ownerOf('b'), token: String(second.fencingToken), permits: 2 },
    ]);
    const line = await admin.query(`SELECT owner, permits FROM ${lineTable} WHERE key = $1`, [key]);
    expect(line.rows).toEqual([{ owner: ownerOf('c'), permits: 2 }]);
    // Nothing of the semaphore in the locks' tables; a lock of the same key is free.
    for (const table of ['fencelock_leases', 'fencelock_waiters']) {
      const lock = await admin.query(`SELECT 1 FROM "${schema}".${table} WHERE key = $1`, [key]);
      expect(lock.rowCount).toBe(0);
    }
    expect(await b.inspect(key)).toEqual({ key, holder: null, lastFencingToken: 0n });

    expect(await b.release(first)).toBe('released');
    const third = await grant(b, permitAttempt(key, 'c', true));
    expect(third.fencingToken).toBeGreaterThan(second.fencingToken);
    expect(await stateOf(key)).toEqual({ holders: [ownerOf('b'), ownerOf('c')], line: [] });
    expect(await b.release(second)).toBe('released');
    expect(await b.release(third)).toBe('released');
    expect(await stateOf(key)).toEqual({ holders: [], line: [] });
  });

  it('20 single attempts at the same moment on 5 permits: exactly 5 granted, in every round', async () => {
    // Each grant counts the live permits after taking the semaphore's lock, in statements that
    // see the grants committed before it: neither a sixth permit nor a refusal while one is free.
    const backends = [backend(5), backend(5), backend(5), backend(5)];
    for (let round = 0; round < 10; round++) {
      const key = `sem:exact:${randomUUID()}`;
      const requests = Array.from({ length: 20 }, (_, i) => ({
        ...permitAttempt(key, '0', false, 5),
        owner: `${String(round).padStart(2, '0')}${String(i).padStart(30, '0')}`,
      }));
      const results = await Promise.all(
        requests.map((request, i) => backends[i % backends.length]!.attempt(request)),
      );
      const granted = results.filter((r) => r.granted) as Granted[];
      expect(granted).toHaveLength(5);
      expect(new Set(granted.map((g) => g.token)).size).toBe(5);
      const { holders, line } = await stateOf(key);
      expect(holders).toHaveLength(5);
      expect(line).toEqual([]);
    }
  });

  it('a freed permit NOTIFYs the one waiter it lets in; a waiter leaving passes its turn on', async () => {
    const b = backend();
    const key = `sem:wake:${randomUUID()}`;
    const heard = await listenToNotices();
    const notice = (digit: string) => `p32:${ownerOf(digit)}${key}`;
    /** The notices heard after `step`, once the expected ones came and 200 ms more passed. */
    const noticesAfter = async (
      step: () => Promise<unknown>,
      expected: number,
    ): Promise<string[]> => {
      heard.notices.length = 0;
      await step();
      expect(await eventually(() => heard.notices.length >= expected)).toBe(true);
      await sleep(200);
      return [...heard.notices];
    };
    try {
      const h1 = await grant(b, permitAttempt(key, '1', true));
      const h2 = await grant(b, permitAttempt(key, '2', true));
      for (const digit of ['a', 'b', 'c', 'd']) {
        expect(await b.attempt(permitAttempt(key, digit, true))).toMatchObject({ granted: false });
      }
      expect((await stateOf(key)).line).toEqual(['a', 'b', 'c', 'd'].map(ownerOf));
      // One permit free: the head. Two free before anyone came: the second, not the head again.
      expect(await noticesAfter(() => b.release(h1), 1)).toEqual([notice('a')]);
      expect(await noticesAfter(() => b.release(h2), 1)).toEqual([notice('b')]);
      // A waiter behind the free permits leaves: nobody can go for it.
      expect(await noticesAfter(() => b.abandon(permitAttempt(key, 'd', true)), 0)).toEqual([]);
      // A waiter that was told leaves: the next one moves up among the free permits, and goes.
      expect(await noticesAfter(() => b.abandon(permitAttempt(key, 'a', true)), 1)).toEqual([
        notice('c'),
      ]);
      const b2 = await grant(b, permitAttempt(key, 'b', true));
      // c was told already: b's release frees a permit nobody waits for.
      expect(await noticesAfter(() => b.release(b2), 0)).toEqual([]);
      const c3 = await grant(b, permitAttempt(key, 'c', true));
      expect(await noticesAfter(() => b.release(c3), 0)).toEqual([]);
      expect(await stateOf(key)).toEqual({ holders: [], line: [] });
    } finally {
      await heard.stop();
    }
  });

  it('a lapsed permit is taken over by the next grant; its holder is refused renew and release', async () => {
    const b = backend();
    const key = `sem:lapsed:${randomUUID()}`;
    const lapsed = await grant(b, permitAttempt(key, 'a', false, 1, 200));
    expect((await b.attempt(permitAttempt(key, 'b', false, 1))).granted).toBe(false);
    await sleep(300);
    const next = await grant(b, permitAttempt(key, 'b', false, 1));
    expect(next.fencingToken).toBeGreaterThan(lapsed.fencingToken);
    // The grant deleted the lapsed row in its statement.
    expect(await stateOf(key)).toEqual({ holders: [ownerOf('b')], line: [] });
    expect(await b.renew(lapsed, 10_000)).toEqual({ ok: false, reason: 'not-owner' });
    expect(await b.release(lapsed)).toBe('not-owner');
    expect(await b.release(next)).toBe('released');
    expect(await b.release(lapsed)).toBe('not-held');
    expect(await b.renew(lapsed, 10_000)).toEqual({ ok: false, reason: 'not-held' });
  });

  it('a permit renewed while it lapses is not taken over: the grant waits for the renewal and counts it', async () => {
    const b = backend();
    const key = `sem:renewing:${randomUUID()}`;
    const held = await grant(b, permitAttempt(key, 'a', false, 1, 1_000));
    const renewal = await admin.connect();
    try {
      // A renewal under way just before the expiry: the row is updated, not yet committed.
      await renewal.query('BEGIN');
      const { rowCount } = await renewal.query(
        `UPDATE ${permitsTable} SET expires_at = clock_timestamp() + interval '60 seconds'
         WHERE key = $1 AND owner = $2 AND token = $3 AND expires_at > clock_timestamp()`,
        [key, held.owner, String(held.fencingToken)],
      );
      expect(rowCount).toBe(1);
      await sleep(1_200);
      // The old expiry has passed: the contender's statement waits on the renewing row.
      const contender = b.attempt(permitAttempt(key, 'b', false, 1));
      await sleep(300);
      await renewal.query('COMMIT');
      expect((await contender).granted).toBe(false);
      expect(await stateOf(key)).toEqual({ holders: [ownerOf('a')], line: [] });
      expect(await b.release(held)).toBe('released');
    } finally {
      await renewal.query('ROLLBACK').catch(() => undefined);
      renewal.release();
    }
  });

  it('a live waiter alone keeps the permit count: another count is refused and writes nothing', async () => {
    const b = backend();
    const key = `sem:count:${randomUUID()}`;
    const held = await grant(b, permitAttempt(key, 'a', true, 1));
    expect((await b.attempt(permitAttempt(key, 'b', true, 1))).granted).toBe(false);
    expect(await b.release(held)).toBe('released');
    // b waits (its entry is live) though nobody holds a permit now.
    const refused = await b.attempt(permitAttempt(key, 'c', true, 3)).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PermitsMismatchError);
    expect(refused).toMatchObject({ key, requested: 3, inUse: 1 });
    expect(await stateOf(key)).toEqual({ holders: [], line: [ownerOf('b')] });
    await b.leaveQueue(permitAttempt(key, 'b', true, 1));
    const recounted = await grant(b, permitAttempt(key, 'c', true, 3));
    expect(await b.release(recounted)).toBe('released');
  });

  it('leaveQueue takes the owner out of the line and leaves its permit; abandon drops both', async () => {
    const b = backend();
    const key = `sem:withdraw:${randomUUID()}`;
    const held = await grant(b, permitAttempt(key, 'a', true, 1));
    expect((await b.attempt(permitAttempt(key, 'b', true, 1))).granted).toBe(false);
    await b.leaveQueue(permitAttempt(key, 'a', true, 1));
    await b.leaveQueue(permitAttempt(key, 'b', true, 1));
    expect(await stateOf(key)).toEqual({ holders: [ownerOf('a')], line: [] });
    await b.abandon(permitAttempt(key, 'a', true, 1));
    expect(await stateOf(key)).toEqual({ holders: [], line: [] });
    expect(await b.release(held)).toBe('not-held');
  });

  it("sweeps lapsed permits and vanished waiters' entries with a fresh backend's first attempt", async () => {
    const key = `sem:sweep:${randomUUID()}`;
    // A holder and a waiter that never come back (a crashed process), both past their time.
    const gone = backend();
    await grant(gone, permitAttempt(key, 'b', true, 1));
    expect((await gone.attempt(permitAttempt(key, 'c', true, 1))).granted).toBe(false);
    for (const table of [permitsTable, lineTable]) {
      await admin.query(
        `UPDATE ${table} SET expires_at = clock_timestamp() - interval '1 second' WHERE key = $1`,
        [key],
      );
    }
    expect(await stateOf(key)).toEqual({ holders: [ownerOf('b')], line: [ownerOf('c')] });
    const fresh = backend();
    const other = await fresh.attempt(permitAttempt(`sem:other:${randomUUID()}`, 'd', false));
    expect(other.granted).toBe(true);
    expect(
      await eventually(async () => {
        const { holders, line } = await stateOf(key);
        return holders.length === 0 && line.length === 0;
      }),
    ).toBe(true);
  });

  it('renewals of locks and permits asked for in one turn go as one statement, each with its own answer', async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    const statements: string[] = [];
    const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args) => {
      const statement = args[0];
      statements.push(
        typeof statement === 'string' ? statement : String((statement as pg.QueryConfig).text),
      );
      return query(...args);
    };
    const b = createPostgresBackend({ pool, schema }) as PostgresBackend;
    try {
      const key = `sem:renew:${randomUUID()}`;
      const { permits: _, ...lockRequest } = permitAttempt(key, 'a', false);
      const lockResult = await b.attempt(lockRequest);
      expect(lockResult.granted).toBe(true);
      const lock = { key, owner: ownerOf('a'), fencingToken: (lockResult as Granted).token };
      const permit = await grant(b, permitAttempt(key, 'c', false, 2, 2_000));
      const taken = await grant(b, permitAttempt(key, 'b', false, 2, 2_000));
      await admin.query(`DELETE FROM ${permitsTable} WHERE key = $1 AND owner = $2`, [
        key,
        taken.owner,
      ]);
      statements.length = 0;
      const results = await Promise.all([
        b.renew(lock, 60_000),
        b.renew(permit, 60_000),
        b.renew(taken, 60_000),
      ]);
      expect(results).toEqual([
        { ok: true, ttlMs: 60_000 },
        { ok: true, ttlMs: 60_000 },
        { ok: false, reason: 'not-owner' },
      ]);
      expect(statements).toHaveLength(1);
      expect(statements[0]).toContain('unnest');
      const { rows } = await admin.query<{ owner: string; remaining: string }>(
        `SELECT owner, extract(epoch FROM expires_at - clock_timestamp())::text AS remaining
         FROM ${permitsTable} WHERE key = $1`,
        [key],
      );
      expect(rows.map((r) => [r.owner, Number(r.remaining) > 50])).toEqual([[ownerOf('c'), true]]);
      // The permit's owner and token sent as a lock's renew the lock (held by another owner).
      expect(await b.renew({ ...permit, permits: undefined }, 60_000)).toEqual({
        ok: false,
        reason: 'not-owner',
      });
      expect(await b.release(permit)).toBe('released');
      expect(await b.renew(taken, 60_000)).toEqual({ ok: false, reason: 'not-held' });
      expect(await b.release(lock)).toBe('released');
    } finally {
      await b.close();
      await pool.end();
    }
  });

  it('a lock and a semaphore of one key never wake each other’s waiters', async () => {
    const channel = `fencelock:${schema}`;
    const listener = new ReleaseListener(async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      return client;
    }, channel);
    try {
      listener.mark();
      expect(await eventually(() => listener.mark() >= 0)).toBe(true);
      const key = `sem:apart:${randomUUID()}`;
      const woken: string[] = [];
      const control = new AbortController();
      const mark = listener.mark();
      const waits = [
        listener.wait(key, 'aaaa', mark, control.signal, 10_000).then(() => woken.push('lock')),
        listener
          .wait(permitLineOf(key), 'aaaa', mark, control.signal, 10_000)
          .then(() => woken.push('semaphore')),
      ];
      await admin.query('SELECT pg_notify($1, $2)', [channel, `p4:aaaa${key}`]);
      expect(await eventually(() => woken.length === 1)).toBe(true);
      await sleep(300);
      expect(woken).toEqual(['semaphore']);
      await admin.query('SELECT pg_notify($1, $2)', [channel, `0:${key}`]);
      expect(await eventually(() => woken.length === 2)).toBe(true);
      expect(woken).toEqual(['semaphore', 'lock']);
      await Promise.all(waits);
    } finally {
      await listener.close();
    }
  });

  it("a semaphore's notice names the waiter and the key; a lock's reads as before", () => {
    expect(parseNotice('p4:bbbbstock:42')).toEqual({
      key: 'stock:42',
      head: 'bbbb',
      semaphore: true,
    });
    expect(parseNotice('p0:stock:42')).toEqual({
      key: 'stock:42',
      head: undefined,
      semaphore: true,
    });
    expect(parseNotice('4:bbbbstock:42')).toEqual({ key: 'stock:42', head: 'bbbb' });
    // A bare key that happens to start with p.
    expect(parseNotice('pool:7')).toEqual({ key: 'pool:7', head: undefined });
  });

  it('a schema of the previous version gets the semaphore tables; its held locks stay', async () => {
    const old = uniqueSchema('upgrade_sem');
    const current = sqlFor(old).setup;
    await admin.query(
      current.slice(0, current.indexOf(`CREATE TABLE IF NOT EXISTS "${old}".fencelock_permits`)),
    );
    await admin.query(
      `INSERT INTO "${old}".fencelock_leases (key, owner, token, expires_at)
       VALUES ('held', $1, nextval('"${old}".fencelock_token_seq'), clock_timestamp() + interval '60 seconds')`,
      [ownerOf('e')],
    );
    const locker = createLocker(`${PG_URL}?schema=${old}`);
    try {
      expect(await locker.tryAcquire('held')).toBeNull();
      const permit = await locker.semaphore('held', { permits: 2 }).tryAcquire();
      expect(permit).not.toBeNull();
      expect(permit!.fencingToken).toBeGreaterThan(1n);
      expect(await permit!.release()).toBe('released');
    } finally {
      await locker.close();
      await admin.query(`DROP SCHEMA "${old}" CASCADE`);
    }
  });
});
