/**
 * PostgreSQL advisory-lock mode: handles sharing one connection still exclude each other (scenario
 * T05 step 5, test/integration/handed/t05-reentrancy.test.ts) and leave no advisory lock behind; a
 * terminated connection loses its leases at once and frees the key for others without waiting for a
 * TTL; a lease that is not renewed is given back after its TTL; inspect sees only holders whose
 * session holds the lock.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresAdvisoryBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { createLocker, LockLostError } from '../../../packages/fencelock/src/index.js';
import {
  adminPool,
  advisoryLocksOf,
  dropSchema,
  eventually,
  PG_URL,
  sleep,
  uniqueSchema,
} from './support.js';

const schema = uniqueSchema('advisory');
const admin = adminPool();

afterAll(async () => {
  await dropSchema(admin, schema);
});

function advisoryBackend(options: { pool?: pg.Pool } = {}): PostgresAdvisoryBackend {
  return createPostgresBackend(
    options.pool
      ? { pool: options.pool, schema, mode: 'advisory' }
      : { url: PG_URL, schema, mode: 'advisory' },
  ) as PostgresAdvisoryBackend;
}

describe('PostgreSQL advisory-lock mode', () => {
  it('T05 step 5: two handles on one shared connection exclude each other; pg_locks ends empty', async () => {
    // A user pool of one connection, as a pooled application would force it.
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const backend = advisoryBackend({ pool });
    const locker = createLocker(backend);
    const key = `t05:${randomUUID()}`;
    const h1 = locker.lock(key, { ttlMs: 10_000 });
    const h2 = locker.lock(key, { ttlMs: 10_000 });
    const lease1 = await h1.acquire();
    expect(await advisoryLocksOf(admin, key)).toBe(1);
    expect(await h2.tryAcquire()).toBeNull();
    expect(await lease1.release()).toBe('released');
    const lease2 = await h2.tryAcquire();
    expect(lease2).not.toBeNull();
    expect(lease2!.fencingToken).toBeGreaterThan(lease1.fencingToken);
    // Exactly one session-level lock: the server was not asked twice on the same session.
    expect(await advisoryLocksOf(admin, key)).toBe(1);
    expect(await lease2!.release()).toBe('released');
    expect(await advisoryLocksOf(admin, key)).toBe(0);
    await locker.close();
    await pool.end();
  });

  it('two backends (two connections) exclude each other; inspect from a third names the holder', async () => {
    const a = createLocker(advisoryBackend());
    const b = createLocker(advisoryBackend());
    const c = createLocker(advisoryBackend());
    const key = `cross:${randomUUID()}`;
    const lease = await a.acquire(key, { ttlMs: 10_000 });
    expect(await b.tryAcquire(key)).toBeNull();
    const info = await c.inspect(key);
    expect(info.holder?.owner).toBe(lease.owner);
    expect(info.holder?.fencingToken).toBe(lease.fencingToken);
    expect(info.holder!.ttlMs).toBeGreaterThan(8_000);
    expect(info.holder!.ttlMs).toBeLessThanOrEqual(10_000);
    // A waiter is woken by the release's NOTIFY.
    const waiting = b.acquire(key, { waitMs: 10_000 });
    await sleep(200);
    await lease.release();
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
    expect((await c.inspect(key)).holder).toBeNull();
    await Promise.all([a.close(), b.close(), c.close()]);
  });

  it('a terminated connection loses its leases at once and frees the key for others', async () => {
    const backend = advisoryBackend();
    const a = createLocker(backend);
    const b = createLocker(advisoryBackend());
    const key = `killed:${randomUUID()}`;
    const lease = await a.acquire(key, { ttlMs: 60_000 });
    const pid = backend.sessionPid;
    expect(pid).toBeTypeOf('number');
    await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    expect(await eventually(() => lease.signal.aborted)).toBe(true);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect((lease.signal.reason as LockLostError).reason).toBe('session-lost');
    // Long before the 60 s TTL: the server let go of the lock with the connection.
    const next = await b.acquire(key, { waitMs: 5_000, ttlMs: 10_000 });
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    // The engine's answer: the key is someone else's now.
    expect(await lease.release()).toBe('not-owner');
    // The first backend opens a new connection for its next lock.
    const other = await a.acquire(`${key}:after`, { ttlMs: 10_000 });
    expect(backend.sessionPid).not.toBe(pid);
    await Promise.all([next.release(), other.release()]);
    await Promise.all([a.close(), b.close()]);
  });

  it('a lease that is not renewed is given back after its TTL', async () => {
    const a = createLocker(advisoryBackend());
    const b = createLocker(advisoryBackend());
    const key = `ttl:${randomUUID()}`;
    const lease = await a.acquire(key, { ttlMs: 400, autoRenew: false });
    expect(await b.tryAcquire(key)).toBeNull();
    expect(await eventually(async () => (await advisoryLocksOf(admin, key)) === 0, 3_000)).toBe(
      true,
    );
    expect(lease.isHeld).toBe(false);
    const next = await b.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();
    await Promise.all([a.close(), b.close()]);
  });

  it('close() ends the connection: the server holds no lock of it afterwards', async () => {
    const a = createLocker(advisoryBackend());
    const keys = [1, 2, 3].map((n) => `close:${randomUUID()}:${n}`);
    for (const key of keys) await a.acquire(key, { ttlMs: 60_000 });
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(1);
    await a.close();
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(0);
  });
});

describe('PostgreSQL advisory-lock mode, a renewal queued behind the TTL', () => {
  it('is refused once the TTL ran out, even though the unlock had not run yet', async () => {
    // Found by review: the renewal answered "renewed" and the queued unlock then gave the lock
    // away inside the renewed TTL.
    const locker = createLocker(advisoryBackend());
    const other = createLocker(advisoryBackend());
    const key = `queued-renew:${randomUUID()}`;
    const slowKey = `${key}:slow`;
    const owner = randomUUID().replaceAll('-', '');
    const grant = await locker.acquireForOwner(key, owner, { ttlMs: 1_000 });
    // Make the lock connection busy: an attempt on another key waits on a row lock held here.
    const blocker = new pg.Client({ connectionString: PG_URL });
    await blocker.connect();
    await blocker.query(
      `INSERT INTO "${schema}".fencelock_advisory_holders (key, owner, token, pid, expires_at)
       VALUES ($1, 'nobody', 0, 0, clock_timestamp())`,
      [slowKey],
    );
    await blocker.query('BEGIN');
    await blocker.query(
      `SELECT 1 FROM "${schema}".fencelock_advisory_holders WHERE key = $1 FOR UPDATE`,
      [slowKey],
    );
    const slow = locker.tryAcquire(slowKey, { ttlMs: 10_000 });
    await sleep(100);
    const renewal = locker.renewForOwner({ key, owner, fencingToken: grant.fencingToken }, 5_000);
    await sleep(1_300); // the 1 s TTL runs out while the renewal waits in line
    await blocker.query('COMMIT');
    await blocker.end();
    expect(await renewal).toEqual({ outcome: 'not-held' });
    expect(await eventually(async () => (await advisoryLocksOf(admin, key)) === 0)).toBe(true);
    const next = await other.tryAcquire(key, { ttlMs: 1_000 });
    expect(next).not.toBeNull();
    await next!.release();
    await (await slow)?.release();
    await Promise.all([locker.close(), other.close()]);
  });
});
