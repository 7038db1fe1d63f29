/**
 * A grant that reaches an owner-addressed acquire after it gave up must not be withdrawn when
 * the same owner is acquiring again: on the engine both are one row (a repeated attempt by the
 * holder keeps its token), so withdrawing the stale one deleted the grant the retry had just
 * been told it holds (found by review: a sidecar client that hung up and retried).
 *
 * The engine is made slow on one key by holding, from another session, the transaction-lock
 * pair the lease mode takes before drawing a token.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { xactLockPairOf } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import { createLocker, LockTimeoutError } from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('late');
const admin = adminPool();

afterAll(async () => {
  await dropSchema(admin, schema);
});

describe('owner-addressed acquire on PostgreSQL', () => {
  it('a stale attempt answered after a retry of the same owner leaves the retry its grant', async () => {
    const locker = createLocker(`${PG_URL}?schema=${schema}`);
    const other = createLocker(`${PG_URL}?schema=${schema}`);
    const key = `late:${randomUUID()}`;
    const owner = randomUUID().replaceAll('-', '');
    await locker.inspect(key); // creates the schema
    const blocker = new pg.Client({ connectionString: PG_URL });
    await blocker.connect();
    const [hi, lo] = xactLockPairOf(key);
    await blocker.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [hi, lo]);
    try {
      const first = await locker
        .acquireForOwner(key, owner, { ttlMs: 30_000, waitMs: 200 })
        .catch((error: unknown) => error);
      expect(first).toBeInstanceOf(LockTimeoutError);
      const retry = locker.acquireForOwner(key, owner, { ttlMs: 30_000, waitMs: 10_000 });
      await sleep(200);
      await blocker.query('SELECT pg_advisory_unlock($1::int4, $2::int4)', [hi, lo]);
      const grant = await retry;
      expect(grant.owner).toBe(owner);
      // Let the stale attempt's answer land and anything it would trigger run.
      await sleep(500);
      const info = await other.inspect(key);
      expect(info.holder?.owner).toBe(owner);
      expect(info.holder?.fencingToken).toBe(grant.fencingToken);
      expect(
        await other.tryAcquireForOwner(key, randomUUID().replaceAll('-', ''), { ttlMs: 1_000 }),
      ).toBeNull();
      expect(await locker.releaseForOwner({ key, owner, fencingToken: grant.fencingToken })).toBe(
        'released',
      );
    } finally {
      await blocker.end();
      await Promise.all([locker.close(), other.close()]);
    }
  });
});
