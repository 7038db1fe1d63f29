/**
 * Lease mode behind PgBouncer in transaction mode (`scripts/services.sh up pgbouncer`), with
 * `pooler: 'transaction'`: statements go through the pooler, LISTEN goes to `listenUrl` (the
 * server itself), so a waiter is woken by the release's NOTIFY, not by polling; the server-side
 * statement timeout still holds (`SET LOCAL` in each statement's transaction), on the backend's
 * own pipelined pool and on a plain `pg.Pool` of the user's.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../../../packages/fencelock/src/backends/postgres/index.js';
import { xactLockPairOf } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import {
  BackendError,
  createLocker,
  type Lease,
  type Locker,
} from '../../../packages/fencelock/src/index.js';
import { PGBOUNCER_URL } from '../../helpers/engines.js';
import {
  adminPool,
  countingAttempts,
  dropSchema,
  eventually,
  PG_URL,
  sleep,
  uniqueSchema,
} from './support.js';

const schema = uniqueSchema('pgbouncer');
const admin = adminPool();
/** A waiter's poll would come back after 20 s at the earliest: only a NOTIFY is quicker. */
const SLOW_RETRY = { initialDelayMs: 20_000, maxDelayMs: 20_000 };
/** User pools opened by the tests, ended at the end. */
const userPools: pg.Pool[] = [];

afterAll(async () => {
  await Promise.all(userPools.map((pool) => pool.end()));
  await dropSchema(admin, schema);
});

function pooled(options: { notifications?: boolean; commandTimeoutMs?: number } = {}) {
  return createPostgresBackend({
    url: PGBOUNCER_URL,
    schema,
    pooler: 'transaction',
    listenUrl: PG_URL,
    ...options,
  });
}

/** The same through a `pg.Pool` of the user's (no pipelining: three round trips). */
function userPooled(options: { commandTimeoutMs?: number } = {}) {
  const pool = new pg.Pool({ connectionString: PGBOUNCER_URL, max: 2 });
  // As node-postgres asks of every pool's owner: an idle (or just released) client's socket
  // error is emitted on the pool.
  pool.on('error', () => undefined);
  userPools.push(pool);
  return createPostgresBackend({
    pool,
    schema,
    pooler: 'transaction',
    listenUrl: PG_URL,
    ...options,
  });
}

/** Start the listener of `locker`'s backend (its first attempt's mark precedes LISTEN). */
async function listening(locker: Locker): Promise<void> {
  const warm = await locker.tryAcquire(`warm:${randomUUID()}`);
  await warm?.release();
  await sleep(300);
}

/** Sessions of this schema's channel listening on the server. */
async function listeners(): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM pg_stat_activity WHERE query = $1`,
    [`LISTEN "fencelock:${schema}"`],
  );
  return Number(rows[0]!.n);
}

describe('PostgreSQL lease mode behind PgBouncer (transaction mode)', () => {
  it('without pooler=transaction, PgBouncer refuses the session settings: one quick error saying what to add', async () => {
    const locker = createLocker(createPostgresBackend({ url: PGBOUNCER_URL, schema }));
    try {
      const startedAt = performance.now();
      const error = await locker.tryAcquire(`no-pooler:${randomUUID()}`).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as Error).message).toMatch(/unsupported startup parameter/);
      expect((error as Error).message).toMatch(/\?pooler=transaction&listenUrl=/);
      // Not retried as if the server were restarting (that goes on for commandTimeoutMs, 5 s).
      expect(performance.now() - startedAt).toBeLessThan(4000);
    } finally {
      await locker.close();
    }
  });

  it('a waiter is woken by the NOTIFY it hears on listenUrl, long before its poll', async () => {
    const key = `notify:${randomUUID()}`;
    const holder = createLocker(pooled());
    const { backend: counted, attempts } = countingAttempts(pooled());
    const waiter = createLocker(counted);
    const lease = await holder.acquire(key, { ttlMs: 60_000 });
    await listening(waiter);

    // Both backends listen on the server itself (LISTEN through the pooler would hear nothing).
    expect(await eventually(async () => (await listeners()) === 2)).toBe(true);

    const base = attempts();
    const waiting = waiter.acquire(key, { ttlMs: 10_000, waitMs: 30_000, retry: SLOW_RETRY });
    expect(await eventually(() => attempts() - base === 1)).toBe(true);
    await sleep(300);
    const releasedAt = performance.now();
    expect(await lease.release()).toBe('released');
    const next = await waiting;
    const wokeAfterMs = performance.now() - releasedAt;
    expect(wokeAfterMs).toBeLessThan(1_500);
    // One attempt before the release, one after the notification: no poll in between.
    expect(attempts() - base).toBe(2);
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
    await Promise.all([holder.close(), waiter.close()]);
    expect(await eventually(async () => (await listeners()) === 0)).toBe(true);
  });

  it('control: a LISTEN through the pooler itself hears nothing, so that waiter sleeps until its recheck (why such a listenUrl is refused)', async () => {
    const key = `deaf:${randomUUID()}`;
    const holder = createLocker(pooled());
    // With the store URL, a listenUrl naming PgBouncer itself is refused at construction; a
    // pool passed in has no URL to compare with, which lets this control be built.
    expect(() =>
      createPostgresBackend({
        url: PGBOUNCER_URL,
        schema,
        pooler: 'transaction',
        listenUrl: PGBOUNCER_URL,
      }),
    ).toThrow(/not the pooler/);
    const pool = new pg.Pool({ connectionString: PGBOUNCER_URL, max: 2 });
    pool.on('error', () => undefined);
    userPools.push(pool);
    const deaf = createPostgresBackend({
      pool,
      schema,
      pooler: 'transaction',
      listenUrl: PGBOUNCER_URL,
    });
    // Attempts counted once answered: one still in flight could land after the release.
    let answered = 0;
    const attempt = deaf.attempt.bind(deaf);
    deaf.attempt = (request) => attempt(request).finally(() => (answered += 1));
    const waiter = createLocker(deaf);
    const lease = await holder.acquire(key, { ttlMs: 60_000 });
    await listening(waiter);
    answered = 0;
    const waiting = waiter.acquire(key, { ttlMs: 10_000, waitMs: 5_000, retry: SLOW_RETRY });
    // Release right after one of its attempts: a waiter that heard the NOTIFY would attempt
    // again at once; a deaf one only at its next recheck, 500 ms after the last attempt.
    expect(await eventually(() => answered === 1)).toBe(true);
    await lease.release();
    const releasedAt = performance.now();
    expect(await eventually(() => answered === 2)).toBe(true);
    expect(performance.now() - releasedAt).toBeGreaterThan(300);
    // That recheck found the key free.
    expect(await (await waiting).release()).toBe('released');
    await Promise.all([holder.close(), waiter.close()]);
  });

  it('with notifications off (no listenUrl needed) a waiter gets the key by polling', async () => {
    const key = `poll:${randomUUID()}`;
    const noListen = () =>
      createPostgresBackend({
        url: PGBOUNCER_URL,
        schema,
        pooler: 'transaction',
        notifications: false,
      });
    const holder = createLocker(noListen());
    const waiter = createLocker(noListen());
    const lease = await holder.acquire(key, { ttlMs: 60_000 });
    const waiting = waiter.acquire(key, {
      waitMs: 10_000,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
    });
    await sleep(300);
    await lease.release();
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
    await Promise.all([holder.close(), waiter.close()]);
  });

  it("works on the user's own pg.Pool to PgBouncer, NOTIFY included", async () => {
    const key = `user-pool:${randomUUID()}`;
    const a = createLocker(userPooled());
    const b = createLocker(userPooled());
    await listening(b);
    const lease = await a.acquire(key, { ttlMs: 60_000 });
    expect((await b.inspect(key)).holder?.owner).toBe(lease.owner);
    expect(await b.tryAcquire(key)).toBeNull();
    const waiting = b.acquire(key, { ttlMs: 10_000, waitMs: 30_000, retry: SLOW_RETRY });
    await sleep(300);
    const releasedAt = performance.now();
    await lease.release();
    const next = await waiting;
    expect(performance.now() - releasedAt).toBeLessThan(1_500);
    await next.release();
    expect((await a.inspect(key)).holder).toBeNull();
    await Promise.all([a.close(), b.close()]);
  });

  it('six backends setting up one fresh schema at once all succeed (8 rounds)', async () => {
    // Found with the contract suite: the loser of the set-up race failed with a duplicate key
    // in pg_namespace (its catalog cache predated the winner's commit).
    let failures = 0;
    for (let round = 0; round < 8; round++) {
      const fresh = uniqueSchema('setup');
      const lockers = Array.from({ length: 6 }, () =>
        createLocker(
          createPostgresBackend({
            url: PGBOUNCER_URL,
            schema: fresh,
            pooler: 'transaction',
            notifications: false,
            poolSize: 2,
          }),
        ),
      );
      const results = await Promise.allSettled(lockers.map((l, i) => l.tryAcquire(`k${i}`)));
      failures += results.filter((r) => r.status === 'rejected').length;
      await Promise.all(lockers.map((locker) => locker.close()));
      await admin.query(`DROP SCHEMA IF EXISTS "${fresh}" CASCADE`);
    }
    expect(failures).toBe(0);
  });

  for (const [name, make] of [
    ['its own pipelined pool', () => pooled({ notifications: false, commandTimeoutMs: 500 })],
    ["the user's pool", () => userPooled({ commandTimeoutMs: 500 })],
  ] as const) {
    it(`the server's statement timeout still applies (SET LOCAL), on ${name}`, async () => {
      const key = `timeout:${randomUUID()}`;
      const locker = createLocker(make());
      await listening(locker); // the schema exists, the pool has a connection
      // Hold the key's transaction-level lock on a direct connection: the grant statement
      // waits for it, until the server cancels it after commandTimeoutMs.
      const blocker = await admin.connect();
      try {
        await blocker.query('BEGIN');
        const [hi, lo] = xactLockPairOf(key);
        await blocker.query('SELECT pg_advisory_xact_lock($1::int4, $2::int4)', [hi, lo]);
        const startedAt = performance.now();
        const error = await locker.tryAcquire(key).then(
          () => undefined,
          (e: unknown) => e,
        );
        const tookMs = performance.now() - startedAt;
        expect(error).toBeInstanceOf(BackendError);
        // 57014 query_canceled: "canceling statement due to statement timeout", from the server.
        expect((error as BackendError).cause).toMatchObject({ code: '57014' });
        // The server's 500 ms, not the client's query_timeout (1.5 s).
        expect(tookMs).toBeGreaterThanOrEqual(450);
        expect(tookMs).toBeLessThan(1_400);
      } finally {
        await blocker.query('ROLLBACK');
        blocker.release();
      }
      // The pooled connections are not left inside a transaction: the next grant works.
      const lease = await locker.tryAcquire(key);
      expect(lease).not.toBeNull();
      await lease!.release();
      await locker.close();
    });

    it(`a server session ended mid-statement fails or retries that call, never the process, on ${name}`, async () => {
      // Found by trying to break it: the socket error of a checked-out client had no listener.
      const key = `terminated:${randomUUID()}`;
      const locker = createLocker(make());
      await listening(locker);
      const blocker = await admin.connect();
      try {
        await blocker.query('BEGIN');
        const [hi, lo] = xactLockPairOf(key);
        await blocker.query('SELECT pg_advisory_xact_lock($1::int4, $2::int4)', [hi, lo]);
        const attempt = locker.tryAcquire(key, { ttlMs: 5000 }).then(
          (lease) => lease,
          (e: unknown) => e,
        );
        // The grant statement waits for the blocker's lock on a server session of PgBouncer's:
        // end that session, as a failover or an administrator would.
        const ended = await eventually(async () => {
          const { rowCount } = await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND query LIKE $1`,
            [`%"${schema}".fencelock_leases%`],
          );
          return (rowCount ?? 0) > 0;
        });
        expect(ended).toBe(true);
        await blocker.query('ROLLBACK');
        const outcome = await attempt;
        // Retried on a new connection once the lock was free, or failed: either is an answer.
        if (outcome instanceof Error) expect(outcome).toBeInstanceOf(BackendError);
        else await (outcome as Lease | null)?.release();
      } finally {
        blocker.release();
      }
      // The locker still works.
      const lease = await locker.tryAcquire(key);
      expect(lease).not.toBeNull();
      await lease!.release();
      await locker.close();
    });
  }
});
