/**
 * SQLite: lock-delay (`lockDelayMs`, Chubby's lock-delay) as the contract cannot see it. The delay
 * is the `lock_delay_ms` column of the exclusive grant's row (`fencelock_leases`,
 * `fencelock_leaders`): the row's expiry is the end of the grant, and an expired row stays, held
 * by nobody, until `expires_at + lock_delay_ms`, when the sweep may delete it. Checked here: the
 * layout (the column written by the grant, kept by renewals and repeated attempts, per key in an
 * `attemptAll`); the row outliving its expiry through the delay and no longer (the sweep at a
 * grant, and at the opening of the file); waiters in line keeping their order through the delay
 * and woken when it ends; readers kept out; a withdrawal (`abandon`) clearing only a live grant;
 * and a file of the version before lock-delays upgraded in place. Each client has its own
 * backend, so its own connection to the file, as separate processes would have.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { createSqliteBackend } from '../../../packages/fencelock/src/backends/sqlite/index.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import { newOwnerId } from '../../../packages/fencelock/src/core/lock.js';
import { type Backend, createLocker, type Locker } from '../../../packages/fencelock/src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-lock-delay-'));
const path = join(dir, 'locks.db');
const opened: { close(): Promise<void> }[] = [];

afterAll(async () => {
  await Promise.all(opened.map((o) => o.close()));
  rmSync(dir, { recursive: true, force: true });
});

const NOW = `CAST(unixepoch('subsec') * 1000 AS INTEGER)`;

function client(file = path): { locker: Locker; backend: Backend } {
  const backend = createSqliteBackend({ path: file });
  const locker = createLocker(backend);
  opened.push(locker);
  return { locker, backend };
}

/** A write attempt made straight at the backend, by a holder that is then never renewed. */
function killed(key: string, ttlMs: number, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  return {
    key,
    owner: newOwnerId(),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    ...extra,
  };
}

interface Row {
  owner: string;
  token: bigint;
  expires_at: bigint;
  lock_delay_ms: bigint;
}

/** The row of `key` in `table` (`fencelock_leases` or `fencelock_leaders`), read by a test connection. */
function row(table: string, key: string, file = path): Row | undefined {
  const db = new Database(file, { readonly: true });
  db.defaultSafeIntegers(true);
  try {
    return db
      .prepare<[string], Row>(
        `SELECT owner, token, expires_at, lock_delay_ms FROM ${table} WHERE key = ?`,
      )
      .get(key);
  } finally {
    db.close();
  }
}

/** Sleep until `epochMs` on the wall clock (the engine's clock) has passed, plus `marginMs`. */
async function until(epochMs: bigint, marginMs = 30): Promise<void> {
  await sleep(Math.max(0, Number(epochMs) - Date.now() + marginMs));
}

describe('SQLite lock-delay: the delay is a column of the grant’s row', () => {
  it('written by the grant, kept by a renewal and a repeated attempt; 0 without a delay', async () => {
    const { backend } = client();
    const key = `layout:${randomUUID()}`;
    const request = killed(key, 5_000, { lockDelayMs: 1_234 });
    const granted = await backend.attempt(request);
    expect(granted.granted).toBe(true);
    const token = (granted as { token: bigint }).token;
    expect(row('fencelock_leases', key)).toMatchObject({
      owner: request.owner,
      token,
      lock_delay_ms: 1_234n,
    });
    const before = row('fencelock_leases', key)!.expires_at;
    await sleep(20);
    expect(
      (await backend.renew({ key, owner: request.owner, fencingToken: token }, 6_000)).ok,
    ).toBe(true);
    // The renewal moved the end the delay counts from, and kept the delay.
    expect(row('fencelock_leases', key)!.expires_at).toBeGreaterThan(before);
    expect(row('fencelock_leases', key)!.lock_delay_ms).toBe(1_234n);
    // The holder's repeated attempt (a lost reply) keeps it too.
    expect(await backend.attempt(request)).toMatchObject({ granted: true, token });
    expect(row('fencelock_leases', key)!.lock_delay_ms).toBe(1_234n);
    expect(await backend.release({ key, owner: request.owner, fencingToken: token })).toBe(
      'released',
    );
    expect(row('fencelock_leases', key)).toBeUndefined();

    const plain = `layout-plain:${randomUUID()}`;
    const lease = await client().locker.acquire(plain);
    expect(row('fencelock_leases', plain)!.lock_delay_ms).toBe(0n);
    await lease.release();
  });

  it('a read grant carries none, though the locker has a default lock-delay', async () => {
    const backend = createSqliteBackend({ path });
    const locker = createLocker(backend, { lockDelayMs: 1_000 });
    opened.push(locker);
    const key = `layout-read:${randomUUID()}`;
    const reader = await locker.acquire(key, { mode: 'read' });
    // The readers' stand-in row carries no delay.
    expect(row('fencelock_leases', key)!.lock_delay_ms).toBe(0n);
    await reader.release();
  });

  it('attemptAll records each key’s own delay', async () => {
    const { backend } = client();
    const [a, b] = [`all-a:${randomUUID()}`, `all-b:${randomUUID()}`];
    const answers = await backend.attemptAll!([
      killed(a, 5_000, { lockDelayMs: 700 }),
      killed(b, 5_000),
    ]);
    expect(answers?.every((x) => x.granted)).toBe(true);
    expect(row('fencelock_leases', a)!.lock_delay_ms).toBe(700n);
    expect(row('fencelock_leases', b)!.lock_delay_ms).toBe(0n);
  });

  it('a leadership’s delay is in the leader’s row', async () => {
    const { backend } = client();
    const name = `layout-election:${randomUUID()}`;
    const request = killed(name, 5_000, { lockDelayMs: 900, election: { value: 'v' } });
    expect((await backend.attempt(request)).granted).toBe(true);
    expect(row('fencelock_leaders', name)).toMatchObject({
      owner: request.owner,
      lock_delay_ms: 900n,
    });
    expect(row('fencelock_leases', name)).toBeUndefined();
  });
});

describe('SQLite lock-delay: the row outlives its expiry by the delay, and no longer', () => {
  it('kept through the delay by other grants’ sweeps (not held, not listed), swept after it', async () => {
    const { backend, locker } = client();
    const key = `sweep:${randomUUID()}`;
    expect((await backend.attempt(killed(key, 200, { lockDelayMs: 1_000 }))).granted).toBe(true);
    const end = row('fencelock_leases', key)!;
    await until(end.expires_at);
    // Another key's grant sweeps expired rows: this one is in its delay and stays.
    const other = await locker.acquire(`sweep-other:${randomUUID()}`);
    expect(row('fencelock_leases', key)).toEqual(end);
    expect((await locker.inspect(key)).holder).toBeNull();
    const listed = await locker.listPage({ prefix: key });
    expect(listed.entries).toEqual([]);
    expect(await locker.tryAcquire(key)).toBeNull();
    await until(end.expires_at + end.lock_delay_ms);
    // Past the delay, the next grant of any key sweeps it.
    await other.release();
    const again = await locker.acquire(`sweep-other:${randomUUID()}`);
    expect(row('fencelock_leases', key)).toBeUndefined();
    await again.release();
  });

  it('a leader’s row the same; and a process opening the file deletes only rows past their delay', async () => {
    const file = join(dir, `open-sweep-${randomUUID()}.db`);
    const { backend } = client(file);
    const [short, long] = [`short:${randomUUID()}`, `long:${randomUUID()}`];
    await backend.attempt(killed(short, 100, { lockDelayMs: 300, election: { value: 's' } }));
    await backend.attempt(killed(long, 100, { lockDelayMs: 20_000, election: { value: 'l' } }));
    const shortEnd = row('fencelock_leaders', short, file)!;
    await until(shortEnd.expires_at + shortEnd.lock_delay_ms);
    // Another process opens the file: its set-up sweeps every table.
    const reopened = createSqliteBackend({ path: file });
    opened.push(reopened);
    expect(row('fencelock_leaders', short, file)).toBeUndefined();
    expect(row('fencelock_leaders', long, file)?.lock_delay_ms).toBe(20_000n);
    expect(await reopened.leader!(long)).toBeNull();
    expect(
      (await reopened.attempt(killed(long, 1_000, { election: { value: 'x' } }))).granted,
    ).toBe(false);
  });
});

describe('SQLite lock-delay: the waiting line', () => {
  it('waiters keep their order through the delay; the head is granted when it ends, not before', async () => {
    const { backend } = client();
    const key = `line:${randomUUID()}`;
    expect((await backend.attempt(killed(key, 300, { lockDelayMs: 1_500 }))).granted).toBe(true);
    const end = row('fencelock_leases', key)!;
    const freeAt = Number(end.expires_at + end.lock_delay_ms);
    await until(end.expires_at);
    // A contender that passes no delay and does not wait is refused too, with the delay left.
    const askedAt = Date.now();
    const refused = await backend.attempt(killed(key, 1_000));
    expect(refused.granted).toBe(false);
    const left = (refused as { holderTtlMs: number }).holderTtlMs;
    expect(left).toBeGreaterThan(0);
    expect(left).toBeLessThanOrEqual(freeAt - askedAt + 5);
    const order: { name: string; at: number }[] = [];
    let attempts = 0;
    const waiters = ['b', 'c'].map((name) => {
      const { locker, backend: own } = client();
      // Count the head's attempts: its wait must not spin through the delay.
      if (name === 'b') {
        const attempt = own.attempt.bind(own);
        own.attempt = (r) => {
          attempts += 1;
          return attempt(r);
        };
      }
      return { name, locker };
    });
    const acquires: Promise<void>[] = [];
    for (const { name, locker } of waiters) {
      acquires.push(
        locker.acquire(key, { ttlMs: 5_000, waitMs: 15_000 }).then(async (lease) => {
          order.push({ name, at: Date.now() });
          await sleep(50);
          await lease.release();
        }),
      );
      // Each one is in line before the next asks.
      await sleep(100);
    }
    await Promise.all(acquires);
    expect(order.map((o) => o.name)).toEqual(['b', 'c']);
    // Not before the delay's end on the engine clock; woken soon after it (no commit marks it).
    expect(order[0]!.at).toBeGreaterThanOrEqual(freeAt);
    expect(order[0]!.at - freeAt).toBeLessThan(1_000);
    // One attempt into the delay, a few rechecks (every `LINE_RECHECK_MS` at most), one at its end.
    expect(attempts).toBeLessThan(10);
  }, 30_000);

  it('a reader is kept out through the delay too', async () => {
    const { backend } = client();
    const { locker } = client();
    const key = `line-read:${randomUUID()}`;
    expect((await backend.attempt(killed(key, 200, { lockDelayMs: 1_000 }))).granted).toBe(true);
    const end = row('fencelock_leases', key)!;
    await until(end.expires_at);
    expect(await locker.tryAcquire(key, { mode: 'read' })).toBeNull();
    const reader = await locker.acquire(key, { mode: 'read', waitMs: 10_000 });
    expect(Date.now()).toBeGreaterThanOrEqual(Number(end.expires_at + end.lock_delay_ms));
    await reader.release();
  }, 20_000);
});

describe('SQLite lock-delay: what clears it', () => {
  it('an abandon of the live grant clears it; one after the grant ran out does not', async () => {
    const { backend, locker } = client();
    const live = killed(`abandon-live:${randomUUID()}`, 10_000, { lockDelayMs: 5_000 });
    expect((await backend.attempt(live)).granted).toBe(true);
    await backend.abandon(live);
    expect(row('fencelock_leases', live.key)).toBeUndefined();
    const next = await locker.tryAcquire(live.key);
    expect(next).not.toBeNull();
    await next!.release();

    const late = killed(`abandon-late:${randomUUID()}`, 200, { lockDelayMs: 5_000 });
    expect((await backend.attempt(late)).granted).toBe(true);
    await until(row('fencelock_leases', late.key)!.expires_at);
    await backend.abandon(late);
    expect(row('fencelock_leases', late.key)?.owner).toBe(late.owner);
    expect(await locker.tryAcquire(late.key)).toBeNull();
    // Its own owner is not granted again either: its grant ended.
    expect((await backend.attempt(late)).granted).toBe(false);
  });

  it('a leader’s late release or withdrawal leaves the delay; a live resignation clears it', async () => {
    const { backend } = client();
    const name = `election-clear:${randomUUID()}`;
    const request = killed(name, 200, { lockDelayMs: 5_000, election: { value: 'a' } });
    const granted = await backend.attempt(request);
    const token = (granted as { token: bigint }).token;
    await until(row('fencelock_leaders', name)!.expires_at);
    const lease = { key: name, owner: request.owner, fencingToken: token, election: true };
    expect(await backend.release(lease)).toBe('not-held');
    await backend.abandon(request);
    expect(row('fencelock_leaders', name)?.owner).toBe(request.owner);
    expect((await backend.attempt(killed(name, 1_000, { election: { value: 'b' } }))).granted).toBe(
      false,
    );

    const other = `election-resign:${randomUUID()}`;
    const { locker } = client();
    const leader = await locker
      .election(other)
      .campaign('a', { ttlMs: 10_000, lockDelayMs: 5_000 });
    expect(row('fencelock_leaders', other)!.lock_delay_ms).toBe(5_000n);
    await leader.resign();
    const next = await client().locker.election(other).campaign('b', { waitMs: 0 });
    expect(next.term).toBeGreaterThan(leader.term);
    await next.resign();
  });
});

/** The layout of the version before lock-delays (the rows of grants without `lock_delay_ms`). */
const BEFORE_LOCK_DELAYS = `
CREATE TABLE IF NOT EXISTS fencelock_leases (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_leases_expires_at ON fencelock_leases (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_token (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  last_token INTEGER NOT NULL
);
INSERT OR IGNORE INTO fencelock_token (id, last_token) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS fencelock_waiters (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  reads      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_waiters_line ON fencelock_waiters (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_waiters_expires_at ON fencelock_waiters (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_leaders (
  key        TEXT PRIMARY KEY,
  owner      TEXT NOT NULL,
  token      INTEGER NOT NULL,
  value      TEXT NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_leaders_expires_at ON fencelock_leaders (expires_at);
CREATE TABLE IF NOT EXISTS fencelock_candidates (
  key        TEXT NOT NULL,
  owner      TEXT NOT NULL,
  seq        INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (key, owner)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fencelock_candidates_line ON fencelock_candidates (key, seq);
CREATE INDEX IF NOT EXISTS fencelock_candidates_expires_at ON fencelock_candidates (expires_at);
CREATE VIEW IF NOT EXISTS fencelock_fences (key, last_token) AS SELECT NULL, NULL WHERE 0;
`;

describe('SQLite lock-delay: a file of the version before lock-delays', () => {
  it('gets the column in place (0 in its rows); its lease, leader and counter carry on', async () => {
    const file = join(dir, 'before-lock-delays.db');
    const db = new Database(file);
    db.pragma('journal_mode = WAL');
    db.exec(BEFORE_LOCK_DELAYS);
    db.exec(`UPDATE fencelock_token SET last_token = 50 WHERE id = 1`);
    db.exec(`INSERT INTO fencelock_leases VALUES ('w', '${'c'.repeat(32)}', 49, ${NOW} + 300)`);
    db.exec(
      `INSERT INTO fencelock_leaders VALUES ('e', '${'d'.repeat(32)}', 50, 'old', ${NOW} + 60000)`,
    );
    db.close();

    const { locker, backend } = client(file);
    // The rows already there have no delay; the live ones are still held.
    expect(row('fencelock_leases', 'w', file)?.lock_delay_ms).toBe(0n);
    expect(row('fencelock_leaders', 'e', file)?.lock_delay_ms).toBe(0n);
    expect(await backend.leader!('e')).toMatchObject({ term: 50n, value: 'old' });
    expect(await locker.tryAcquire('w')).toBeNull();
    // Its lease ends with no delay after it.
    await until(row('fencelock_leases', 'w', file)!.expires_at);
    const lease = await locker.tryAcquire('w', { lockDelayMs: 800 });
    expect(lease?.fencingToken).toBe(51n);
    expect(row('fencelock_leases', 'w', file)?.lock_delay_ms).toBe(800n);
    await lease!.release();

    // The earlier version's set-up and grant still run on the upgraded file (its rows: no delay).
    const earlier = new Database(file);
    earlier.exec(BEFORE_LOCK_DELAYS);
    earlier
      .prepare(
        `INSERT OR REPLACE INTO fencelock_leases (key, owner, token, expires_at) VALUES (?, ?, ?, ${NOW} + 100)`,
      )
      .run('x', 'e'.repeat(32), 52);
    earlier.close();
    expect(row('fencelock_leases', 'x', file)?.lock_delay_ms).toBe(0n);

    // Opening it again adds nothing twice.
    const reopened = createSqliteBackend({ path: file });
    opened.push(reopened);
    const check = new Database(file, { readonly: true });
    const columns = check
      .prepare<[], { name: string }>(
        `SELECT name FROM pragma_table_info('fencelock_leases') WHERE name = 'lock_delay_ms'`,
      )
      .all();
    check.close();
    expect(columns).toHaveLength(1);
    expect(await reopened.leader!('e')).toMatchObject({ term: 50n });
  });
});
