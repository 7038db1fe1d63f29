/**
 * SQLite: a semaphore's rows (`fencelock_permits`, one per live permit, and its own line in
 * `fencelock_permit_waiters`), the waiters a release wakes (those its freed permits let in, no
 * herd), the line's rules (a single attempt never joins it nor cuts in front of it), the
 * withdrawal of a waiter, and expired rows swept. Each backend below has its own connection to
 * the file, as separate processes would have.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createSqliteBackend,
  QUEUE_ENTRY_TTL_MS,
  type SqliteBackend,
} from '../../../packages/fencelock/src/backends/sqlite/index.js';
import {
  type AttemptRequest,
  type AttemptResult,
  createLocker,
  type Locker,
  type NotGranted,
  PermitsMismatchError,
} from '../../../packages/fencelock/src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-semaphore-'));
const path = join(dir, 'locks.db');
const backends: SqliteBackend[] = [];
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all([...lockers, ...backends].map((b) => b.close()));
  rmSync(dir, { recursive: true, force: true });
});

function backend(): SqliteBackend {
  const b = createSqliteBackend({ path });
  backends.push(b);
  return b;
}

function locker(): Locker {
  const l = createLocker(createSqliteBackend({ path }));
  lockers.push(l);
  return l;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A permit attempt on `key` by a made-up owner (32 times `ownerDigit`), straight to the engine. */
function permitAttempt(
  key: string,
  ownerDigit: string,
  permits: number,
  waiting: boolean,
  ttlMs = 10_000,
): AttemptRequest {
  return {
    key,
    owner: ownerDigit.repeat(32),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: waiting,
    permits,
  };
}

/** Read-only rows of the file, through a connection of the test's own. */
function rows<T>(sql: string, ...params: unknown[]): T[] {
  const db = new Database(path, { readonly: true });
  try {
    db.defaultSafeIntegers(true);
    return db.prepare<unknown[], T>(sql).all(...params);
  } finally {
    db.close();
  }
}

/** Owners of the semaphore's permits, by owner. */
const holders = (key: string) =>
  rows<{ owner: string; token: bigint; permits: bigint }>(
    'SELECT owner, token, permits FROM fencelock_permits WHERE key = ? ORDER BY owner',
    key,
  );

/** The semaphore's line, head first. */
const line = (key: string) =>
  rows<{ owner: string; permits: bigint }>(
    'SELECT owner, permits FROM fencelock_permit_waiters WHERE key = ? ORDER BY seq',
    key,
  );

const owner = (digit: string) => digit.repeat(32);

function expectNotGranted(result: AttemptResult): NotGranted {
  expect(result.granted).toBe(false);
  return result as NotGranted;
}

/** Whether `pending` settled within `ms`. */
async function settledWithin(pending: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  void pending.then(() => {
    settled = true;
  });
  await sleep(ms);
  return settled;
}

describe('SQLite semaphore: rows', () => {
  it('one row per permit with its token and count, the line apart; nothing stays once idle', async () => {
    const key = `sem:rows:${randomUUID()}`;
    const b = backend();
    const first = await b.attempt(permitAttempt(key, 'a', 2, true));
    const second = await b.attempt(permitAttempt(key, 'b', 2, false));
    expect(first.granted && second.granted).toBe(true);
    if (!first.granted || !second.granted) return;
    expect(second.token).toBeGreaterThan(first.token);
    const waiting = expectNotGranted(await b.attempt(permitAttempt(key, 'c', 2, true)));
    expect(waiting.queued).toBe(true);
    expect(holders(key)).toEqual([
      { owner: owner('a'), token: first.token, permits: 2n },
      { owner: owner('b'), token: second.token, permits: 2n },
    ]);
    expect(line(key)).toEqual([{ owner: owner('c'), permits: 2n }]);
    // A lock of the same key is another object: no lease row, and it is free.
    expect(rows('SELECT key FROM fencelock_leases WHERE key = ?', key)).toEqual([]);
    expect((await b.inspect(key)).holder).toBeNull();

    // A holder asking again keeps its token.
    const again = await b.attempt(permitAttempt(key, 'a', 2, true));
    expect(again).toMatchObject({ granted: true, token: first.token });

    const ref = (digit: string, token: bigint) => ({
      key,
      owner: owner(digit),
      fencingToken: token,
      permits: 2,
    });
    expect(await b.release(ref('a', first.token))).toBe('released');
    const third = await b.attempt(permitAttempt(key, 'c', 2, true));
    expect(third.granted).toBe(true);
    if (!third.granted) return;
    expect(third.token).toBeGreaterThan(second.token);
    expect(line(key)).toEqual([]);
    expect(await b.release(ref('b', second.token))).toBe('released');
    expect(await b.release(ref('c', third.token))).toBe('released');
    expect(holders(key)).toEqual([]);
    expect(line(key)).toEqual([]);
  });

  it('another count while holders or waiters are live is refused, writing nothing', async () => {
    const key = `sem:mismatch:${randomUUID()}`;
    const b = backend();
    const held = await b.attempt(permitAttempt(key, 'a', 1, true));
    expect(held.granted).toBe(true);
    expectNotGranted(await b.attempt(permitAttempt(key, 'b', 1, true)));
    for (const waiting of [true, false]) {
      const refused = await b.attempt(permitAttempt(key, 'c', 3, waiting)).catch((e) => e);
      expect(refused).toBeInstanceOf(PermitsMismatchError);
      expect(refused).toMatchObject({ key, requested: 3, inUse: 1 });
    }
    expect(holders(key).map((r) => r.owner)).toEqual([owner('a')]);
    expect(line(key).map((r) => r.owner)).toEqual([owner('b')]);
    // Idle again (the holder and the waiter withdrawn): another count is taken.
    await b.abandon(permitAttempt(key, 'a', 1, true));
    await b.abandon(permitAttempt(key, 'b', 1, true));
    const recounted = await b.attempt(permitAttempt(key, 'c', 3, false));
    expect(recounted.granted).toBe(true);
    expect(holders(key)).toMatchObject([{ owner: owner('c'), permits: 3n }]);
    await b.abandon(permitAttempt(key, 'c', 3, false));
  });

  it('expired permits and line entries are swept by the next grant, and when a file is opened', async () => {
    const key = `sem:sweep:${randomUUID()}`;
    const b = backend();
    expect((await b.attempt(permitAttempt(key, 'a', 2, true, 50))).granted).toBe(true);
    expect((await b.attempt(permitAttempt(key, 'b', 2, true, 50))).granted).toBe(true);
    expectNotGranted(await b.attempt(permitAttempt(key, 'c', 2, true)));
    await b.close();
    await sleep(QUEUE_ENTRY_TTL_MS + 100);
    expect(holders(key)).toHaveLength(2);
    expect(line(key)).toHaveLength(1);
    // A grant of another semaphore sweeps them.
    const other = `sem:sweep-other:${randomUUID()}`;
    const c = backend();
    const granted = await c.attempt(permitAttempt(other, 'd', 1, false));
    expect(granted.granted).toBe(true);
    expect(holders(key)).toEqual([]);
    expect(line(key)).toEqual([]);
    // An expired permit left when no grant follows goes when a process opens the file.
    await c.abandon(permitAttempt(other, 'd', 1, false));
    expect((await c.attempt(permitAttempt(key, 'e', 2, false, 50))).granted).toBe(true);
    await sleep(100);
    expect(holders(key)).toHaveLength(1);
    backend();
    expect(holders(key)).toEqual([]);
  });
});

describe('SQLite semaphore: the line', () => {
  it('a release wakes only the waiters its freed permits let in (no herd)', async () => {
    const key = `sem:herd:${randomUUID()}`;
    const holder = backend();
    const waiters = ['d', 'e', 'f'].map(() => backend());
    for (const digit of ['a', 'b', 'c']) {
      expect((await holder.attempt(permitAttempt(key, digit, 3, false))).granted).toBe(true);
    }
    const watch = new AbortController();
    const wakes: Promise<unknown>[] = [];
    for (const [i, digit] of ['d', 'e', 'f'].entries()) {
      const answer = expectNotGranted(
        await waiters[i]!.attempt(permitAttempt(key, digit, 3, true)),
      );
      expect(answer.queued).toBe(true);
      wakes.push(answer.waitForChange!(watch.signal, 1_500));
    }
    try {
      expect(line(key).map((r) => r.owner)).toEqual([owner('d'), owner('e'), owner('f')]);
      const tokenOf = (digit: string) => holders(key).find((r) => r.owner === owner(digit))!.token;
      const ref = (digit: string) => ({
        key,
        owner: owner(digit),
        fencingToken: tokenOf(digit),
        permits: 3,
      });
      // One permit freed: the head wakes, the two behind it keep watching.
      expect(await holder.release(ref('a'))).toBe('released');
      expect(await settledWithin(wakes[0]!, 200)).toBe(true);
      expect(await settledWithin(wakes[1]!, 0)).toBe(false);
      expect(await settledWithin(wakes[2]!, 0)).toBe(false);
      // Two more freed (the head has not taken its permit yet): the other two wake.
      expect(await holder.release(ref('b'))).toBe('released');
      expect(await settledWithin(wakes[1]!, 200)).toBe(true);
      expect(await settledWithin(wakes[2]!, 0)).toBe(false);
      expect(await holder.release(ref('c'))).toBe('released');
      expect(await settledWithin(wakes[2]!, 200)).toBe(true);
      for (const [i, digit] of ['d', 'e', 'f'].entries()) {
        expect((await waiters[i]!.attempt(permitAttempt(key, digit, 3, true))).granted).toBe(true);
      }
      expect(line(key)).toEqual([]);
    } finally {
      watch.abort();
      for (const [i, digit] of ['d', 'e', 'f'].entries()) {
        await waiters[i]!.abandon(permitAttempt(key, digit, 3, true));
      }
    }
  });

  it('a single attempt never joins the line, nor takes a freed permit a waiter stands for', async () => {
    const key = `sem:single:${randomUUID()}`;
    const b = backend();
    expect((await b.attempt(permitAttempt(key, 'a', 1, false))).granted).toBe(true);
    const single = expectNotGranted(await b.attempt(permitAttempt(key, 'b', 1, false)));
    expect(single.queued).toBe(false);
    expect(line(key)).toEqual([]);
    expectNotGranted(await b.attempt(permitAttempt(key, 'c', 1, true)));
    await b.abandon(permitAttempt(key, 'a', 1, false));
    expectNotGranted(await b.attempt(permitAttempt(key, 'b', 1, false)));
    expect((await b.attempt(permitAttempt(key, 'c', 1, true))).granted).toBe(true);
    await b.abandon(permitAttempt(key, 'c', 1, true));
  });

  it('leaveQueue takes a waiter out and keeps a permit; abandon drops the permit whatever the token', async () => {
    const key = `sem:withdraw:${randomUUID()}`;
    const b = backend();
    const held = await b.attempt(permitAttempt(key, 'a', 1, true));
    expect(held.granted).toBe(true);
    expectNotGranted(await b.attempt(permitAttempt(key, 'b', 1, true)));
    await b.leaveQueue(permitAttempt(key, 'b', 1, true));
    expect(line(key)).toEqual([]);
    await b.leaveQueue(permitAttempt(key, 'a', 1, true));
    expect(holders(key).map((r) => r.owner)).toEqual([owner('a')]);
    await b.abandon(permitAttempt(key, 'a', 1, true));
    expect(holders(key)).toEqual([]);
  });

  it('grants in arrival order; a waiter that vanished takes one place until its entry TTL', async () => {
    const key = `sem:order:${randomUUID()}`;
    const options = { permits: 2, ttlMs: 10_000, waitMs: 10_000 } as const;
    const holder = locker();
    const held = await Promise.all([
      holder.semaphore(key, options).acquire(),
      holder.semaphore(key, options).acquire(),
    ]);
    // Joins the line, then never attempts again (a crashed process).
    const gone = backend();
    expectNotGranted(await gone.attempt(permitAttempt(key, 'e', 2, true)));
    await gone.close();
    const order: string[] = [];
    const acquires: Promise<void>[] = [];
    for (const name of ['b', 'c', 'd']) {
      acquires.push(
        locker()
          .semaphore(key, options)
          .acquire()
          .then(async (permit) => {
            order.push(name);
            await sleep(20);
            expect(await permit.release()).toBe('released');
          }),
      );
      while (line(key).length < acquires.length + 1) await sleep(5);
    }
    for (const permit of held) expect(await permit.release()).toBe('released');
    await Promise.all(acquires);
    expect(order).toEqual(['b', 'c', 'd']);
    // The vanished entry took one place (with one permit free, those behind it went) and stays
    // until its TTL; the first grant after that sweeps it.
    expect(line(key)).toEqual([{ owner: owner('e'), permits: 2n }]);
    expect(holders(key)).toEqual([]);
    await sleep(QUEUE_ENTRY_TTL_MS);
    const last = await holder.semaphore(key, options).tryAcquire();
    expect(line(key)).toEqual([]);
    expect(await last!.release()).toBe('released');
  });
});
