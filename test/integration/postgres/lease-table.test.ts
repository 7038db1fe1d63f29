/**
 * PostgreSQL lease mode, engine state: released rows are deleted, an expired lease is taken
 * over by the next acquirer in the same statement, expired rows nobody took over are swept (a
 * backend's first attempt, then its timer; a backlog in batches of 1,000), concurrent first users create the schema once, and the lock id of a key is the
 * documented SQL expression.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  lockIdOf,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import { BackendError, createLocker } from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, eventually, PG_URL, uniqueSchema } from './support.js';

const schema = uniqueSchema('table');
const store = `${PG_URL}?schema=${schema}`;
const admin = adminPool();
const table = `"${schema}".fencelock_leases`;

afterAll(async () => {
  await dropSchema(admin, schema);
});

async function rowsOf(keyPrefix: string): Promise<{ key: string; owner: string; token: string }[]> {
  const { rows } = await admin.query<{ key: string; owner: string; token: string }>(
    `SELECT key, owner, token::text AS token FROM ${table} WHERE key LIKE $1 ORDER BY key`,
    [`${keyPrefix}%`],
  );
  return rows;
}

describe('PostgreSQL lease table', () => {
  it('deletes released rows: 200 grants on distinct keys leave none behind', async () => {
    const locker = createLocker(store);
    const prefix = `distinct:${randomUUID()}:`;
    for (let i = 0; i < 200; i++) {
      const lease = await locker.acquire(`${prefix}${i}`, { ttlMs: 5_000 });
      expect(await lease.release()).toBe('released');
    }
    expect(await rowsOf(prefix)).toEqual([]);
    await locker.close();
  });

  it("a crashed holder's expired row is taken over in the granting statement", async () => {
    const a = createLocker(store);
    const key = `takeover:${randomUUID()}`;
    const first = await a.acquire(key, { ttlMs: 5_000 });
    expect(await first.release()).toBe('released');
    // A holder that crashed: its row stays, expired, with the key's last token.
    await admin.query(
      `INSERT INTO ${table} (key, owner, token, expires_at)
       VALUES ($1, 'crashed', $2, clock_timestamp() - interval '1 second')`,
      [key, first.fencingToken.toString()],
    );
    const b = createLocker(store);
    const second = await b.tryAcquire(key, { ttlMs: 5_000 });
    expect(second).not.toBeNull();
    expect(second!.fencingToken).toBeGreaterThan(first.fencingToken);
    const rows = await rowsOf(key);
    expect(rows).toEqual([{ key, owner: second!.owner, token: second!.fencingToken.toString() }]);
    expect(await second!.release()).toBe('released');
    expect(await rowsOf(key)).toEqual([]);
    await Promise.all([a.close(), b.close()]);
  });

  it("sweeps expired rows with a fresh backend's first attempt, and keeps live ones", async () => {
    // Make sure the tables exist, then plant rows as crashed holders would leave them.
    const setup = createLocker(store);
    await setup.inspect('setup');
    await setup.close();
    const prefix = `sweep:${randomUUID()}:`;
    await admin.query(
      `INSERT INTO ${table} (key, owner, token, expires_at) VALUES
         ($1 || 'old1', 'crashed', 1, clock_timestamp() - interval '2 minutes'),
         ($1 || 'old2', 'crashed', 2, clock_timestamp() - interval '61 seconds'),
         ($1 || 'recent', 'crashed', 3, clock_timestamp() - interval '10 seconds'),
         ($1 || 'live', 'someone', 4, clock_timestamp() + interval '1 minute')`,
      [prefix],
    );
    // A fresh backend sweeps with its first attempt.
    const locker = createLocker(store);
    const lease = await locker.acquire(`${prefix}trigger`, { ttlMs: 5_000 });
    expect(await eventually(async () => (await rowsOf(prefix)).length === 2)).toBe(true);
    expect((await rowsOf(prefix)).map((r) => r.key.slice(prefix.length))).toEqual([
      'live',
      'trigger',
    ]);
    await lease.release();
    await locker.close();
  });

  it('sweeps a backlog larger than one batch (1,000 rows) in one go', async () => {
    const setup = createLocker(store);
    await setup.inspect('setup');
    await setup.close();
    const prefix = `backlog:${randomUUID()}:`;
    await admin.query(
      `INSERT INTO ${table} (key, owner, token, expires_at)
       SELECT $1 || n, 'crashed', n, clock_timestamp() - interval '1 second'
       FROM generate_series(1, 2500) AS n`,
      [prefix],
    );
    expect(await rowsOf(prefix)).toHaveLength(2500);
    const locker = createLocker(store);
    await (await locker.acquire(`trigger:${randomUUID()}`, { ttlMs: 5_000 })).release();
    expect(await eventually(async () => (await rowsOf(prefix)).length === 0)).toBe(true);
    await locker.close();
  });

  it('creates the schema once when several backends start on it at the same moment', async () => {
    const fresh = uniqueSchema('race');
    const backends = Array.from({ length: 6 }, () =>
      createPostgresBackend({ url: PG_URL, schema: fresh, poolSize: 2 }),
    );
    const lockers = backends.map((backend) => createLocker(backend));
    const key = `race:${randomUUID()}`;
    const leases = await Promise.all(lockers.map((l) => l.tryAcquire(key, { ttlMs: 5_000 })));
    expect(leases.filter((lease) => lease !== null)).toHaveLength(1);
    await Promise.all(lockers.map((l) => l.close()));
    await admin.query(`DROP SCHEMA "${fresh}" CASCADE`);
  });

  it('renewals asked for in one turn go to the server as one statement, each with its own answer', async () => {
    const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
    const statements: string[] = [];
    const query = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args) => {
      const statement = args[0];
      // A prepared statement travels as { name, text, values }.
      statements.push(
        typeof statement === 'string' ? statement : String((statement as pg.QueryConfig).text),
      );
      return query(...args);
    };
    const backend = createPostgresBackend({ pool, schema });
    const prefix = `batch:${randomUUID()}:`;
    const owner = (n: number) => `${'0'.repeat(31)}${n}`;
    const leases = [];
    for (let n = 0; n < 5; n++) {
      const key = `${prefix}${n}`;
      const result = await backend.attempt({
        key,
        owner: owner(n),
        ttlMs: 2_000,
        mode: 'write',
        autoRenew: true,
      });
      if (!result.granted) throw new Error('not granted');
      leases.push({ key, owner: owner(n), fencingToken: result.token });
    }
    // Lease 3 vanishes behind the backend's back; lease 4 is taken over by another owner.
    await admin.query(`DELETE FROM ${table} WHERE key = $1`, [leases[3]!.key]);
    await admin.query(`UPDATE ${table} SET owner = 'someone-else' WHERE key = $1`, [
      leases[4]!.key,
    ]);
    statements.length = 0;
    const results = await Promise.all(leases.map((lease) => backend.renew(lease, 60_000)));
    expect(results).toEqual([
      { ok: true, ttlMs: 60_000 },
      { ok: true, ttlMs: 60_000 },
      { ok: true, ttlMs: 60_000 },
      { ok: false, reason: 'not-held' },
      { ok: false, reason: 'not-owner' },
    ]);
    expect(statements).toHaveLength(1);
    expect(statements[0]).toContain('unnest');
    const { rows } = await admin.query<{ key: string; remaining: string }>(
      `SELECT key, extract(epoch FROM expires_at - clock_timestamp())::text AS remaining
       FROM ${table} WHERE key LIKE $1 || '%' ORDER BY key`,
      [prefix],
    );
    expect(rows.slice(0, 3).every((r) => Number(r.remaining) > 50)).toBe(true);
    await backend.close();
    await pool.end();
  });

  it('the hot path runs as named prepared statements, one name per text, also for two schemas on one pool', async () => {
    // One connection, so pg_prepared_statements (per session) shows what the backends prepared.
    const pool = new pg.Pool({ connectionString: PG_URL, max: 1 });
    const other = uniqueSchema('prepared');
    const lockers = [schema, other].map((s) =>
      createLocker(createPostgresBackend({ pool, schema: s })),
    );
    for (const locker of lockers) {
      for (let i = 0; i < 3; i++) await locker.withLock(`prepared:${i}`, async () => undefined);
    }
    const { rows } = await pool.query<{ name: string; statement: string }>(
      `SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'fencelock_%'`,
    );
    // attempt and release for each schema: four statements, each name standing for one text.
    expect(rows).toHaveLength(4);
    expect(new Set(rows.map((r) => r.name)).size).toBe(4);
    for (const s of [schema, other]) {
      expect(rows.filter((r) => r.statement.includes(`"${s}".fencelock_leases`))).toHaveLength(2);
    }
    await Promise.all(lockers.map((l) => l.close()));
    await pool.end();
    await admin.query(`DROP SCHEMA IF EXISTS "${other}" CASCADE`);
  });

  it('a schema of an earlier version is brought up to date once by its owner; a role with table grants only is told what it needs', async () => {
    const old = uniqueSchema('upgrade');
    const role = `fencelock_it_app_${randomUUID().slice(0, 8)}`;
    // An earlier version's objects: the current set-up without the waiter sequence and what
    // follows it (the lock-delay's columns among them).
    const current = sqlFor(old).setup;
    await admin.query(
      current.slice(
        0,
        current.indexOf(`CREATE SEQUENCE IF NOT EXISTS "${old}".fencelock_waiter_seq`),
      ),
    );
    await admin.query(`CREATE ROLE ${role} LOGIN;
      GRANT USAGE, CREATE ON SCHEMA "${old}" TO ${role};
      GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${old}" TO ${role};
      GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "${old}" TO ${role};`);
    const url = new URL(PG_URL);
    url.username = role;
    url.searchParams.set('schema', old);
    try {
      // Adding the lock-delay's columns to tables it does not own: refused, saying what it needs.
      const refused = createLocker(url.toString());
      const error = await refused.tryAcquire('upgrade').catch((e: unknown) => e);
      await refused.close();
      expect(error).toBeInstanceOf(BackendError);
      expect((error as Error).message).toMatch(/upgrading the tables of an earlier version/);
      expect((error as Error).message).toMatch(/needs their ownership, once/);
      // The owner runs fencelock once; from then on the role only uses the tables.
      const ownerUrl = new URL(PG_URL);
      ownerUrl.searchParams.set('schema', old);
      const upgrade = createLocker(ownerUrl.toString());
      expect(await upgrade.inspect('upgrade')).toMatchObject({ holder: null });
      await upgrade.close();
      await admin.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "${old}" TO ${role};
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${old}" TO ${role};
        GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA "${old}" TO ${role};`);
      const locker = createLocker(url.toString());
      const lease = await locker.tryAcquire('upgrade', { lockDelayMs: 1_000 });
      expect(lease).not.toBeNull();
      expect(await lease!.release()).toBe('released');
      await locker.close();
    } finally {
      await admin.query(`DROP SCHEMA "${old}" CASCADE`);
      await admin.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`);
    }
  });

  it('the lock id of a key is the documented SQL expression over SHA-256', async () => {
    for (const key of ['a', 'order:42', 'ключ', '🔒'.repeat(10), 'x'.repeat(1024)]) {
      const { rows } = await admin.query<{ id: string }>(
        `SELECT (('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint)::text AS id`,
        [key],
      );
      expect(lockIdOf(key)).toBe(BigInt(rows[0]!.id));
    }
  });

  it('answers a bad option with InvalidArgumentError and opens no connection', async () => {
    expect(() => createPostgresBackend({ url: PG_URL, schema: 'Bad-Name' })).toThrow(/schema/);
    expect(() => createPostgresBackend({ url: PG_URL, mode: 'row' as 'lease' })).toThrow(/mode/);
    expect(() => createLocker(`${PG_URL}?poolSize=0`)).toThrow(/poolSize/);
    expect(() => createLocker(`${PG_URL}?unknown=1`)).toThrow(/unknown/);
    expect(() => createLocker('postgres://')).toThrow(/host/);
    const { rows } = await admin.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_namespace WHERE nspname = 'Bad-Name'`,
    );
    expect(rows[0]!.n).toBe('0');
  });
});

describe('PostgreSQL lease mode, input found by review', () => {
  it('a 63-character schema still notifies releases (the channel name stays within 63 bytes)', async () => {
    const long = `fencelock_${'s'.repeat(53)}`;
    expect(long).toHaveLength(63);
    const a = createLocker(`${PG_URL}?schema=${long}`);
    const b = createLocker(`${PG_URL}?schema=${long}`);
    const key = `long-schema:${randomUUID()}`;
    const lease = await a.acquire(key, { ttlMs: 30_000 });
    const waiting = b.acquire(key, { waitMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await lease.release()).toBe('released');
    const next = await waiting;
    expect(await next.release()).toBe('released');
    await Promise.all([a.close(), b.close()]);
    await admin.query(`DROP SCHEMA "${long}" CASCADE`);
  });

  it('a token beyond a bigint is answered not-owner / not-held, not with an engine error', async () => {
    const backend = createPostgresBackend({ url: PG_URL, schema });
    const key = `huge-token:${randomUUID()}`;
    const owner = 'f'.repeat(32);
    const huge = 1n << 63n;
    expect(await backend.release({ key, owner, fencingToken: huge })).toBe('not-held');
    expect(await backend.renew({ key, owner, fencingToken: huge }, 1_000)).toEqual({
      ok: false,
      reason: 'not-held',
    });
    const granted = await backend.attempt({
      key,
      owner,
      ttlMs: 5_000,
      mode: 'write',
      autoRenew: true,
    });
    expect(granted.granted).toBe(true);
    expect(await backend.release({ key, owner, fencingToken: huge })).toBe('not-owner');
    expect(await backend.renew({ key, owner, fencingToken: huge }, 1_000)).toEqual({
      ok: false,
      reason: 'not-owner',
    });
    await backend.abandon({ key, owner, ttlMs: 1, mode: 'write', autoRenew: true });
    await backend.close();
  });
});
