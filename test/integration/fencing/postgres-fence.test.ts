/**
 * The PostgreSQL fencing guard on the server of `scripts/services.sh` (no mock): an older token is
 * refused with both tokens, an equal one accepted, a newer one advances, exactly beyond 2^53; the
 * transaction form commits the caller's own SQL only while the token is current and rolls it back
 * otherwise; 20 racing writers leave the highest token and every older write that came after a
 * newer one is refused. Each run works in its own schema, dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PG_MAX_TOKEN, PgFence } from '../../../packages/fencelock/src/fencing/index.js';
import {
  BackendError,
  InvalidArgumentError,
  StaleTokenError,
} from '../../../packages/fencelock/src/index.js';
import { PG_URL } from '../../helpers/engines.js';

const schema = `fencelock_it_fence_${randomBytes(4).toString('hex')}`;
const pool = new pg.Pool({ connectionString: PG_URL, max: 10 });
/** Reads the database behind the fences' backs. */
const admin = new pg.Client({ connectionString: PG_URL });
const fence = new PgFence(pool, { schema });
const clients: pg.Client[] = [];
// A connection ended by the server (another test's fault injection) must not crash the file;
// the queries on it still fail.
pool.on('error', () => undefined);
admin.on('error', () => undefined);

async function newClient(): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: PG_URL });
  client.on('error', () => undefined);
  clients.push(client);
  await client.connect();
  return client;
}

/** Outcome of a fenced call: 'ok' or the StaleTokenError's tokens. */
async function outcome(call: Promise<unknown>): Promise<'ok' | { stale: [bigint, bigint] }> {
  try {
    await call;
    return 'ok';
  } catch (error) {
    if (error instanceof StaleTokenError) {
      return { stale: [error.attemptedToken, error.currentToken] };
    }
    throw error;
  }
}

async function tableExists(table: string): Promise<boolean> {
  const r = await admin.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [
    `"${schema}"."${table}"`,
  ]);
  return r.rows[0]!.found;
}

async function units(sku: number): Promise<number | null> {
  const r = await admin.query<{ units: number }>(
    `SELECT units FROM "${schema}".stock WHERE sku = $1`,
    [sku],
  );
  return r.rows[0]?.units ?? null;
}

/** Poll until `count` backends wait on a lock while running a statement on this run's schema. */
async function waitForLockWaiters(count: number, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const r = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE $1`,
      [`%"${schema}"%`],
    );
    if (r.rows[0]!.n === count) return;
    if (performance.now() >= deadline) {
      throw new Error(`expected ${count} lock waiters, saw ${r.rows[0]!.n}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve: () => void = () => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

beforeAll(async () => {
  await admin.connect();
});

afterAll(async () => {
  try {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await Promise.allSettled(clients.map((c) => c.end()));
    await admin.end();
    await pool.end();
  }
});

describe('PgFence register', () => {
  it('creates its schema and table on first use, then refuses an older token, accepts an equal one, advances on a newer one', async () => {
    expect(await tableExists('fencelock_fences')).toBe(false);
    await fence.write('r', 5n, 'five');
    expect(await tableExists('fencelock_fences')).toBe(true);
    await fence.write('r', 5n, 'five again');
    expect(await fence.read('r')).toEqual({ token: 5n, value: 'five again' });

    const error = await fence.write('r', 4n, 'four').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect((error as StaleTokenError).code).toBe('ERR_STALE_TOKEN');
    expect((error as StaleTokenError).resource).toBe('r');
    expect((error as StaleTokenError).attemptedToken).toBe(4n);
    expect((error as StaleTokenError).currentToken).toBe(5n);
    expect(await fence.read('r')).toEqual({ token: 5n, value: 'five again' });

    await fence.write('r', 6n, 'six');
    expect(await fence.read('r')).toEqual({ token: 6n, value: 'six' });
    expect(await fence.read('never-written')).toBeNull();
    // Resources are independent: a low token on another resource is fine.
    await fence.write('other', 1n, 'one');
    expect(await fence.read('other')).toEqual({ token: 1n, value: 'one' });
  });

  it('compares tokens exactly beyond 2^53, up to the largest bigint', async () => {
    const big = (1n << 60n) + 1n;
    await fence.write('big', big, 'a');
    expect(await outcome(fence.write('big', big - 1n, 'b'))).toEqual({ stale: [big - 1n, big] });
    await fence.write('big', big + 1n, 'c');
    expect(await fence.read('big')).toEqual({ token: big + 1n, value: 'c' });
    // 2^53 + 1 and 2^53 are the same double: a float comparison would accept this.
    const edge = (1n << 53n) + 1n;
    await fence.write('edge', edge, 'x');
    expect(await outcome(fence.write('edge', edge - 1n, 'y'))).toEqual({
      stale: [edge - 1n, edge],
    });
    await fence.write('max', PG_MAX_TOKEN, 'max');
    expect(await outcome(fence.write('max', PG_MAX_TOKEN - 1n, 'no'))).toEqual({
      stale: [PG_MAX_TOKEN - 1n, PG_MAX_TOKEN],
    });
    expect(await fence.read('max')).toEqual({ token: PG_MAX_TOKEN, value: 'max' });
  });

  it('20 writers on one client, interleaved tokens: exactly the writes older than an earlier one are refused', async () => {
    const client = await newClient();
    const ordered = new PgFence(client, { schema });
    const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 7) % 20) + 1));
    // One client runs the fence's statements in call order, so the outcome is exact.
    const outcomes = await Promise.all(
      tokens.map((t) => outcome(ordered.write('ordered', t, String(t)))),
    );
    let highest = 0n;
    const expected = tokens.map((t) => {
      if (t < highest) return { stale: [t, highest] };
      highest = t;
      return 'ok';
    });
    expect(outcomes).toEqual(expected);
    // Tokens 1, 8, 15, 16, 17, 18, 19 and 20 pass; the 12 others each arrive after a newer one.
    expect(tokens.filter((_, i) => outcomes[i] === 'ok')).toEqual([
      1n,
      8n,
      15n,
      16n,
      17n,
      18n,
      19n,
      20n,
    ]);
    expect(await ordered.read('ordered')).toEqual({ token: 20n, value: '20' });
    // The fence leaves the client open and usable.
    expect((await client.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
  });

  it('20 writers on a pool: the highest token stays, and every refusal names a newer token', async () => {
    const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 13) % 20) + 1));
    const outcomes = await Promise.all(
      tokens.map((t) => outcome(fence.write('pooled', t, String(t)))),
    );
    expect(await fence.read('pooled')).toEqual({ token: 20n, value: '20' });
    // The writer of the highest token can never be refused.
    expect(outcomes[tokens.indexOf(20n)]).toBe('ok');
    for (const [i, o] of outcomes.entries()) {
      if (o === 'ok') continue;
      expect(o.stale[0]).toBe(tokens[i]);
      expect(o.stale[1]).toBeGreaterThan(tokens[i]!);
    }
  });

  it('creates the schema and table once when many fences on separate connections start at once', async () => {
    const raceSchema = `${schema}_race`;
    try {
      const conns = await Promise.all(Array.from({ length: 8 }, () => newClient()));
      const fences = conns.map((c) => new PgFence(c, { schema: raceSchema, table: 'race' }));
      const outcomes = await Promise.all(fences.map((f, i) => outcome(f.write('r', 7n, `w${i}`))));
      expect(outcomes).toEqual(Array(8).fill('ok'));
      expect((await fences[0]!.read('r'))?.token).toBe(7n);
    } finally {
      await admin.query(`DROP SCHEMA IF EXISTS "${raceSchema}" CASCADE`);
    }
  });
});

describe('PgFence transaction', () => {
  beforeAll(async () => {
    await fence.read('setup'); // creates the schema
    await admin.query(`CREATE TABLE "${schema}".stock (sku int PRIMARY KEY, units int NOT NULL)`);
    await admin.query(`CREATE TABLE "${schema}".sale_log (
      seq bigserial PRIMARY KEY, token bigint NOT NULL, units int NOT NULL)`);
    await admin.query(`INSERT INTO "${schema}".stock VALUES (1, 100), (2, 100), (3, 100)`);
  });

  const sell = (sku: number, token: bigint, onWork?: () => void) =>
    fence.transaction(`stock:${sku}`, token, async (tx) => {
      onWork?.();
      const r = await tx.query<{ units: number }>(
        `UPDATE "${schema}".stock SET units = units - 1 WHERE sku = $1 RETURNING units`,
        [sku],
      );
      return r.rows[0]!.units;
    });

  it("commits the caller's write with a current token and refuses a stale one before running it", async () => {
    expect(await sell(1, 5n)).toBe(99);
    expect(await sell(1, 5n)).toBe(98); // equal token: the same holder again
    expect(await fence.read('stock:1')).toEqual({ token: 5n, value: null });

    let ran = false;
    const error = await sell(1, 4n, () => {
      ran = true;
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect((error as StaleTokenError).attemptedToken).toBe(4n);
    expect((error as StaleTokenError).currentToken).toBe(5n);
    expect(ran).toBe(false);
    expect(await units(1)).toBe(98);

    expect(await sell(1, 9n)).toBe(97);
    expect(await fence.read('stock:1')).toEqual({ token: 9n, value: null });
    // The register's value survives a transaction; a write after it sets it.
    await fence.write('stock:1', 9n, 'noted');
    expect(await sell(1, 9n)).toBe(96);
    expect(await fence.read('stock:1')).toEqual({ token: 9n, value: 'noted' });
  });

  it('rolls back both the token and the write when the work throws', async () => {
    await sell(2, 10n);
    const boom = new Error('boom');
    const error = await fence
      .transaction('stock:2', 12n, async (tx) => {
        await tx.query(`UPDATE "${schema}".stock SET units = 0 WHERE sku = 2`);
        throw boom;
      })
      .catch((e: unknown) => e);
    expect(error).toBe(boom);
    expect(await units(2)).toBe(99);
    // Token 12 was not recorded, so 11 is still accepted.
    expect(await fence.read('stock:2')).toEqual({ token: 10n, value: null });
    expect(await sell(2, 11n)).toBe(98);
  });

  it('reports a transaction the work broke (caught SQL error) as not committed', async () => {
    const error = await fence
      .transaction('stock:3', 1n, async (tx) => {
        await tx.query(`UPDATE "${schema}".stock SET units = 0 WHERE sku = 3`);
        await tx.query('SELECT 1/0').catch(() => undefined);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).operation).toBe('commit');
    expect(await units(3)).toBe(100);
    expect(await fence.read('stock:3')).toBeNull();
  });

  it('a stale writer blocked behind a newer one is refused after it commits; an older one blocking a newer one lets it through', async () => {
    // Newer (21) holds the row; older (20) waits on the row lock, then is refused.
    const gate = deferred();
    let running = deferred();
    const newer = fence.transaction('stock:1', 21n, async (tx) => {
      running.resolve();
      await gate.promise;
      await tx.query(`UPDATE "${schema}".stock SET units = units - 10 WHERE sku = 1`);
    });
    await running.promise;
    let olderRan = false;
    const older = outcome(
      sell(1, 20n, () => {
        olderRan = true;
      }),
    );
    await waitForLockWaiters(1);
    gate.resolve();
    await newer;
    expect(await older).toEqual({ stale: [20n, 21n] });
    expect(olderRan).toBe(false);
    expect(await units(1)).toBe(86);

    // Older (22) holds the row; newer (23) waits, then commits after it.
    const gate2 = deferred();
    running = deferred();
    const first = fence.transaction('stock:1', 22n, async (tx) => {
      running.resolve();
      await gate2.promise;
      await tx.query(`UPDATE "${schema}".stock SET units = units - 1 WHERE sku = 1`);
    });
    await running.promise;
    const second = sell(1, 23n);
    await waitForLockWaiters(1);
    gate2.resolve();
    await first;
    expect(await second).toBe(84);
    expect((await fence.read('stock:1'))?.token).toBe(23n);
  });

  it('on a single client, other fence calls wait for a running transaction instead of joining it', async () => {
    const client = await newClient();
    const single = new PgFence(client, { schema });
    const gate = deferred();
    const running = deferred();
    const boom = new Error('boom');
    const failing = single
      .transaction('stock:2', 11n, async (tx) => {
        running.resolve();
        await gate.promise;
        await tx.query(`UPDATE "${schema}".stock SET units = 0 WHERE sku = 2`);
        throw boom;
      })
      .catch((e: unknown) => e);
    await running.promise;
    // Issued while the transaction is open; it must not be rolled back with it.
    const write = single.write('side', 3n, 'kept');
    gate.resolve();
    expect(await failing).toBe(boom);
    await write;
    expect(await fence.read('side')).toEqual({ token: 3n, value: 'kept' });
    expect(await units(2)).toBe(98);
  });

  it('20 racing transactions: the log holds exactly the accepted ones, in increasing token order, ending at the highest', async () => {
    await admin.query(`INSERT INTO "${schema}".stock VALUES (4, 1000)`);
    const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 7) % 20) + 101));
    const outcomes = await Promise.all(
      tokens.map((t) =>
        outcome(
          fence.transaction('stock:4', t, async (tx) => {
            const r = await tx.query<{ units: number }>(
              `UPDATE "${schema}".stock SET units = units - 1 WHERE sku = 4 RETURNING units`,
            );
            await tx.query(`INSERT INTO "${schema}".sale_log (token, units) VALUES ($1, $2)`, [
              t.toString(),
              r.rows[0]!.units,
            ]);
          }),
        ),
      ),
    );
    const log = (
      await admin.query<{ token: string; units: number }>(
        `SELECT token::text AS token, units FROM "${schema}".sale_log ORDER BY seq`,
      )
    ).rows.map((r) => ({ token: BigInt(r.token), units: r.units }));
    const accepted = tokens.filter((_, i) => outcomes[i] === 'ok');
    const refused = outcomes.filter((o) => o !== 'ok');
    // Exactly the accepted transactions left a log row and took one unit each.
    expect(accepted.length + refused.length).toBe(20);
    expect(log).toHaveLength(accepted.length);
    expect([...log.map((l) => l.token)].sort((a, b) => (a < b ? -1 : 1))).toEqual(
      [...accepted].sort((a, b) => (a < b ? -1 : 1)),
    );
    expect(await units(4)).toBe(1000 - accepted.length);
    expect(log.map((l) => l.units)).toEqual(log.map((_, i) => 999 - i));
    // In commit order every accepted token is newer than all before it, and the last is the
    // highest; every refused writer was shown a newer token that had committed.
    for (let i = 1; i < log.length; i++) expect(log[i]!.token).toBeGreaterThan(log[i - 1]!.token);
    expect(log.at(-1)!.token).toBe(120n);
    expect((await fence.read('stock:4'))?.token).toBe(120n);
    for (const [i, o] of outcomes.entries()) {
      if (o === 'ok') continue;
      expect(o.stale[0]).toBe(tokens[i]);
      expect(o.stale[1]).toBeGreaterThan(tokens[i]!);
      expect(accepted).toContain(o.stale[1]);
    }
    // Every pooled connection came back.
    expect(pool.idleCount).toBe(pool.totalCount);
  });
});

/** `promise`, or a rejection saying it hung when it has not settled within `ms`. */
function within<T>(ms: number, promise: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`still waiting after ${ms} ms (hung)`)), ms);
  });
  return Promise.race([promise, hung]).finally(() => clearTimeout(timer));
}

describe('PgFence transaction misuse by work', () => {
  beforeAll(async () => {
    await fence.read('setup'); // creates the schema
    await admin.query(`CREATE TABLE "${schema}".notes (id int PRIMARY KEY, note text NOT NULL)`);
  });

  async function note(id: number): Promise<string | null> {
    const r = await admin.query<{ note: string }>(
      `SELECT note FROM "${schema}".notes WHERE id = $1`,
      [id],
    );
    return r.rows[0]?.note ?? null;
  }

  it('on a single client, a call of the same fence from inside work is refused instead of waiting for itself', async () => {
    const client = await newClient();
    const single = new PgFence(client, { schema });
    const nested: unknown[] = [];
    const result = await within(
      10_000,
      single.transaction('reentry', 1n, async (tx) => {
        const calls: (() => Promise<unknown>)[] = [
          () => single.write('elsewhere', 1n, 'x'),
          () => single.read('elsewhere'),
          () => single.transaction('elsewhere', 1n, async () => 'inner'),
        ];
        for (const call of calls) {
          nested.push(await within(2_000, call()).catch((e: unknown) => e));
        }
        await tx.query(`INSERT INTO "${schema}".notes VALUES (1, 'from work')`);
        return 'outer';
      }),
    );
    expect(nested).toHaveLength(3);
    for (const error of nested) {
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('work');
    }
    expect(result).toBe('outer');
    expect(await note(1)).toBe('from work');
    expect(await fence.read('elsewhere')).toBeNull();
    // Outside work (and from a task work left behind once it has returned) the fence works.
    await single.write('elsewhere', 2n, 'after');
    let late: Promise<void> | undefined;
    await single.transaction('reentry', 2n, async () => {
      late = new Promise((resolve) => setTimeout(resolve, 50)).then(() =>
        single.write('elsewhere', 3n, 'late'),
      );
    });
    await within(5_000, late!);
    expect(await fence.read('elsewhere')).toEqual({ token: 3n, value: 'late' });
  });

  it('on a pool, work may use the fence for other resources, but not write its own resource again', async () => {
    const outcomeOf = (call: () => Promise<unknown>) =>
      within(2_000, call()).then(
        () => 'ok',
        (e: unknown) => e,
      );
    const seen = await within(
      10_000,
      fence.transaction('pool-reentry', 5n, async () => ({
        sameWrite: await outcomeOf(() => fence.write('pool-reentry', 5n, 'x')),
        sameTransaction: await outcomeOf(() =>
          fence.transaction('pool-reentry', 5n, async () => undefined),
        ),
        sameRead: await outcomeOf(() => fence.read('pool-reentry')),
        other: await outcomeOf(() => fence.write('pool-other', 1n, 'y')),
      })),
    );
    expect(seen.sameWrite).toBeInstanceOf(InvalidArgumentError);
    expect(seen.sameTransaction).toBeInstanceOf(InvalidArgumentError);
    expect(seen.sameRead).toBe('ok');
    expect(seen.other).toBe('ok');
    expect(await fence.read('pool-reentry')).toEqual({ token: 5n, value: null });
    expect(await fence.read('pool-other')).toEqual({ token: 1n, value: 'y' });
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it.each([
    ['COMMIT', ['COMMIT']],
    ['ROLLBACK', ['ROLLBACK']],
    ['COMMIT then BEGIN', ['COMMIT', 'BEGIN']],
  ])('work that sends %s itself gets a BackendError, not a success', async (_, statements) => {
    const id = 10 + statements.length + (statements[0] === 'ROLLBACK' ? 10 : 0);
    const resource = `ended-${id}`;
    await fence.write(resource, 1n, 'before');
    const error = await within(
      10_000,
      fence.transaction(resource, 2n, async (tx) => {
        await tx.query(`INSERT INTO "${schema}".notes VALUES ($1, 'in the fenced transaction')`, [
          id,
        ]);
        for (const statement of statements) await tx.query(statement);
        await tx.query(`INSERT INTO "${schema}".notes VALUES ($1, 'after the end')`, [id + 100]);
        return 'done';
      }),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).operation).toBe('transaction');
    expect((error as BackendError).message).toContain('ended the transaction');
    // What the work's own COMMIT / ROLLBACK did stays done: the fence cannot undo it.
    const committed = statements[0] === 'COMMIT';
    expect(await note(id)).toBe(committed ? 'in the fenced transaction' : null);
    expect((await fence.read(resource))?.token).toBe(committed ? 2n : 1n);
    // A statement after a new BEGIN was rolled back with the fence's clean-up.
    if (statements.includes('BEGIN')) expect(await note(id + 100)).toBeNull();
    // The connection went back to the pool outside any transaction.
    expect(pool.idleCount).toBe(pool.totalCount);
    await fence.transaction(resource, 3n, async (tx) => {
      await tx.query(`INSERT INTO "${schema}".notes VALUES ($1, 'next')`, [id + 200]);
    });
    expect(await note(id + 200)).toBe('next');
  });

  it('on a single client, work that commits itself gets a BackendError and the client is left outside a transaction', async () => {
    const client = await newClient();
    const single = new PgFence(client, { schema });
    const error = await single
      .transaction('ended-single', 1n, async (tx) => {
        await tx.query('COMMIT');
        await tx.query('BEGIN');
        await tx.query(`INSERT INTO "${schema}".notes VALUES (50, 'after the end')`);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect(await note(50)).toBeNull();
    // SAVEPOINT outside a transaction block fails: nothing was left open on the client.
    await expect(client.query('SAVEPOINT probe')).rejects.toMatchObject({ code: '25P01' });
  });
});

describe('PgFence input', () => {
  // A pool on a closed port: any statement sent would fail with BackendError, not with
  // InvalidArgumentError, so these prove the check runs before any network call.
  const nowhere = new pg.Pool({ connectionString: 'postgres://x@127.0.0.1:1/x' });
  const dead = new PgFence(nowhere);
  afterAll(() => nowhere.end());

  it.each([
    ['empty resource', 'resource', () => dead.write('', 1n, 'v')],
    ['NUL in resource', 'resource', () => dead.write('a\0b', 1n, 'v')],
    ['oversize resource', 'resource', () => dead.write('x'.repeat(1025), 1n, 'v')],
    ['number token', 'token', () => dead.write('r', 1 as never, 'v')],
    ['negative token', 'token', () => dead.write('r', -1n, 'v')],
    ['token beyond bigint', 'token', () => dead.write('r', PG_MAX_TOKEN + 1n, 'v')],
    ['non-string value', 'value', () => dead.write('r', 1n, 5 as never)],
    ['NUL in value', 'value', () => dead.write('r', 1n, 'a\0')],
    ['read of empty resource', 'resource', () => dead.read('')],
    ['transaction without work', 'work', () => dead.transaction('r', 1n, undefined as never)],
    ['transaction with bad token', 'token', () => dead.transaction('r', -2n, async () => 1)],
  ])('%s → InvalidArgumentError naming %s', async (_, argument, call) => {
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(argument);
  });

  it('valid input on that pool does reach the network (BackendError)', async () => {
    const error = await dead.write('r', 1n, 'v').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect((error as BackendError).backend).toBe('postgres');
  });

  it.each([
    ['a plain object', 'db', {}, undefined],
    ['null', 'db', null, undefined],
    ['a schema with -', 'options.schema', pool, { schema: 'bad-name' }],
    ['a table starting with a digit', 'options.table', pool, { table: '1abc' }],
    ['a 64-byte table', 'options.table', pool, { table: 'x'.repeat(64) }],
    ['a table with a quote', 'options.table', pool, { table: 'a"b' }],
    ['an upper-case table', 'options.table', pool, { table: 'Fences' }],
    ['an unknown option', 'options.tabel', pool, { tabel: 'typo' }],
  ])('new PgFence with %s → InvalidArgumentError naming %s', (_, argument, db, options) => {
    let error: unknown;
    try {
      new PgFence(db as never, options as never);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(argument);
  });
});
