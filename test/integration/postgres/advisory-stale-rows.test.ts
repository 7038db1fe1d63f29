/**
 * PostgreSQL advisory-lock mode: the holder rows of sessions that were terminated (or crashed)
 * do not pile up. Their locks went with their sessions, but their rows in
 * `fencelock_advisory_holders` stayed; a backend's first attempt (then its timer, once a minute)
 * sweeps every row whose session no longer holds its lock, and leaves the live holders' rows.
 * The sweep runs beside grants and releases without deleting a live holder's row.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresAdvisoryBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, eventually, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('advstale');
const admin = adminPool();
const holders = `"${schema}".fencelock_advisory_holders`;

afterAll(async () => {
  await dropSchema(admin, schema);
});

function advisoryBackend(): PostgresAdvisoryBackend {
  return createPostgresBackend({
    url: PG_URL,
    schema,
    mode: 'advisory',
    poolSize: 2,
  }) as PostgresAdvisoryBackend;
}

/** Holder rows of `keys`. */
async function rowsOf(keys: readonly string[]): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM ${holders} WHERE key = ANY($1::text[])`,
    [keys],
  );
  return Number(rows[0]!.n);
}

describe('PostgreSQL advisory-lock mode, rows of dead sessions', () => {
  it('rows of N terminated sessions are gone after the next attempt; live holders keep theirs', async () => {
    const N = 5;
    const run = randomUUID();
    const keys = Array.from({ length: N }, (_, i) => `dead:${run}:${i}`);
    const backends = keys.map(() => advisoryBackend());
    const lockers = backends.map((backend) => createLocker(backend));
    const leases: Lease[] = [];
    for (const [i, key] of keys.entries()) {
      leases.push(await lockers[i]!.acquire(key, { ttlMs: 60_000 }));
    }
    // A live holder, whose row must survive the sweep.
    const live = createLocker(advisoryBackend());
    const liveKey = `live:${run}`;
    const liveLease = await live.acquire(liveKey, { ttlMs: 60_000 });
    expect(await rowsOf([...keys, liveKey])).toBe(N + 1);

    const pids = backends.map((backend) => backend.sessionPid);
    await admin.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);
    expect(await eventually(() => leases.every((lease) => lease.signal.aborted))).toBe(true);
    expect(
      await eventually(async () => {
        const { rows } = await admin.query(
          'SELECT 1 FROM pg_stat_activity WHERE pid = ANY($1::int[])',
          [pids],
        );
        return rows.length === 0;
      }),
    ).toBe(true);
    // The locks are gone with the sessions, the rows are not (yet): nothing backs them.
    expect(await rowsOf(keys)).toBe(N);
    for (const key of keys) expect((await live.inspect(key)).holder).toBeNull();

    // The next operation: a fresh backend's first attempt sweeps.
    const next = createLocker(advisoryBackend());
    const other = await next.acquire(`other:${run}`, { ttlMs: 10_000 });
    expect(await eventually(async () => (await rowsOf(keys)) === 0, 3_000)).toBe(true);
    // Live holders keep their rows and stay visible.
    expect(await rowsOf([liveKey, other.key])).toBe(2);
    expect((await next.inspect(liveKey)).holder?.owner).toBe(liveLease.owner);

    await Promise.all([liveLease.release(), other.release()]);
    await Promise.all([...lockers, live, next].map((locker) => locker.close()));
  });

  it('the sweep beside grants and releases never deletes a live holder’s row', async () => {
    const sweep = sqlFor(schema).advisorySweep;
    const run = randomUUID();
    const keys = Array.from({ length: 6 }, (_, i) => `busy:${run}:${i}`);
    const lockers = [1, 2, 3].map(() => createLocker(advisoryBackend()));
    const observer = createLocker(advisoryBackend());
    const stopAt = performance.now() + 2_000;
    let sweeps = 0;
    let checked = 0;
    const missing: string[] = [];
    const sweeping = (async () => {
      while (performance.now() < stopAt) {
        await admin.query(sweep, [1_000]);
        sweeps += 1;
      }
    })();
    const workers = lockers.map(async (locker, w) => {
      for (let i = 0; performance.now() < stopAt; i++) {
        const key = keys[(w + i) % keys.length]!;
        const lease = await locker.tryAcquire(key, { ttlMs: 10_000 });
        if (lease === null) {
          await sleep(1);
          continue;
        }
        // Held now: its row must be there whatever the sweep does meanwhile.
        const info = await observer.inspect(key);
        checked += 1;
        if (info.holder?.fencingToken !== lease.fencingToken) missing.push(key);
        await lease.release();
      }
    });
    await Promise.all([sweeping, ...workers]);
    expect(sweeps).toBeGreaterThan(10);
    expect(checked).toBeGreaterThan(20);
    expect(missing).toEqual([]);
    // Everything released: no row is left.
    expect(await rowsOf(keys)).toBe(0);
    await Promise.all([...lockers, observer].map((locker) => locker.close()));
  });
});
