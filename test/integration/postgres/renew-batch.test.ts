/**
 * PostgreSQL renewal batching: the same lease renewed twice in one turn (two `extend()` calls).
 * `UPDATE … FROM unnest(…)` would update the row once, from an arbitrary one of the two input
 * rows, so the engine could keep the shorter TTL while the lease believed the longer one. The
 * batcher now sends a lease asked for twice in separate batches, in the order asked. Whether the
 * old code failed depended on PostgreSQL's plan (it did on a small new table): the test uses a
 * fresh schema of its own and many leases.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { createPostgresBackend } from '../../../packages/fencelock/src/backends/postgres/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { PG_URL } from '../../helpers/engines.js';

const schema = `renew_batch_${randomBytes(4).toString('hex')}`;
afterAll(async () => {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
});

describe('PostgreSQL renewal batching, one lease twice in a batch', () => {
  it('two extend() calls of one turn: the engine keeps the TTL the lease believes (the later one)', async () => {
    const locker = createLocker(createPostgresBackend({ url: PG_URL, schema }));
    const mismatches: number[] = [];
    try {
      for (let i = 0; i < 20; i++) {
        const key = `dup-${randomBytes(4).toString('hex')}`;
        const lease = await locker.acquire(key, { ttlMs: 5_000, autoRenew: false });
        await Promise.all([lease.extend(400), lease.extend(60_000)]);
        // The lease now believes 60 s (the later answer); the engine must agree.
        const info = await locker.inspect(key);
        if ((info.holder?.ttlMs ?? 0) < 10_000) mismatches.push(info.holder?.ttlMs ?? -1);
        await lease.release();
      }
    } finally {
      await locker.close();
    }
    expect(mismatches).toEqual([]);
  });
});
