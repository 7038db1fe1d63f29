/**
 * Read-write locks on PostgreSQL (lease mode): readers share the key, each with its own token
 * from the schema's sequence; a writer is alone; one FIFO line, so a reader that arrives after a
 * queued writer waits for it while readers ahead of a writer go together. Waiting is
 * event-driven with no herd: a writer's release wakes the readers at the head of the line (each
 * by its owner) and nobody behind the next writer; the last reader's release wakes the writer at
 * the head; both well under the 0.5 s recheck with a 30 s TTL. A crashed reader's grant lapses by
 * its TTL. A schema of the previous version gets the readers' table and line column in place.
 *
 * Downgrade and upgrade: the rules of test/integration/rwlock-rules.ts.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { PostgresBackend } from '../../../packages/fencelock/src/backends/postgres/index.js';
import { parseNotice } from '../../../packages/fencelock/src/backends/postgres/listener.js';
import { sqlFor } from '../../../packages/fencelock/src/backends/postgres/sql.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  type Lease,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { settledWithin } from '../../helpers/promises.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';
import { adminPool, dropSchema, eventually, PG_URL, sleep, uniqueSchema } from './support.js';

/** Longest handoff gap that counts as event-driven: well under the 0.5 s recheck. */
const EVENT_GAP_MS = 250;
/** A TTL no grant here runs out of by itself. */
const LONG_TTL_MS = 30_000;

const schema = uniqueSchema('rwlock');
const s = `"${schema}"`;
const admin = adminPool();
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  await dropSchema(admin, schema);
});

/** A locker on its own pool (as a separate process would have). */
function newLocker(options?: LockerOptions): Locker {
  const locker = createLocker(`${PG_URL}?schema=${schema}`, options);
  lockers.push(locker);
  return locker;
}

const unique = (label: string) => `rw-${label}-${randomBytes(4).toString('hex')}`;

type Grant = { name: string; token: bigint; at: number };

/** A contender on its own locker, recording the grant order. */
function contender(key: string, mode: LockMode, name: string, grants: Grant[]): Promise<Lease> {
  return newLocker({ ttlMs: LONG_TTL_MS })
    .acquire(key, { mode, waitMs: 30_000 })
    .then((lease) => {
      grants.push({ name, token: lease.fencingToken, at: performance.now() });
      return lease;
    });
}

/** The key's line, head first, as `[owner, reader]`. */
async function lineOf(key: string): Promise<[string, boolean][]> {
  const { rows } = await admin.query<{ owner: string; reader: boolean }>(
    `SELECT owner, reader FROM ${s}.fencelock_waiters WHERE key = $1 ORDER BY seq`,
    [key],
  );
  return rows.map((r) => [r.owner, r.reader]);
}

async function lineLength(key: string, n: number): Promise<void> {
  await eventually(async () => (await lineOf(key)).length === n, 5_000);
}

/** Every row the key has: lease row (placeholder included), read grants, line entries. */
async function rowsOf(key: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT (SELECT count(*) FROM ${s}.fencelock_leases WHERE key = $1)
          + (SELECT count(*) FROM ${s}.fencelock_readers WHERE key = $1)
          + (SELECT count(*) FROM ${s}.fencelock_waiters WHERE key = $1) AS n`,
    [key],
  );
  return Number(rows[0]!.n);
}

/** Record the notices of the schema's channel about `key` (the owners they address). */
async function listen(
  channel: string,
  key: string,
): Promise<{ heads: string[]; stop(): Promise<void> }> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const heads: string[] = [];
  client.on('notification', (message) => {
    const notice = parseNotice(message.payload ?? '');
    if (notice.key === key && notice.semaphore === undefined) heads.push(notice.head ?? '');
  });
  await client.query(`LISTEN "${channel}"`);
  return { heads, stop: () => client.end() };
}

describe('PostgreSQL read-write lock (lease mode)', () => {
  downgradeAndUpgradeTests({
    engine: 'postgres',
    locker: (options) => newLocker(options),
    dirOf: (_backend, key) => key,
    line: async (key) => {
      const line: [string, 'read' | 'write', bigint][] = [];
      const writer = await admin.query<{ owner: string; token: string }>(
        `SELECT owner, token::text AS token FROM ${s}.fencelock_leases
         WHERE key = $1 AND owner <> '' AND expires_at > clock_timestamp()`,
        [key],
      );
      for (const r of writer.rows) line.push([r.owner, 'write', BigInt(r.token)]);
      const readers = await admin.query<{ owner: string; token: string }>(
        `SELECT owner, token::text AS token FROM ${s}.fencelock_readers
         WHERE key = $1 AND expires_at > clock_timestamp() ORDER BY token`,
        [key],
      );
      for (const r of readers.rows) line.push([r.owner, 'read', BigInt(r.token)]);
      for (const [owner, reader] of await lineOf(key)) {
        line.push([owner, reader ? 'read' : 'write', 0n]);
      }
      return line;
    },
    count: rowsOf,
    waitForCount: async (key, n) => {
      await eventually(async () => (await rowsOf(key)) === n, 5_000);
    },
  });

  it('advertises read locks in lease mode', async () => {
    const backend = await newLocker().backend();
    expect(backend.capabilities.modes).toEqual(['write', 'read']);
  });

  it('readers share the key, each with its own rising token; a writer is kept out', async () => {
    const key = unique('shared');
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect([r1, r2, r3].every((r) => r.isHeld)).toBe(true);
    expect(r2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(r3.fencingToken).toBeGreaterThan(r2.fencingToken);
    // Three reader rows, and the key's lease row is the readers' placeholder (owner '').
    const { rows } = await admin.query<{ owner: string; remaining: string }>(
      `SELECT owner, extract(epoch FROM expires_at - clock_timestamp())::text AS remaining
       FROM ${s}.fencelock_leases WHERE key = $1`,
      [key],
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.owner).toBe('');
    expect(Number(rows[0]!.remaining) * 1000).toBeGreaterThan(LONG_TTL_MS - 5_000);
    const info = await probe.inspect(key);
    expect(info.holder?.owner).toBe(r1.owner);
    expect(info.holder?.fencingToken).toBe(r1.fencingToken);
    expect(info.holder?.ttlMs).toBeGreaterThan(LONG_TTL_MS - 5_000);
    expect(info.lastFencingToken).toBe(r3.fencingToken);
    // A writer's single attempt fails and leaves no entry; another reader's is granted.
    expect(await probe.tryAcquire(key)).toBeNull();
    expect(await lineOf(key)).toEqual([]);
    const r4 = await probe.tryAcquire(key, { mode: 'read' });
    expect(r4?.fencingToken).toBeGreaterThan(r3.fencingToken);
    for (const r of [r1, r2, r3, r4!]) expect(await r.release()).toBe('released');
    expect(await rowsOf(key)).toBe(0);
    // Free again: a writer takes it with a newer token.
    const writer = await probe.tryAcquire(key);
    expect(writer?.fencingToken).toBeGreaterThan(r4!.fencingToken);
    expect(await writer!.release()).toBe('released');
  });

  it('release and renew of a read grant compare owner and token (not-owner, not-held)', async () => {
    const key = unique('refusals');
    const locker = newLocker({ ttlMs: LONG_TTL_MS });
    const backend = await locker.backend();
    const other = await newLocker().backend();
    const reader = await locker.acquire(key, { mode: 'read' });
    const { owner, fencingToken: token } = reader;
    const stranger = randomBytes(16).toString('hex');
    for (const b of [backend, other]) {
      expect(await b.release({ key, owner, fencingToken: token + 1n })).toBe('not-owner');
      expect(await b.release({ key, owner: stranger, fencingToken: token })).toBe('not-owner');
      expect(await b.renew({ key, owner, fencingToken: token + 1n }, 10_000)).toEqual({
        ok: false,
        reason: 'not-owner',
      });
    }
    // Another backend instance renews the read grant by owner and token, alone or in a batch
    // with a writer's lease.
    expect(await other.renew({ key, owner, fencingToken: token }, 20_000)).toEqual({
      ok: true,
      ttlMs: 20_000,
    });
    const writeKey = unique('batch');
    const writer = await newLocker().acquire(writeKey, { ttlMs: 10_000, autoRenew: false });
    const batch = await Promise.all([
      other.renew({ key, owner, fencingToken: token }, 15_000),
      other.renew(
        { key: writeKey, owner: writer.owner, fencingToken: writer.fencingToken },
        15_000,
      ),
      other.renew({ key, owner: stranger, fencingToken: token }, 15_000),
    ]);
    expect(batch).toEqual([
      { ok: true, ttlMs: 15_000 },
      { ok: true, ttlMs: 15_000 },
      { ok: false, reason: 'not-owner' },
    ]);
    expect(await writer.release()).toBe('released');
    const info = await locker.inspect(key);
    expect(info.holder?.owner).toBe(owner);
    expect(info.holder?.ttlMs).toBeLessThanOrEqual(15_000);
    expect(await reader.release()).toBe('released');
    expect(await other.release({ key, owner, fencingToken: token })).toBe('not-held');
    expect(await other.renew({ key, owner, fencingToken: token }, 10_000)).toEqual({
      ok: false,
      reason: 'not-held',
    });
    expect(await rowsOf(key)).toBe(0);
  });

  it('the watchdog renews a read grant past its TTL', async () => {
    const key = unique('renewed');
    const locker = newLocker();
    await locker.inspect(key);
    const reader = await locker.acquire(key, { mode: 'read', ttlMs: 1_000 });
    await sleep(2_500);
    expect(reader.isHeld).toBe(true);
    expect((await newLocker().inspect(key)).holder?.owner).toBe(reader.owner);
    expect(await newLocker().tryAcquire(key)).toBeNull();
    expect(await reader.release()).toBe('released');
  });

  it('a reader arriving after a queued writer waits for it (FIFO); the handoffs are event-driven', async () => {
    const key = unique('fifo');
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const channel = ((await probe.backend()) as PostgresBackend).channel;
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const w = contender(key, 'write', 'W', grants);
    await lineLength(key, 1);
    const r3 = contender(key, 'read', 'R3', grants);
    await lineLength(key, 2);
    expect((await lineOf(key)).map(([, reader]) => reader)).toEqual([false, true]);
    // Only readers hold, yet R3 waits: a writer is ahead of it. A single read attempt too.
    expect(await settledWithin(Promise.race([w, r3]), 300)).toBe(false);
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    await sleep(200);
    const notices = await listen(channel, key);
    let writer: Lease;
    let reader3: Lease;
    try {
      // The writer waits for every earlier reader: that release tells nobody.
      expect(await r2.release()).toBe('released');
      expect(await settledWithin(w, 300)).toBe(false);
      expect(notices.heads).toEqual([]);
      // The last reader's release wakes the writer at the head at once.
      const lastReaderAt = performance.now();
      expect(await r1.release()).toBe('released');
      writer = await w;
      expect(grants.at(-1)!.at - lastReaderAt).toBeLessThan(EVENT_GAP_MS);
      // The listener's connection may hear the notice after the writer's own connection did.
      await eventually(() => notices.heads.length > 0, 1_000);
      expect(notices.heads).toEqual([writer.owner]);
      expect(await settledWithin(r3, 300)).toBe(false);
      // The writer's release wakes the reader behind it at once, by its owner.
      const writerAt = performance.now();
      expect(await writer.release()).toBe('released');
      reader3 = await r3;
      expect(grants.at(-1)!.at - writerAt).toBeLessThan(EVENT_GAP_MS);
      await eventually(() => notices.heads.length > 1, 1_000);
      expect(notices.heads.slice(1)).toEqual([reader3.owner]);
    } finally {
      await notices.stop();
    }
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'W', 'R3']);
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!.token).toBeGreaterThan(grants[i - 1]!.token);
    }
    expect(await reader3.release()).toBe('released');
    expect(await rowsOf(key)).toBe(0);
  });

  it("a writer's release wakes the readers at the head of the line, and nobody behind the next writer", async () => {
    const key = unique('wake');
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const channel = ((await probe.backend()) as PostgresBackend).channel;
    const holder = await contender(key, 'write', 'W1', grants);
    const waiting: Promise<Lease>[] = [];
    const names = [
      ['read', 'R1'],
      ['read', 'R2'],
      ['read', 'R3'],
      ['write', 'W2'],
      ['read', 'R4'],
    ] as const;
    for (const [i, [mode, name]] of names.entries()) {
      waiting.push(contender(key, mode, name, grants));
      await lineLength(key, i + 1);
    }
    const line = (await lineOf(key)).map(([owner]) => owner);
    await sleep(200);
    const notices = await listen(channel, key);
    try {
      const releasedAt = performance.now();
      expect(await holder.release()).toBe('released');
      const readers = await Promise.all(waiting.slice(0, 3));
      expect(performance.now() - releasedAt).toBeLessThan(EVENT_GAP_MS);
      // W2 and R4 are not let in, nor woken.
      expect(await settledWithin(Promise.race(waiting.slice(3)), 300)).toBe(false);
      expect(new Set(notices.heads)).toEqual(new Set(line.slice(0, 3)));
      expect(notices.heads).toHaveLength(3);
      // The last of the three readers hands the key to W2, then W2's release to R4.
      for (const r of readers.slice(0, 2)) expect(await r.release()).toBe('released');
      expect(await settledWithin(waiting[3]!, 200)).toBe(false);
      const lastReaderAt = performance.now();
      expect(await readers[2]!.release()).toBe('released');
      const w2 = await waiting[3]!;
      expect(performance.now() - lastReaderAt).toBeLessThan(EVENT_GAP_MS);
      expect(await settledWithin(waiting[4]!, 200)).toBe(false);
      const w2At = performance.now();
      expect(await w2.release()).toBe('released');
      const r4 = await waiting[4]!;
      expect(performance.now() - w2At).toBeLessThan(EVENT_GAP_MS);
      expect(await r4.release()).toBe('released');
    } finally {
      await notices.stop();
    }
    expect(grants[0]!.name).toBe('W1');
    expect(grants.slice(4).map((g) => g.name)).toEqual(['W2', 'R4']);
    expect(new Set(grants.slice(1, 4).map((g) => g.name))).toEqual(new Set(['R1', 'R2', 'R3']));
    // Readers granted together may resolve in any order here; across modes tokens rise.
    const readerTokens = grants.slice(1, 4).map((g) => g.token);
    const [w1, w2, r4] = [grants[0]!.token, grants[4]!.token, grants[5]!.token];
    for (const token of readerTokens) {
      expect(token).toBeGreaterThan(w1);
      expect(token).toBeLessThan(w2);
    }
    expect(r4).toBeGreaterThan(w2);
    expect(await rowsOf(key)).toBe(0);
  });

  it('a writer leaving the head while readers hold lets the readers behind it in at once', async () => {
    const key = unique('writer-leaves');
    const grants: Grant[] = [];
    const reader = await contender(key, 'read', 'R0', grants);
    const gaveUp = new AbortController();
    const w = newLocker({ ttlMs: LONG_TTL_MS }).acquire(key, {
      waitMs: 30_000,
      signal: gaveUp.signal,
    });
    w.catch(() => undefined);
    await lineLength(key, 1);
    const r1 = contender(key, 'read', 'R1', grants);
    await lineLength(key, 2);
    const r2 = contender(key, 'read', 'R2', grants);
    await lineLength(key, 3);
    await sleep(200);
    const leftAt = performance.now();
    gaveUp.abort();
    const both = await Promise.all([r1, r2]);
    expect(performance.now() - leftAt).toBeLessThan(EVENT_GAP_MS);
    for (const r of [reader, ...both]) expect(await r.release()).toBe('released');
    expect(await rowsOf(key)).toBe(0);
  });

  it("a crashed reader's grant lapses by its TTL; the waiting writer then gets the key", async () => {
    const key = unique('crashed');
    const crashed = newLocker();
    // A reader that stops renewing (its process died): no watchdog, 1 s TTL.
    const dead = await crashed.acquire(key, { mode: 'read', ttlMs: 1_000, autoRenew: false });
    const live = await newLocker().acquire(key, { mode: 'read', ttlMs: LONG_TTL_MS });
    const startedAt = performance.now();
    const writing = newLocker().acquire(key, { ttlMs: LONG_TTL_MS, waitMs: 10_000 });
    await lineLength(key, 1);
    // The live reader's release leaves the lapsing one: the writer still waits for it.
    expect(await live.release()).toBe('released');
    expect(await settledWithin(writing, 300)).toBe(false);
    const writer = await writing;
    const waitedMs = performance.now() - startedAt;
    expect(waitedMs).toBeGreaterThan(600);
    expect(waitedMs).toBeLessThan(4_000);
    expect(writer.fencingToken).toBeGreaterThan(dead.fencingToken);
    expect(await writer.release()).toBe('released');
    expect(await dead.release()).toBe('not-held');
  });

  it('10 clients looping with both modes: never a writer beside anyone, tokens rise in grant order', async () => {
    const key = unique('mixed');
    let readers = 0;
    let writers = 0;
    let violations = 0;
    let lastToken = 0n;
    let outOfOrder = 0;
    const counts = { read: 0, write: 0 };
    const deadline = performance.now() + 3_000;
    await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const locker = newLocker({ ttlMs: LONG_TTL_MS });
        while (performance.now() < deadline) {
          const mode: LockMode = (i + counts.read + counts.write) % 3 === 0 ? 'write' : 'read';
          const lease = await locker.acquire(key, { mode, waitMs: 20_000 });
          if (lease.fencingToken <= lastToken && mode === 'write') outOfOrder++;
          if (lease.fencingToken > lastToken) lastToken = lease.fencingToken;
          if (mode === 'write') {
            writers++;
            if (writers > 1 || readers > 0) violations++;
          } else {
            readers++;
            if (writers > 0) violations++;
          }
          counts[mode]++;
          await sleep(Math.random() * 5);
          if (mode === 'write') writers--;
          else readers--;
          expect(await lease.release()).toBe('released');
        }
      }),
    );
    expect(violations).toBe(0);
    expect(outOfOrder).toBe(0);
    expect(counts.read).toBeGreaterThan(10);
    expect(counts.write).toBeGreaterThan(5);
    expect(await rowsOf(key)).toBe(0);
  });

  it('a schema of the previous version gets the readers table and line column; its locks and line stay', async () => {
    const old = uniqueSchema('upgrade_rw');
    const current = sqlFor(old).setup;
    // The previous version's set-up: everything before the read-lock objects, and a line
    // without the `reader` column.
    const previous = current
      .slice(0, current.indexOf('DO $do$'))
      .replace(/\n {2}reader {5}boolean[^\n]*\n/, '\n');
    expect(previous).not.toContain('reader');
    await admin.query(previous);
    await admin.query(
      `INSERT INTO "${old}".fencelock_leases (key, owner, token, expires_at)
       VALUES ('held', $1, nextval('"${old}".fencelock_token_seq'), clock_timestamp() + interval '60 seconds')`,
      ['e'.repeat(32)],
    );
    await admin.query(
      `INSERT INTO "${old}".fencelock_waiters (key, owner, seq, expires_at)
       VALUES ('queued', $1, nextval('"${old}".fencelock_waiter_seq'), clock_timestamp() + interval '60 seconds')`,
      ['f'.repeat(32)],
    );
    const locker = createLocker(`${PG_URL}?schema=${old}`);
    try {
      // The old write lock keeps readers out; the old line entry is a writer's: a reader waits.
      expect(await locker.tryAcquire('held', { mode: 'read' })).toBeNull();
      expect(await locker.tryAcquire('queued', { mode: 'read' })).toBeNull();
      const reader = await locker.tryAcquire('free', { mode: 'read' });
      expect(reader).not.toBeNull();
      expect(reader!.fencingToken).toBeGreaterThan(1n);
      expect(await locker.tryAcquire('free')).toBeNull();
      expect(await reader!.release()).toBe('released');
      const { rows } = await admin.query<{ reader: boolean }>(
        `SELECT reader FROM "${old}".fencelock_waiters WHERE key = 'queued'`,
      );
      expect(rows).toEqual([{ reader: false }]);
    } finally {
      await locker.close();
      await admin.query(`DROP SCHEMA "${old}" CASCADE`);
    }
  });
});
