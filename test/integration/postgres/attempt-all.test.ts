/**
 * Several keys' single attempts in one statement on PostgreSQL (`Backend.attemptAll`), what the
 * contract cases cannot see:
 * - lease mode: one statement (one pooled call; through PgBouncer, one transaction), every key
 *   or none with nothing left behind (no row, no line entry) when one key is held or has a
 *   waiter in its line, tokens in order with single attempts on the same keys under concurrency
 *   and no deadlock whatever the order of the keys, an expired lease taken over, readers sharing
 *   and the downgrade rule, keys that need quoting in an array, and a schema of the previous
 *   version upgraded in place;
 * - advisory mode: one statement on the lock connection, no session lock kept when one key is
 *   held elsewhere, a key another owner of the same backend holds refused without a statement.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  createPostgresBackend,
  type PostgresAdvisoryBackend,
  type PostgresBackend,
} from '../../../packages/fencelock/src/backends/postgres/index.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  Granted,
  LockMode,
} from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
} from '../../../packages/fencelock/src/index.js';
import { PGBOUNCER_URL } from '../../helpers/engines.js';
import { adminPool, advisoryLocksOf, dropSchema, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('attempt_all');
const s = `"${schema}"`;
const admin = adminPool();
const closers: (() => Promise<unknown>)[] = [];

afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await dropSchema(admin, schema);
});

const unique = (label: string) => `all-${label}-${randomBytes(4).toString('hex')}`;
const newOwner = () => randomBytes(16).toString('hex');

/** Single attempts at `keys` (sorted), each with an owner of its own. */
function requestsFor(
  keys: readonly string[],
  mode: LockMode = 'write',
  ttlMs = 30_000,
): AttemptRequest[] {
  return [...keys].sort().map((key) => ({
    key,
    owner: newOwner(),
    ttlMs,
    mode,
    autoRenew: false,
    willWait: false,
  }));
}

function newLocker(url = `${PG_URL}?schema=${schema}`): Locker {
  const locker = createLocker(url);
  closers.push(() => locker.close());
  return locker;
}

/** A lease-mode backend on a pool of the test's own, whose calls the test can count. */
function leaseBackend(options: { url?: string; pooler?: 'transaction' } = {}) {
  const pool = new pg.Pool({ connectionString: options.url ?? PG_URL, max: 4 });
  pool.on('error', () => undefined);
  const backend = createPostgresBackend({
    pool,
    schema,
    ...(options.pooler ? { pooler: options.pooler, notifications: false } : {}),
  }) as PostgresBackend;
  closers.push(async () => {
    await backend.close();
    await pool.end();
  });
  return { backend, pool };
}

/** Every row the keys have: lease rows (placeholders too), read grants, line entries. */
async function rowsOf(keys: readonly string[]): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT ((SELECT count(*) FROM ${s}.fencelock_leases WHERE key = ANY($1))
          + (SELECT count(*) FROM ${s}.fencelock_readers WHERE key = ANY($1))
          + (SELECT count(*) FROM ${s}.fencelock_waiters WHERE key = ANY($1)))::text AS n`,
    [keys],
  );
  return Number(rows[0]!.n);
}

async function releaseAll(
  backend: Backend,
  requests: readonly AttemptRequest[],
  results: readonly AttemptResult[],
): Promise<void> {
  for (const [i, result] of results.entries()) {
    if (!result.granted) continue;
    const { key, owner } = requests[i]!;
    expect(await backend.release({ key, owner, fencingToken: result.token })).toBe('released');
  }
}

const granted = (results: readonly AttemptResult[] | null) => results!.map((r) => r.granted);

describe('lease mode', () => {
  it('one statement for every key: one pooled call, all granted or none', async () => {
    const { backend, pool } = leaseBackend();
    // Set-up and the first sweep run first, so that the count sees the attempts only.
    await backend.inspect(unique('warm'));
    const warm = requestsFor([unique('w1'), unique('w2')]);
    await releaseAll(backend, warm, (await backend.attemptAll(warm))!);
    await sleep(300);
    const query = vi.spyOn(pool, 'query');
    try {
      const keys = [unique('a'), unique('b'), unique('c')];
      const requests = requestsFor(keys);
      const results = await backend.attemptAll(requests);
      expect(granted(results)).toEqual([true, true, true]);
      expect(query).toHaveBeenCalledTimes(1);
      expect(JSON.stringify(query.mock.calls[0])).toContain('fencelock_attempt_all');
      // Asked again by other owners: refused in one call as well.
      const others = requestsFor(keys);
      expect(granted(await backend.attemptAll(others))).toEqual([false, false, false]);
      expect(query).toHaveBeenCalledTimes(2);
      await releaseAll(backend, requests, results!);
    } finally {
      query.mockRestore();
    }
  });

  it('through PgBouncer in transaction mode: one transaction (BEGIN, the call, COMMIT)', async () => {
    const { backend, pool } = leaseBackend({ url: PGBOUNCER_URL, pooler: 'transaction' });
    await backend.inspect(unique('warm'));
    const warm = requestsFor([unique('w1'), unique('w2')]);
    await releaseAll(backend, warm, (await backend.attemptAll(warm))!);
    await sleep(300);
    const texts: string[] = [];
    const connect = pool.connect.bind(pool);
    const spy = vi.spyOn(pool, 'connect').mockImplementation((async () => {
      const client = await connect();
      const query = client.query.bind(client);
      client.query = ((text: unknown, ...rest: unknown[]) => {
        texts.push(typeof text === 'string' ? text : JSON.stringify(text));
        return (query as (...args: unknown[]) => unknown)(text, ...rest);
      }) as typeof client.query;
      return client;
    }) as typeof pool.connect);
    try {
      const requests = requestsFor([unique('a'), unique('b'), unique('c')]);
      const results = await backend.attemptAll(requests);
      expect(granted(results)).toEqual([true, true, true]);
      expect(spy).toHaveBeenCalledTimes(1);
      expect(texts).toHaveLength(3);
      expect(texts[0]).toMatch(/^BEGIN; SET LOCAL statement_timeout/);
      expect(texts[1]).toContain('fencelock_attempt_all');
      expect(texts[2]).toBe('COMMIT');
      spy.mockRestore();
      await releaseAll(backend, requests, results!);
    } finally {
      spy.mockRestore();
    }
  });

  it('a held key in the middle: nothing granted, nothing left on the free keys, the holder intact', async () => {
    const { backend } = leaseBackend();
    const keys = [unique('1'), unique('2'), unique('3')].sort();
    const holder = await newLocker().acquire(keys[1]!, { ttlMs: 30_000 });
    const requests = requestsFor(keys);
    const results = await backend.attemptAll(requests);
    expect(granted(results)).toEqual([false, false, false]);
    // The held key is answered as a single attempt is (the holder's time left); the others not.
    expect((results![1] as { holderTtlMs?: number }).holderTtlMs).toBeGreaterThan(25_000);
    expect((results![0] as { holderTtlMs?: number }).holderTtlMs).toBeUndefined();
    // The first key was granted inside the rolled-back block: no row of it stayed.
    expect(await rowsOf([keys[0]!, keys[2]!])).toBe(0);
    expect(await rowsOf([keys[1]!])).toBe(1);
    const info = await backend.inspect(keys[1]!);
    expect(info.holder?.fencingToken).toBe(holder.fencingToken);
    expect(await holder.release()).toBe('released');
    const again = await backend.attemptAll(requests);
    expect(granted(again)).toEqual([true, true, true]);
    expect((again![1] as Granted).token).toBeGreaterThan(holder.fencingToken);
    await releaseAll(backend, requests, again!);
    expect(await rowsOf(keys)).toBe(0);
  });

  it('a free key with a waiter in its line is not free for the call (the fair line), as for tryAcquire', async () => {
    const { backend } = leaseBackend();
    const keys = [unique('1'), unique('2')].sort();
    const waiter = newOwner();
    await admin.query(
      `INSERT INTO ${s}.fencelock_waiters (key, owner, seq, expires_at)
       VALUES ($1, $2, nextval('${s}.fencelock_waiter_seq'), clock_timestamp() + interval '60 seconds')`,
      [keys[1], waiter],
    );
    const requests = requestsFor(keys);
    expect(granted(await backend.attemptAll(requests))).toEqual([false, false]);
    expect(await newLocker().tryAcquire(keys[1]!)).toBeNull();
    // The waiter keeps its place; nothing else was written.
    const { rows } = await admin.query(
      `SELECT owner FROM ${s}.fencelock_waiters WHERE key = ANY($1)`,
      [keys],
    );
    expect(rows).toEqual([{ owner: waiter }]);
    expect(await rowsOf([keys[0]!])).toBe(0);
    await admin.query(`DELETE FROM ${s}.fencelock_waiters WHERE key = $1`, [keys[1]]);
    const results = await backend.attemptAll(requests);
    expect(granted(results)).toEqual([true, true]);
    await releaseAll(backend, requests, results!);
  });

  it('an expired lease is taken over with a greater token; the first owners then hold nothing', async () => {
    const { backend } = leaseBackend();
    const keys = [unique('1'), unique('2'), unique('3')];
    const first = requestsFor(keys, 'write', 150);
    const firstResults = (await backend.attemptAll(first))!;
    expect(granted(firstResults)).toEqual([true, true, true]);
    await sleep(250);
    const second = requestsFor(keys);
    const secondResults = (await backend.attemptAll(second))!;
    expect(granted(secondResults)).toEqual([true, true, true]);
    for (const [i, result] of secondResults.entries()) {
      expect((result as Granted).token).toBeGreaterThan((firstResults[i] as Granted).token);
      const { key, owner } = first[i]!;
      const stale = { key, owner, fencingToken: (firstResults[i] as Granted).token };
      expect(await backend.renew(stale, 1_000)).toEqual({ ok: false, reason: 'not-owner' });
      expect(await backend.release(stale)).toBe('not-owner');
    }
    await releaseAll(backend, second, secondResults);
    expect(await rowsOf(keys)).toBe(0);
  });

  it('with single attempts on the same keys: never two holders, each key’s tokens rising', async () => {
    const keys = [unique('x'), unique('y'), unique('z')];
    const lockers = [newLocker(), newLocker(), newLocker(), newLocker()];
    const calls = await Promise.all(
      lockers.map(async (l) => vi.spyOn((await l.backend()) as PostgresBackend, 'attemptAll')),
    );
    const holder = new Map<string, number>();
    const lastToken = new Map<string, bigint>();
    const violations: string[] = [];
    let multiGrants = 0;
    let singleGrants = 0;
    const take = (worker: number, key: string, token: bigint) => {
      if (holder.has(key)) violations.push(`${key} held by ${holder.get(key)} and ${worker}`);
      if (token <= (lastToken.get(key) ?? 0n)) violations.push(`${key}: ${token} not rising`);
      holder.set(key, worker);
      lastToken.set(key, token);
    };
    await Promise.all(
      lockers.map(async (locker, worker) => {
        for (let round = 0; round < 60; round++) {
          if ((round + worker) % 2 === 0) {
            const set = round % 3 === 0 ? keys : [keys[round % 3]!, keys[(round + 1) % 3]!];
            const all = await locker.tryAcquireAll(set, { ttlMs: 10_000 });
            if (all === null) continue;
            multiGrants++;
            for (const lease of all.leases) take(worker, lease.key, lease.fencingToken);
            await sleep(1);
            for (const lease of all.leases) holder.delete(lease.key);
            await all.release();
          } else {
            const lease = await locker.tryAcquire(keys[round % 3]!, { ttlMs: 10_000 });
            if (lease === null) continue;
            singleGrants++;
            take(worker, lease.key, lease.fencingToken);
            await sleep(1);
            holder.delete(lease.key);
            await lease.release();
          }
        }
      }),
    );
    expect(violations).toEqual([]);
    expect(multiGrants).toBeGreaterThan(0);
    expect(singleGrants).toBeGreaterThan(0);
    expect(calls.reduce((n, spy) => n + spy.mock.calls.length, 0)).toBeGreaterThan(0);
    for (const spy of calls) spy.mockRestore();
  });

  it('calls sharing keys in opposite orders never deadlock (the locks go in one order)', async () => {
    const a = leaseBackend().backend;
    const b = leaseBackend().backend;
    const keys = [unique('p'), unique('q'), unique('r'), unique('t')];
    let grants = 0;
    const errors: unknown[] = [];
    const run = async (backend: PostgresBackend, order: readonly string[]) => {
      for (let i = 0; i < 150; i++) {
        // Not sorted on purpose: the function orders the locks itself.
        const requests = order.map((key) => ({ ...requestsFor([key])[0]! }));
        try {
          const results = (await backend.attemptAll(requests))!;
          if (results.every((r) => r.granted)) {
            grants++;
            await releaseAll(backend, requests, results);
          }
        } catch (error) {
          errors.push(error);
        }
      }
    };
    await Promise.all([run(a, keys), run(b, [...keys].reverse())]);
    expect(errors).toEqual([]);
    expect(grants).toBeGreaterThan(0);
  });

  it('readers share with a single reader; a write entry in the line keeps a newcomer reader out', async () => {
    const { backend } = leaseBackend();
    const keys = [unique('1'), unique('2')].sort();
    const single = await newLocker().acquire(keys[0]!, { mode: 'read', ttlMs: 30_000 });
    const readers = requestsFor(keys, 'read');
    const results = (await backend.attemptAll(readers))!;
    expect(granted(results)).toEqual([true, true]);
    expect((results[0] as Granted).token).toBeGreaterThan(single.fencingToken);
    // A writer on both keys is refused; a writer lined up on one keeps new readers out of it.
    expect(granted(await backend.attemptAll(requestsFor(keys)))).toEqual([false, false]);
    await admin.query(
      `INSERT INTO ${s}.fencelock_waiters (key, owner, seq, expires_at, reader)
       VALUES ($1, $2, nextval('${s}.fencelock_waiter_seq'), clock_timestamp() + interval '60 seconds', false)`,
      [keys[1], newOwner()],
    );
    const late = requestsFor(keys, 'read');
    expect(granted(await backend.attemptAll(late))).toEqual([false, false]);
    const { rows } = await admin.query(
      `SELECT owner FROM ${s}.fencelock_readers WHERE owner = ANY($1)`,
      [late.map((r) => r.owner)],
    );
    expect(rows).toEqual([]);
    await admin.query(`DELETE FROM ${s}.fencelock_waiters WHERE key = $1`, [keys[1]]);
    await releaseAll(backend, readers, results);
    expect(await single.release()).toBe('released');
    expect(await rowsOf(keys)).toBe(0);
  });

  it('a downgrade inside the caller’s write lock is granted; refused (typed, nothing granted) while another writer waits', async () => {
    const { backend } = leaseBackend();
    const keys = [unique('1'), unique('2')].sort();
    const writer = newOwner();
    const write = (await backend.attempt({
      key: keys[1]!,
      owner: writer,
      ttlMs: 30_000,
      mode: 'write',
      autoRenew: false,
      willWait: false,
    })) as Granted;
    expect(write.granted).toBe(true);
    const downgrade = requestsFor(keys, 'read').map((r) =>
      r.key === keys[1] ? { ...r, heldWriter: writer } : r,
    );
    const results = (await backend.attemptAll(downgrade))!;
    expect(granted(results)).toEqual([true, true]);
    await releaseAll(backend, downgrade, results);
    await admin.query(
      `INSERT INTO ${s}.fencelock_waiters (key, owner, seq, expires_at, reader)
       VALUES ($1, $2, nextval('${s}.fencelock_waiter_seq'), clock_timestamp() + interval '60 seconds', false)`,
      [keys[1], newOwner()],
    );
    const blocked = requestsFor(keys, 'read').map((r) =>
      r.key === keys[1] ? { ...r, heldWriter: writer } : r,
    );
    await expect(backend.attemptAll(blocked)).rejects.toBeInstanceOf(InvalidArgumentError);
    // The first key, granted before the second was refused, kept nothing.
    expect(await rowsOf([keys[0]!])).toBe(0);
    await admin.query(`DELETE FROM ${s}.fencelock_waiters WHERE key = $1`, [keys[1]]);
    expect(await backend.release({ key: keys[1]!, owner: writer, fencingToken: write.token })).toBe(
      'released',
    );
  });

  it('keys that need quoting inside an array literal arrive intact', async () => {
    const { backend } = leaseBackend();
    const tag = randomBytes(3).toString('hex');
    const keys = [
      `q"uote ${tag}`,
      `back\\slash ${tag}`,
      `{brace,comma} ${tag}`,
      `NULL`,
      `  spaced ${tag}  `,
      `élan 🔒 ${tag}`,
    ];
    await admin.query(`DELETE FROM ${s}.fencelock_leases WHERE key = 'NULL'`);
    const requests = requestsFor(keys);
    const results = (await backend.attemptAll(requests))!;
    expect(granted(results)).toEqual(keys.map(() => true));
    for (const [i, request] of requests.entries()) {
      const info = await backend.inspect(request.key);
      expect(info.holder?.owner, request.key).toBe(request.owner);
      expect(info.holder?.fencingToken).toBe((results[i] as Granted).token);
    }
    await releaseAll(backend, requests, results);
  });

  it('a schema of the previous version gets the function in place on the first operation; its leases stay', async () => {
    const old = uniqueSchema('upgrade_all');
    const current = sqlFor(old).setup;
    const previous = current.slice(0, current.indexOf('-- Single attempts at p_keys'));
    expect(previous).not.toContain('fencelock_attempt_all');
    expect(previous).toContain('fencelock_readers');
    await admin.query(previous);
    try {
      await admin.query(
        `INSERT INTO "${old}".fencelock_leases (key, owner, token, expires_at)
         VALUES ('held', $1, nextval('"${old}".fencelock_token_seq'), clock_timestamp() + interval '60 seconds')`,
        ['e'.repeat(32)],
      );
      const backend = createPostgresBackend({ url: PG_URL, schema: old }) as PostgresBackend;
      closers.push(() => backend.close());
      const refused = await backend.attemptAll(requestsFor(['free', 'held']));
      expect(granted(refused)).toEqual([false, false]);
      const requests = requestsFor(['free', 'other']);
      const results = (await backend.attemptAll(requests))!;
      expect(granted(results)).toEqual([true, true]);
      expect((results[0] as Granted).token).toBeGreaterThan(1n);
      await releaseAll(backend, requests, results);
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${old}" CASCADE`);
    }
  });
});

describe('advisory mode', () => {
  function advisoryBackend(): PostgresAdvisoryBackend {
    const backend = createPostgresBackend({
      url: PG_URL,
      schema,
      mode: 'advisory',
    }) as PostgresAdvisoryBackend;
    closers.push(() => backend.close());
    return backend;
  }

  /** Count the statements sent on `backend`'s lock connection while `fn` runs. */
  async function onLockConnection<T>(
    backend: PostgresAdvisoryBackend,
    fn: () => Promise<T>,
  ): Promise<{ value: T; statements: number }> {
    let statements = 0;
    const query = pg.Client.prototype.query;
    const spy = vi.spyOn(pg.Client.prototype, 'query').mockImplementation(function (
      this: pg.Client,
      ...args: unknown[]
    ) {
      if ((this as { processID?: number }).processID === backend.sessionPid) statements++;
      return (query as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof query);
    try {
      return { value: await fn(), statements };
    } finally {
      spy.mockRestore();
    }
  }

  it('one statement on the lock connection; every lock held after, none after the release', async () => {
    const backend = advisoryBackend();
    const warm = requestsFor([unique('w1'), unique('w2')]);
    await releaseAll(backend, warm, (await backend.attemptAll(warm))!);
    await sleep(300);
    const keys = [unique('a'), unique('b'), unique('c')];
    const requests = requestsFor(keys);
    const { value: results, statements } = await onLockConnection(backend, () =>
      backend.attemptAll(requests),
    );
    expect(granted(results)).toEqual([true, true, true]);
    expect(statements).toBe(1);
    for (const [i, request] of requests.entries()) {
      expect(await advisoryLocksOf(admin, request.key)).toBe(1);
      expect((await backend.inspect(request.key)).holder?.fencingToken).toBe(
        (results![i] as Granted).token,
      );
    }
    await releaseAll(backend, requests, results!);
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(0);
  });

  it('a key held by another session: nothing granted, and no lock of the free keys kept', async () => {
    const backend = advisoryBackend();
    const other = advisoryBackend();
    const keys = [unique('1'), unique('2'), unique('3')].sort();
    const held = requestsFor([keys[2]!]);
    const heldResult = (await other.attempt(held[0]!)) as Granted;
    expect(heldResult.granted).toBe(true);
    const requests = requestsFor(keys);
    const results = (await backend.attemptAll(requests))!;
    expect(granted(results)).toEqual([false, false, false]);
    // The held key is answered as `attempt` answers (a wait on its release); the others not.
    expect(results[2]).toHaveProperty('waitForChange');
    expect(results[0]).not.toHaveProperty('waitForChange');
    expect(await advisoryLocksOf(admin, keys[0]!)).toBe(0);
    expect(await advisoryLocksOf(admin, keys[1]!)).toBe(0);
    expect(await advisoryLocksOf(admin, keys[2]!)).toBe(1);
    const { rows } = await admin.query(
      `SELECT key FROM ${s}.fencelock_advisory_holders WHERE key = ANY($1)`,
      [keys],
    );
    expect(rows).toEqual([{ key: keys[2] }]);
    await releaseAll(other, held, [heldResult]);
    const again = (await backend.attemptAll(requests))!;
    expect(granted(again)).toEqual([true, true, true]);
    expect((again[2] as Granted).token).toBeGreaterThan(heldResult.token);
    // Retried by the same owners: the same grants, no second lock on the server.
    const retried = (await backend.attemptAll(requests))!;
    expect(retried.map((r) => (r as Granted).token)).toEqual(
      again.map((r) => (r as Granted).token),
    );
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(1);
    await releaseAll(backend, requests, again);
    for (const key of keys) expect(await advisoryLocksOf(admin, key)).toBe(0);
  });

  it('a key another owner of the same backend holds is refused without a statement', async () => {
    const backend = advisoryBackend();
    const keys = [unique('1'), unique('2')].sort();
    const mine = requestsFor([keys[0]!]);
    const mineResult = (await backend.attempt(mine[0]!)) as Granted;
    expect(mineResult.granted).toBe(true);
    const requests = requestsFor(keys);
    const { value: results, statements } = await onLockConnection(backend, () =>
      backend.attemptAll(requests),
    );
    expect(granted(results)).toEqual([false, false]);
    expect(statements).toBe(0);
    expect(await advisoryLocksOf(admin, keys[1]!)).toBe(0);
    await releaseAll(backend, mine, [mineResult]);
  });
});
