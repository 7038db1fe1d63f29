/**
 * Advisory mode behind a transaction-mode pooler that does not give itself away: the second
 * PgBouncer of `scripts/services.sh up pgbouncer` ignores the `statement_timeout` startup
 * parameter (`ignore_startup_parameters`) instead of refusing it, so the lock connection is let
 * in. Its advisory locks would land on whichever server connection ran the statement, and stay
 * there for other clients (issue 17: 18 of 20 releases answered `not-held`). The backend finds
 * the pooler when the lock connection opens and refuses before any lock is taken. Failed before
 * the fix (the first tryAcquire was granted).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../../../packages/fencelock/src/backends/postgres/index.js';
import { BackendError, createLocker } from '../../../packages/fencelock/src/index.js';
import { PGBOUNCER_IGNORING_URL } from '../../helpers/engines.js';
import { adminPool, advisoryLocksOf, dropSchema, PG_URL, uniqueSchema } from './support.js';

const schema = uniqueSchema('hidden_pooler');
const admin = adminPool();
const userPools: pg.Pool[] = [];

afterAll(async () => {
  await Promise.all(userPools.map((pool) => pool.end()));
  await dropSchema(admin, schema);
});

/** Holder rows of advisory mode in this file's schema (the table exists after the set-up). */
async function holderRows(): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM "${schema}".fencelock_advisory_holders`,
  );
  return Number(rows[0]!.n);
}

const REFUSAL = /advisory mode needs a server session of its own.*transaction-mode pooler/s;
const FIX = /server itself.*pooler=transaction/s;

describe('PostgreSQL lease mode behind a transaction-mode pooler nobody named', () => {
  it('keeps granting when its next statement lands on a server connection that never prepared it', async () => {
    const locker = createLocker(
      createPostgresBackend({ url: PGBOUNCER_IGNORING_URL, schema, poolSize: 1 }),
    );
    const other = new pg.Client({ connectionString: PGBOUNCER_IGNORING_URL });
    other.on('error', () => undefined);
    try {
      // Prepared on the server connection PgBouncer lent for these statements…
      const key = `hidden-lease:${randomUUID()}`;
      expect(await locker.withLock(key, async (lease) => lease.fencingToken)).toBeGreaterThan(0n);
      // …which an open transaction now keeps (PgBouncer lends the most recently used first), so
      // the next statements run on another one. Failed before the fallback: "prepared
      // statement … does not exist".
      await other.connect();
      await other.query('BEGIN');
      await other.query('SELECT 1');
      for (let i = 0; i < 3; i++) {
        const lease = await locker.tryAcquire(key);
        expect(lease).not.toBeNull();
        expect(await lease!.release()).toBe('released');
      }
      await other.query('COMMIT');
    } finally {
      await other.end().catch(() => undefined);
      await locker.close();
    }
  });

  it('keeps granting when a second client connection prepares the same statement on a server connection that has it', async () => {
    // Failed before 42P05 was handled: every attempt of the second locker answered "prepared
    // statement … already exists" (found by a tester).
    const lockers = [1, 2].map(() =>
      createLocker(createPostgresBackend({ url: PGBOUNCER_IGNORING_URL, schema, poolSize: 1 })),
    );
    try {
      for (const locker of lockers) {
        for (let i = 0; i < 5; i++) {
          const lease = await locker.tryAcquire(`hidden-lease:${randomUUID()}`);
          expect(lease).not.toBeNull();
          expect(await lease!.release()).toBe('released');
        }
      }
    } finally {
      await Promise.all(lockers.map((locker) => locker.close()));
    }
  });
});

describe('PostgreSQL advisory mode behind a transaction-mode pooler that ignores statement_timeout', () => {
  it('is refused before any lock is taken, every time (10 fresh backends from the URL)', async () => {
    const keys: string[] = [];
    let refused = 0;
    for (let round = 0; round < 10; round++) {
      const key = `hidden:${randomUUID()}`;
      keys.push(key);
      const locker = createLocker(
        createPostgresBackend({ url: PGBOUNCER_IGNORING_URL, schema, mode: 'advisory' }),
      );
      try {
        const error = await locker.tryAcquire(key).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(BackendError);
        expect((error as Error).message).toMatch(REFUSAL);
        expect((error as Error).message).toMatch(FIX);
        // The next attempt is refused at once, with the same answer.
        const again = await locker.tryAcquire(key).catch((e: unknown) => e);
        expect(again).toBe(error);
        refused += 1;
      } finally {
        await locker.close();
      }
    }
    expect(refused).toBe(10);
    // Nothing was locked: no advisory lock of these keys on any server session, no holder row,
    // and a backend connected to the server itself gets each key at once.
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(0);
    expect(await holderRows()).toBe(0);
    const direct = createLocker(createPostgresBackend({ url: PG_URL, schema, mode: 'advisory' }));
    try {
      for (const key of keys) {
        const lease = await direct.tryAcquire(key);
        expect(lease).not.toBeNull();
        expect(await lease!.release()).toBe('released');
      }
    } finally {
      await direct.close();
    }
  });

  it("is refused on the user's own pg.Pool to that pooler too", async () => {
    const pool = new pg.Pool({ connectionString: PGBOUNCER_IGNORING_URL, max: 2 });
    pool.on('error', () => undefined);
    userPools.push(pool);
    const locker = createLocker(createPostgresBackend({ pool, schema, mode: 'advisory' }));
    const key = `hidden-pool:${randomUUID()}`;
    try {
      const error = await locker.tryAcquire(key).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as Error).message).toMatch(REFUSAL);
    } finally {
      await locker.close();
    }
    expect(await advisoryLocksOf(admin, key)).toBe(0);
    expect(await holderRows()).toBe(0);
  });

  it('control: connected to the server itself, the check passes and locks work (10 fresh backends)', async () => {
    let granted = 0;
    for (let round = 0; round < 10; round++) {
      const key = `direct:${randomUUID()}`;
      const locker = createLocker(
        createPostgresBackend({ url: PG_URL, schema, mode: 'advisory', poolSize: 1 }),
      );
      try {
        const lease = await locker.tryAcquire(key, { ttlMs: 10_000 });
        expect(lease).not.toBeNull();
        expect(await advisoryLocksOf(admin, key)).toBe(1);
        expect(await lease!.release()).toBe('released');
        expect(await advisoryLocksOf(admin, key)).toBe(0);
        granted += 1;
      } finally {
        await locker.close();
      }
    }
    expect(granted).toBe(10);
  });
});
