/**
 * PostgreSQL waiting: waiters stand in a FIFO line per key, and each release is announced
 * with NOTIFY addressed to the head of the line, which only that waiter wakes for (no herd);
 * without notifications waiters still get the key by polling; a dropped listener connection
 * wakes its waiters and is opened again.
 *
 * Waiters use a long retry delay; a waiter still attempts every 500 ms (its recheck, which keeps
 * its line entry alive), so the tests below look at less than that after a release. Holders use
 * 60 s TTLs, so no holder's TTL bounds a wait.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createPostgresBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import {
  parseNotice,
  ReleaseListener,
} from '../../../packages/fencelock/src/backends/postgres/listener.js';
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

/** Owners in the line of `key`, head first. */
async function line(key: string): Promise<string[]> {
  const { rows } = await admin.query<{ owner: string }>(
    `SELECT owner FROM "${schema}".fencelock_waiters WHERE key = $1 ORDER BY seq`,
    [key],
  );
  return rows.map((row) => row.owner);
}

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
  it('four local waiters are granted in arrival order, each soon after the release before it', async () => {
    const key = `line:${randomUUID()}`;
    const holder = createLocker(backend());
    const waiters = createLocker(backend());
    const first = await holder.acquire(key, { ttlMs: 60_000 });
    await listening(waiters);

    const granted: { name: string; lease: Lease }[] = [];
    const pending: Promise<unknown>[] = [];
    for (const name of ['a', 'b', 'c', 'd']) {
      pending.push(
        waiters
          .acquire(key, { ttlMs: 60_000, waitMs: 30_000, retry: SLOW_RETRY })
          .then((lease) => granted.push({ name, lease })),
      );
      // Each one is in line before the next asks.
      expect(await eventually(async () => (await line(key)).length === pending.length)).toBe(true);
    }
    let release: Lease = first;
    for (let round = 1; round <= 4; round++) {
      const releasedAt = performance.now();
      expect(await release.release()).toBe('released');
      expect(await eventually(() => granted.length === round)).toBe(true);
      // Woken by the release addressed to it, not by its next recheck (500 ms).
      expect(performance.now() - releasedAt).toBeLessThan(400);
      release = granted[round - 1]!.lease;
    }
    expect(granted.map((g) => g.name)).toEqual(['a', 'b', 'c', 'd']);
    expect(await line(key)).toEqual([]);
    await release.release();
    await Promise.all(pending);
    await Promise.all([holder.close(), waiters.close()]);
  });

  it('a release notification wakes the head of the line only; one for a key nobody lines up for, the longest waiter', async () => {
    const channel = `fencelock:${schema}`;
    const listener = new ReleaseListener(async () => {
      const client = new pg.Client({ connectionString: PG_URL });
      await client.connect();
      return client;
    }, channel);
    try {
      listener.mark();
      expect(await eventually(() => listener.mark() >= 0)).toBe(true);
      const key = `addressed:${randomUUID()}`;
      const woken: string[] = [];
      const control = new AbortController();
      const mark = listener.mark();
      const waits = ['aaaa', 'bbbb'].map((owner) =>
        listener.wait(key, owner, mark, control.signal, 10_000).then(() => woken.push(owner)),
      );
      await admin.query('SELECT pg_notify($1, $2)', [channel, `4:bbbb${key}`]);
      expect(await eventually(() => woken.length === 1)).toBe(true);
      await sleep(300);
      expect(woken).toEqual(['bbbb']);
      await admin.query('SELECT pg_notify($1, $2)', [channel, `0:${key}`]);
      expect(await eventually(() => woken.length === 2)).toBe(true);
      expect(woken).toEqual(['bbbb', 'aaaa']);
      await Promise.all(waits);
    } finally {
      await listener.close();
    }
  });

  it('the notice names the head and the key, whatever characters they hold', () => {
    expect(parseNotice('4:bbbbstock:42')).toEqual({ key: 'stock:42', head: 'bbbb' });
    expect(parseNotice('0:stock:42')).toEqual({ key: 'stock:42', head: undefined });
    // Lengths count characters, as PostgreSQL's length() does.
    expect(parseNotice('2:😀éclé')).toEqual({ key: 'clé', head: '😀é' });
    // A payload of another form (an earlier version's bare key) is the key.
    expect(parseNotice('stock:42')).toEqual({ key: 'stock:42', head: undefined });
    expect(parseNotice('9:short')).toEqual({ key: '9:short', head: undefined });
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
