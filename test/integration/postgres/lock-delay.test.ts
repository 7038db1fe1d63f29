/**
 * PostgreSQL lock-delay (`lockDelayMs`, lock-delay-sql.ts): what the contract cases cannot see.
 * Lease mode:
 * - The layout: `lock_delay_ms` on the grant's row (kept by renewals and the holder's repeated
 *   attempt, NULL without a delay, per key in a multi-key attempt, on the leader's row of an
 *   election); the lapsed row stays through its delay (no holder, not listed) and the sweep
 *   deletes it only once the delay is over.
 * - The line: a waiter that heads the line is not granted inside the delay; nor is a reader;
 *   a withdrawal of the lapsed grant does not clear it, one of the live grant does.
 * - A schema of the previous version gains the columns in place; its held lock stays.
 * Advisory mode:
 * - The backend's TTL runs out: the row becomes the delay's record (`delayed_until`), not listed,
 *   kept by the sweep until it ends.
 * - The holder's session ends (terminated): the first attempt timestamps the end
 *   (`delayed_until` = the earlier of its TTL end and then, + the delay); nobody is granted
 *   before it, and the key is granted soon after.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import {
  type AttemptRequest,
  type Backend,
  createLocker,
  type Granted,
} from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, eventually, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('lock_delay');
const admin = adminPool();
const leases = `"${schema}".fencelock_leases`;
const holders = `"${schema}".fencelock_advisory_holders`;
const opened: Backend[] = [];
const extraSchemas: string[] = [];

afterAll(async () => {
  await Promise.all(opened.map((b) => b.close()));
  for (const other of extraSchemas) await admin.query(`DROP SCHEMA IF EXISTS "${other}" CASCADE`);
  await dropSchema(admin, schema);
});

/** The delay of every case, ms. */
const DELAY_MS = 1_500;

function backend(mode: 'lease' | 'advisory' = 'lease'): Backend {
  const made = createPostgresBackend({ url: PG_URL, schema, poolSize: 3, mode });
  opened.push(made);
  return made;
}

/** A write attempt of a new owner with the delay, never renewed ("killed" after its grant). */
function killed(key: string, ttlMs: number, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  return {
    key,
    owner: randomUUID().replaceAll('-', ''),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    lockDelayMs: DELAY_MS,
    ...extra,
  };
}

/** The same attempt with no lock-delay. */
function withoutDelay(request: AttemptRequest): AttemptRequest {
  const { lockDelayMs: _, ...rest } = request;
  return rest;
}

async function leaseRow(key: string) {
  const { rows } = await admin.query<{
    owner: string;
    lock_delay_ms: number | null;
    live: boolean;
  }>(
    `SELECT owner, lock_delay_ms, expires_at > clock_timestamp() AS live FROM ${leases} WHERE key = $1`,
    [key],
  );
  return rows[0];
}

/** Run the lease table's sweep statement once (as every backend does once a minute). */
async function sweep(statement: string): Promise<void> {
  await admin.query(statement, [1_000]);
}

describe('PostgreSQL lock-delay, lease mode', () => {
  it('records the delay with the grant, keeps it through renewals and repeated attempts; a release deletes it', async () => {
    const b = backend();
    const key = `layout:${randomUUID()}`;
    const request = killed(key, 10_000);
    const granted = (await b.attempt(request)) as Granted;
    expect(granted.granted).toBe(true);
    expect(await leaseRow(key)).toMatchObject({ lock_delay_ms: DELAY_MS, live: true });
    const lease = { key, owner: request.owner, fencingToken: granted.token };
    expect((await b.renew(lease, 10_000)).ok).toBe(true);
    // The holder's repeated attempt (a lost reply retried) with no delay keeps the grant's.
    const again = (await b.attempt(withoutDelay(request))) as Granted;
    expect(again.token).toBe(granted.token);
    expect(await leaseRow(key)).toMatchObject({ lock_delay_ms: DELAY_MS });
    expect(await b.release(lease)).toBe('released');
    expect(await leaseRow(key)).toBeUndefined();
    // Without a delay the column is NULL.
    const plain = withoutDelay(killed(key, 10_000));
    expect((await b.attempt(plain)).granted).toBe(true);
    expect(await leaseRow(key)).toMatchObject({ lock_delay_ms: null });
    await b.abandon(plain);
  });

  it('keeps the lapsed row through its delay (no holder, not listed), swept only once the delay is over', async () => {
    const b = backend();
    const prefix = `lapsed:${randomUUID()}:`;
    const key = `${prefix}k`;
    const granted = (await b.attempt(killed(key, 200))) as Granted;
    expect(granted.granted).toBe(true);
    await sleep(300);
    await sweep(sqlFor(schema).sweep);
    expect(await leaseRow(key)).toMatchObject({ lock_delay_ms: DELAY_MS, live: false });
    expect((await b.inspect(key)).holder).toBeNull();
    expect((await b.list!({ prefix, cursor: null, pageSize: 10 })).entries).toEqual([]);
    const refused = await b.attempt(withoutDelay(killed(key, 1_000)));
    expect(refused.granted).toBe(false);
    // Answered with the delay left, never more.
    const left = (refused as { holderTtlMs?: number }).holderTtlMs;
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(DELAY_MS);
    await sleep(200 + DELAY_MS - 300 + 50);
    await sweep(sqlFor(schema).sweep);
    expect(await leaseRow(key)).toBeUndefined();
  });

  it('grants neither the head of the line nor a reader inside the delay', async () => {
    const b = backend();
    const waiter = createLocker(backend());
    const key = `line:${randomUUID()}`;
    const startedAt = performance.now();
    const granted = (await b.attempt(killed(key, 300))) as Granted;
    expect(granted.granted).toBe(true);
    // Queued while the holder lives: it heads the line when the grant runs out.
    const waiting = waiter.acquire(key, { ttlMs: 10_000, waitMs: 15_000 });
    await sleep(500);
    const { rows } = await admin.query(
      `SELECT owner FROM "${schema}".fencelock_waiters WHERE key = $1`,
      [key],
    );
    expect(rows).toHaveLength(1);
    expect(await waiter.tryAcquire(key, { mode: 'read' })).toBeNull();
    const lease = await waiting;
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + 300 + DELAY_MS - 5);
    expect(performance.now() - (startedAt + 300 + DELAY_MS)).toBeLessThan(2_000);
    await lease.release();
  });

  it('a withdrawal of the lapsed grant leaves the delay; of the live grant, clears it', async () => {
    const b = backend();
    const other = createLocker(backend());
    const key = `abandon:${randomUUID()}`;
    const lapsed = killed(key, 200);
    expect((await b.attempt(lapsed)).granted).toBe(true);
    await sleep(300);
    await b.abandon(lapsed);
    expect(await leaseRow(key)).toMatchObject({ owner: lapsed.owner, live: false });
    expect(await other.tryAcquire(key)).toBeNull();

    const liveKey = `abandon-live:${randomUUID()}`;
    const live = killed(liveKey, 10_000);
    expect((await b.attempt(live)).granted).toBe(true);
    await b.abandon(live);
    const next = await other.tryAcquire(liveKey);
    expect(next).not.toBeNull();
    await next!.release();
  });

  it('a multi-key attempt records each key’s own delay; a leadership’s row carries its delay', async () => {
    const b = backend() as PostgresBackend;
    const id = randomUUID();
    const first = killed(`all:${id}:a`, 10_000);
    const second = withoutDelay(killed(`all:${id}:b`, 10_000));
    const answers = await b.attemptAll([first, second]);
    expect(answers!.every((a) => a.granted)).toBe(true);
    expect(await leaseRow(first.key)).toMatchObject({ lock_delay_ms: DELAY_MS });
    expect(await leaseRow(second.key)).toMatchObject({ lock_delay_ms: null });
    await Promise.all([b.abandon(first), b.abandon(second)]);

    const name = `leader:${id}`;
    const leader = killed(name, 10_000, { election: { value: 'v' } });
    expect((await b.attempt(leader)).granted).toBe(true);
    const { rows } = await admin.query(
      `SELECT lock_delay_ms FROM "${schema}".fencelock_elections WHERE key = $1`,
      [name],
    );
    expect(rows[0]).toEqual({ lock_delay_ms: DELAY_MS });
    await b.abandon(leader);
  });

  it('a schema of the previous version gains the columns in place; its held lock stays', async () => {
    const old = uniqueSchema('upgrade_delay');
    extraSchemas.push(old);
    const current = sqlFor(old).setup;
    const previous = current.slice(0, current.indexOf('-- Lock-delay'));
    expect(previous).toContain('fencelock_elections');
    expect(previous).not.toContain('ADD COLUMN lock_delay_ms');
    await admin.query(previous);
    const columns = async () =>
      (
        await admin.query<{ table_name: string }>(
          `SELECT table_name FROM information_schema.columns
           WHERE table_schema = $1 AND column_name = 'lock_delay_ms' ORDER BY table_name`,
          [old],
        )
      ).rows.map((r) => r.table_name);
    expect(await columns()).toEqual([]);
    await admin.query(
      `INSERT INTO "${old}".fencelock_leases (key, owner, token, expires_at)
       VALUES ('held', $1, nextval('"${old}".fencelock_token_seq'), clock_timestamp() + interval '60 seconds')`,
      ['e'.repeat(32)],
    );
    const upgraded = createPostgresBackend({ url: PG_URL, schema: old, poolSize: 2 });
    opened.push(upgraded);
    const locker = createLocker(upgraded);
    expect(await locker.tryAcquire('held')).toBeNull();
    expect(await columns()).toEqual([
      'fencelock_advisory_holders',
      'fencelock_elections',
      'fencelock_leases',
    ]);
    const granted = (await upgraded.attempt({ ...killed('fresh', 200) })) as Granted;
    expect(granted.granted).toBe(true);
    await sleep(300);
    expect(await locker.tryAcquire('fresh')).toBeNull();
    expect(await locker.inspect('held')).toMatchObject({ holder: { owner: 'e'.repeat(32) } });
  });
});

describe('PostgreSQL lock-delay, advisory mode', () => {
  async function holderRow(key: string) {
    const { rows } = await admin.query<{
      lock_delay_ms: number | null;
      delayed: boolean;
      delay_left_ms: number | null;
      ttl_left_ms: number;
    }>(
      `SELECT lock_delay_ms, delayed_until IS NOT NULL AS delayed,
              extract(epoch FROM delayed_until - clock_timestamp()) * 1000 AS delay_left_ms,
              extract(epoch FROM expires_at - clock_timestamp()) * 1000 AS ttl_left_ms
       FROM ${holders} WHERE key = $1`,
      [key],
    );
    return rows[0];
  }

  it('the TTL running out turns the row into the delay’s record: not listed, kept by the sweep until the delay ends', async () => {
    const b = backend('advisory');
    const other = createLocker(backend('advisory'));
    const prefix = `adv-expire:${randomUUID()}:`;
    const key = `${prefix}k`;
    const granted = (await b.attempt(killed(key, 200))) as Granted;
    expect(granted.granted).toBe(true);
    expect(await holderRow(key)).toMatchObject({ lock_delay_ms: DELAY_MS, delayed: false });
    await sleep(400);
    const row = await holderRow(key);
    expect(row).toMatchObject({ delayed: true });
    expect(Number(row!.delay_left_ms)).toBeGreaterThan(DELAY_MS - 400);
    expect((await b.inspect(key)).holder).toBeNull();
    expect((await b.list!({ prefix, cursor: null, pageSize: 10 })).entries).toEqual([]);
    await sweep(sqlFor(schema).advisorySweep);
    expect(await holderRow(key)).toMatchObject({ delayed: true });
    expect(await other.tryAcquire(key)).toBeNull();
    await sleep(DELAY_MS);
    await sweep(sqlFor(schema).advisorySweep);
    expect(await holderRow(key)).toBeUndefined();
    const next = await other.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
  });

  it('a holder whose session ended: the first attempt timestamps the end; nobody is granted before it + the delay', async () => {
    const dying = backend('advisory') as Backend & { sessionPid?: number };
    const other = createLocker(backend('advisory'));
    const key = `adv-killed:${randomUUID()}`;
    // A long TTL: its end is far later than the session's.
    expect((await dying.attempt(killed(key, 30_000))).granted).toBe(true);
    // Unbacked rows without a timestamped end are kept by the sweep (TTL + delay ahead).
    await admin.query('SELECT pg_terminate_backend($1, 10000)', [dying.sessionPid]);
    const endedBy = performance.now();
    await sweep(sqlFor(schema).advisorySweep);
    expect(await holderRow(key)).toMatchObject({ lock_delay_ms: DELAY_MS, delayed: false });
    expect(await other.tryAcquire(key)).toBeNull();
    const row = await holderRow(key);
    expect(row).toMatchObject({ delayed: true });
    // The end taken is the attempt's time, not the TTL's (30 s ahead).
    expect(Number(row!.delay_left_ms)).toBeLessThanOrEqual(DELAY_MS);
    const lease = await other.acquire(key, { ttlMs: 10_000, waitMs: 10_000 });
    expect(performance.now()).toBeGreaterThanOrEqual(endedBy + DELAY_MS - 5);
    expect(performance.now() - endedBy).toBeLessThan(DELAY_MS + 2_000);
    await lease.release();
    expect(await eventually(async () => (await holderRow(key)) === undefined, 1_000)).toBe(true);
  });
});
