/**
 * PostgreSQL waiting: releases are announced with NOTIFY and each announcement sends one local
 * waiter back to the table (no herd); without notifications waiters still get the key by
 * polling; a dropped listener connection wakes its waiters and is opened again.
 *
 * Waiters use a long retry delay, so a re-attempt within the test's window can only come from
 * a notification (the core's poll would wait the backoff plus 4 × maxDelayMs), except where a
 * holder's TTL bounds the wait: holders here use 60 s TTLs.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { createLocker, type Lease, type Locker } from '../../../packages/fencelock/src/index.js';
import {
  adminPool,
  countingAttempts,
  dropSchema,
  eventually,
  PG_URL,
  sleep,
  uniqueSchema,
} from './support.js';

const schema = uniqueSchema('notify');
const admin = adminPool();
const SLOW_RETRY = { initialDelayMs: 5_000, maxDelayMs: 5_000 };

afterAll(async () => {
  await dropSchema(admin, schema);
});

function backend(notifications = true): PostgresBackend {
  return createPostgresBackend({ url: PG_URL, schema, notifications }) as PostgresBackend;
}

/**
 * Start the listener of `locker`'s backend: the first attempt of a backend takes its mark
 * before LISTEN is confirmed, so its waiter re-attempts once it is; later attempts are covered.
 */
async function listening(locker: Locker): Promise<void> {
  const warm = await locker.tryAcquire(`warm:${randomUUID()}`);
  await warm?.release();
  await sleep(300);
}

describe('PostgreSQL LISTEN/NOTIFY waiting', () => {
  it('each release sends exactly one of four local waiters back to the table', async () => {
    const key = `herd:${randomUUID()}`;
    const holder = createLocker(backend());
    const { backend: counted, attempts } = countingAttempts(backend());
    const waiters = createLocker(counted);
    const first = await holder.acquire(key, { ttlMs: 60_000 });
    await listening(waiters);
    const base = attempts();

    const granted: Lease[] = [];
    const pending = Array.from({ length: 4 }, () =>
      waiters.acquire(key, { ttlMs: 60_000, waitMs: 30_000, retry: SLOW_RETRY }).then((lease) => {
        granted.push(lease);
        return lease;
      }),
    );
    expect(await eventually(() => attempts() - base === 4)).toBe(true);
    await sleep(300);
    expect(attempts() - base).toBe(4);

    let release: Lease = first;
    for (let round = 1; round <= 4; round++) {
      const before = attempts();
      expect(await release.release()).toBe('released');
      expect(await eventually(() => granted.length === round)).toBe(true);
      await sleep(300);
      // One waiter went back and got the key; the others stayed asleep.
      expect(attempts() - before).toBe(1);
      release = granted[round - 1]!;
    }
    await release.release();
    await Promise.all(pending);
    await Promise.all([holder.close(), waiters.close()]);
  });

  it('without notifications a waiter still gets the key, by polling', async () => {
    const key = `poll:${randomUUID()}`;
    const holder = createLocker(backend(false));
    const { backend: counted, attempts } = countingAttempts(backend(false));
    const waiter = createLocker(counted);
    const lease = await holder.acquire(key, { ttlMs: 60_000 });
    const waiting = waiter.acquire(key, {
      waitMs: 20_000,
      retry: { initialDelayMs: 50, maxDelayMs: 200 },
    });
    await sleep(1_000);
    expect(attempts()).toBeGreaterThan(2);
    await lease.release();
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    await next.release();
    await Promise.all([holder.close(), waiter.close()]);
  });

  it('a terminated listener connection wakes its waiters, and the next release is heard again', async () => {
    const key = `listener:${randomUUID()}`;
    const holder = createLocker(backend());
    const { backend: counted, attempts } = countingAttempts(backend());
    const waiter = createLocker(counted);
    const lease = await holder.acquire(key, { ttlMs: 60_000 });
    await listening(waiter);
    const base = attempts();
    const waiting = waiter.acquire(key, { waitMs: 30_000, retry: SLOW_RETRY });
    expect(await eventually(() => attempts() - base === 1)).toBe(true);
    await sleep(300);
    expect(attempts() - base).toBe(1);

    const channel = `LISTEN "fencelock:${schema}"`;
    const { rows } = await admin.query<{ n: string }>(
      `SELECT count(pg_terminate_backend(pid))::text AS n FROM pg_stat_activity WHERE query = $1`,
      [channel],
    );
    // Two listeners: the holder's and the waiter's backends each have one.
    expect(rows[0]!.n).toBe('2');
    // The waiter went back to the table at once, and listens again (its mark was taken while
    // the listener was down, so it re-attempts once LISTEN is confirmed).
    expect(await eventually(() => attempts() - base >= 2)).toBe(true);
    expect(
      await eventually(async () => {
        const r = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE query = $1`, [channel]);
        return (r.rowCount ?? 0) >= 1;
      }),
    ).toBe(true);
    await sleep(1_200);
    const before = attempts();
    await lease.release();
    const next = await waiting;
    expect(attempts() - before).toBeLessThanOrEqual(2);
    await next.release();
    await Promise.all([holder.close(), waiter.close()]);
  });
});
