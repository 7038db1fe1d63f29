/**
 * SQLite: waiters stand in a FIFO line per key (`fencelock_waiters`). Each client below has its
 * own backend, so its own connection to the file, as separate processes would have. Before the
 * line, a releasing client usually took the key straight back while the others slept out their
 * backoff: with 12 clients looping on one key, most were never granted.
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
} from '../../../packages/fencelock/src/backends/sqlite/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { expectFairTurns, lineAttempt, takeTurns } from '../../helpers/turns.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-line-'));
const path = join(dir, 'locks.db');
const opened: Locker[] = [];

afterAll(async () => {
  await Promise.all(opened.map((locker) => locker.close()));
  rmSync(dir, { recursive: true, force: true });
});

function client(): Locker {
  const locker = createLocker(createSqliteBackend({ path }));
  opened.push(locker);
  return locker;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Rows of the line of `key`, head first. */
function line(key: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return db
      .prepare<[string], { owner: string }>(
        'SELECT owner FROM fencelock_waiters WHERE key = ? ORDER BY seq',
      )
      .all(key)
      .map((row) => row.owner);
  } finally {
    db.close();
  }
}

describe('SQLite: a FIFO line of waiters per key', () => {
  it('12 clients looping on one key: every client granted, turns alternate, never two holders', async () => {
    const key = `line:loop:${randomUUID()}`;
    const clients = Array.from({ length: 12 }, client);
    const turns = await takeTurns(clients, key, {
      durationMs: 3_000,
      holdMs: 2,
      ttlMs: 5_000,
      waitMs: 10_000,
    });
    expectFairTurns(turns);
    expect(line(key)).toEqual([]);
  }, 30_000);

  it('grants in arrival order', async () => {
    const key = `line:order:${randomUUID()}`;
    const holder = client();
    const held = await holder.acquire(key);
    const order: string[] = [];
    const waiting = ['b', 'c', 'd'].map((name) => ({ name, locker: client() }));
    const acquires: Promise<void>[] = [];
    for (const { name, locker } of waiting) {
      acquires.push(
        locker.acquire(key, { waitMs: 10_000 }).then(async (lease) => {
          order.push(name);
          await lease.release();
        }),
      );
      // Each one is in line before the next asks.
      while (line(key).length < acquires.length) await sleep(5);
    }
    expect(await held.release()).toBe('released');
    await Promise.all(acquires);
    expect(order).toEqual(['b', 'c', 'd']);
  });

  it('a single attempt never joins the line; a free key with a waiter ahead goes to the waiter', async () => {
    const key = `line:single:${randomUUID()}`;
    const holder = client();
    const other = client();
    const held = await holder.acquire(key);
    expect(await other.tryAcquire(key)).toBeNull();
    expect(line(key)).toEqual([]);
    // A waiter lines up; once the key is free, a tryAcquire cuts in front of nobody.
    const waiter = client();
    const waiting = waiter.acquire(key, { waitMs: 10_000 });
    while (line(key).length === 0) await sleep(5);
    const backend = createSqliteBackend({ path });
    try {
      // Release through the backend: the waiter's watch has not run yet when the next attempt
      // comes, so only the line keeps the key for it.
      await held.release();
      const cutIn = await backend.attempt(lineAttempt(key, 'f', false));
      expect(cutIn.granted).toBe(false);
      const lease = await waiting;
      expect(await lease.release()).toBe('released');
    } finally {
      await backend.close();
    }
  });

  it('a waiter that vanished without leaving the line holds it up for its entry TTL at most', async () => {
    const key = `line:vanished:${randomUUID()}`;
    const backend = createSqliteBackend({ path });
    const holder = client();
    const held = await holder.acquire(key);
    // Joins the line, then never attempts again (a crashed process).
    const gone = await backend.attempt(lineAttempt(key, 'e', true));
    expect(gone.granted).toBe(false);
    await backend.close();
    const waiter = client();
    const waiting = waiter.acquire(key, { waitMs: 10_000 });
    while (line(key).length < 2) await sleep(5);
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    const waitedMs = performance.now() - releasedAt;
    expect(waitedMs).toBeLessThan(QUEUE_ENTRY_TTL_MS + 1_000);
    expect(await lease.release()).toBe('released');
    // The grant swept the vanished entry.
    expect(line(key)).toEqual([]);
  });

  it('a waiter that gives up leaves the line', async () => {
    const key = `line:timeout:${randomUUID()}`;
    const holder = client();
    const held = await holder.acquire(key);
    const waiter = client();
    await expect(waiter.acquire(key, { waitMs: 200 })).rejects.toThrow(/timed out/);
    // The withdrawal runs in the background.
    for (let i = 0; i < 100 && line(key).length > 0; i++) await sleep(10);
    expect(line(key)).toEqual([]);
    expect(await held.release()).toBe('released');
  });
});
