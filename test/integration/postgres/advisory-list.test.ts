/**
 * PostgreSQL advisory-lock mode, `list`: what the contract cannot see. A holder row whose
 * session was terminated (its lock went with it, the row stays until the sweep) is not listed,
 * while live holders of other processes' sessions are; a page walks at most `pageSize` rows of
 * the holders table; the cursor of lease mode's semaphore part is not one of this store.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { formatListCursor } from '../../../packages/fencelock/src/backends/list-cursor.js';
import {
  createPostgresBackend,
  type PostgresAdvisoryBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import {
  createLocker,
  type InvalidArgumentError,
  type ListedLock,
} from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, eventually, PG_URL, uniqueSchema } from './support.js';

const schema = uniqueSchema('advlist');
const admin = adminPool();
const backends: PostgresAdvisoryBackend[] = [];

afterAll(async () => {
  await Promise.all(backends.map((backend) => backend.close()));
  await dropSchema(admin, schema);
});

function advisoryBackend(): PostgresAdvisoryBackend {
  const backend = createPostgresBackend({
    url: PG_URL,
    schema,
    mode: 'advisory',
    poolSize: 2,
  }) as PostgresAdvisoryBackend;
  backends.push(backend);
  return backend;
}

async function collect(iterable: AsyncIterable<ListedLock>): Promise<ListedLock[]> {
  const entries: ListedLock[] = [];
  for await (const entry of iterable) entries.push(entry);
  return entries;
}

describe('PostgreSQL advisory-lock mode, list', () => {
  it('lists the holders whose session holds the lock; a terminated session’s row is not', async () => {
    const prefix = `advlist:${randomUUID()}:`;
    const dying = advisoryBackend();
    const living = advisoryBackend();
    const lease = await createLocker(dying).acquire(`${prefix}dead`, { ttlMs: 60_000 });
    const live = await createLocker(living).acquire(`${prefix}live`, { ttlMs: 60_000 });
    const reader = createLocker(advisoryBackend());
    expect((await collect(reader.list({ prefix }))).map((e) => e.key)).toEqual([
      `${prefix}dead`,
      `${prefix}live`,
    ]);

    await admin.query('SELECT pg_terminate_backend($1)', [dying.sessionPid]);
    expect(await eventually(() => lease.signal.aborted)).toBe(true);
    // The row stays until a sweep; the listing reads pg_locks and leaves it out at once.
    const { rows } = await admin.query(
      `SELECT 1 FROM "${schema}".fencelock_advisory_holders WHERE key = $1`,
      [`${prefix}dead`],
    );
    expect(rows).toHaveLength(1);
    const listed = await collect(reader.list({ prefix }));
    expect(listed).toEqual([
      {
        key: `${prefix}live`,
        mode: 'write',
        holders: [
          { owner: live.owner, fencingToken: live.fencingToken, ttlMs: expect.any(Number) },
        ],
        waiters: 0,
      },
    ]);
    expect(listed[0]!.holders[0]!.ttlMs).toBeGreaterThan(0);
    await live.release();
  });

  it('a page walks at most pageSize rows; a cursor of another store’s part is refused', async () => {
    const prefix = `advpage:${randomUUID()}:`;
    const locker = createLocker(advisoryBackend());
    const leases = [];
    for (let i = 0; i < 5; i += 1) {
      leases.push(await locker.acquire(`${prefix}${i}`, { ttlMs: 60_000 }));
    }
    const first = await locker.listPage({ prefix, pageSize: 2 });
    expect(first.entries.map((e) => e.key)).toEqual([`${prefix}0`, `${prefix}1`]);
    const second = await locker.listPage({ prefix, pageSize: 2, cursor: first.cursor });
    expect(second.entries.map((e) => e.key)).toEqual([`${prefix}2`, `${prefix}3`]);
    // Lease mode's semaphore part: advisory mode has none.
    const semaphorePart = formatListCursor({ part: 'p', after: null });
    const refused = await locker
      .listPage({ prefix, cursor: semaphorePart })
      .catch((e: unknown) => e);
    expect((refused as InvalidArgumentError).argument).toBe('cursor');
    await Promise.all(leases.map((lease) => lease.release()));
  });
});
