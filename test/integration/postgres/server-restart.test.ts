/**
 * Fault F9 (docs/guarantees.md) on the lease mode: a crash-restart of the PostgreSQL server
 * (`pg_ctl stop -m immediate`, then start; WAL recovery) while a lease is held. The lease row
 * and the token sequence are durable: the holder keeps its lease once the pool reconnects
 * (its TTL is longer than the outage), nobody else is granted the key meanwhile, and tokens
 * drawn after the restart are higher than every token before it.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { adminPool, dropSchema, PG_URL, sleep, uniqueSchema } from './support.js';

const schema = uniqueSchema('restart');
const store = `${PG_URL}?schema=${schema}`;

afterAll(async () => {
  const admin = adminPool();
  await dropSchema(admin, schema);
});

describe('PostgreSQL crash-restart (F9 c)', () => {
  it('keeps the held lease and the token order across an immediate restart', async () => {
    const holder = createLocker(store);
    const other = createLocker(store);
    const key = `restart:${randomUUID()}`;
    const before = [];
    for (let i = 0; i < 5; i++) {
      const lease = await other.acquire(`${key}:warm`, { ttlMs: 5_000 });
      before.push(lease.fencingToken);
      await lease.release();
    }
    const lease = await holder.acquire(key, { ttlMs: 15_000 });

    execFileSync('bash', ['scripts/services.sh', 'pg-server', 'restart-immediate'], {
      stdio: 'ignore',
    });

    // The row survived the crash: the other client is refused (its pool reconnects first).
    let refused = false;
    for (let i = 0; i < 50 && !refused; i++) {
      refused = await other.tryAcquire(key).then(
        (got) => got === null,
        () => false,
      );
      if (!refused) await sleep(200);
    }
    expect(refused).toBe(true);
    // The holder's watchdog renews through the new connections.
    await sleep(6_000);
    expect(lease.isHeld).toBe(true);
    expect(lease.signal.aborted).toBe(false);
    expect((await other.inspect(key)).holder?.owner).toBe(lease.owner);

    const after = await other.acquire(`${key}:warm`, { ttlMs: 5_000 });
    expect(after.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect(lease.fencingToken).toBeGreaterThan(before.at(-1)!);
    await after.release();
    expect(await lease.release()).toBe('released');
    await Promise.all([holder.close(), other.close()]);
  }, 60_000);

  it('a waiter rides out a crash-restart and a termination of every connection', async () => {
    // Found by review: one connection error ended the wait with a BackendError.
    const holder = createLocker(store);
    const waiter = createLocker(store);
    const key = `restart-wait:${randomUUID()}`;
    const lease = await holder.acquire(key, { ttlMs: 15_000 });
    const waiting = waiter.acquire(key, { ttlMs: 5_000, waitMs: 30_000 });
    await sleep(300);
    execFileSync('bash', ['scripts/services.sh', 'pg-server', 'kill-backends'], {
      stdio: 'ignore',
    });
    await sleep(300);
    execFileSync('bash', ['scripts/services.sh', 'pg-server', 'restart-immediate'], {
      stdio: 'ignore',
    });
    await sleep(1_000);
    expect(await lease.release()).toBe('released');
    const next = await waiting;
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect(await next.release()).toBe('released');
    await Promise.all([holder.close(), waiter.close()]);
  }, 60_000);
});
