/**
 * The flash-sale demo's stock is written through a fencing guard: `PgFence.transaction` when the
 * lock store is PostgreSQL, `RedisFence.write` when it is Redis, and the inventory row's own
 * `fence_token` check in a SQLite file for the other stores. A demo run drops its stock when it
 * ends, so these tests drive the demo's inventory module in this process, as its workers do
 * (`inventoryLocation` → `createInventory` in the orchestrator, `openInventory` per buyer), with
 * fencing tokens of real leases from the same store:
 * - a fenced write leaves its token in the guard's record, the one the library's guard reads;
 * - a buyer whose lease ran out while it worked writes late with its older token: the guard
 *   refuses it (StaleTokenError inside the inventory, which reports `false`), and the stock and
 *   the write log keep the newer buyer's write.
 * Real PostgreSQL and Redis from `scripts/services.sh`; nothing is mocked.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { PgFence, RedisFence } from '../../packages/fencelock/src/fencing/index.js';
import { createLocker, StaleTokenError } from '../../packages/fencelock/src/index.js';
import {
  createInventory,
  type Inventory,
  type InventoryLocation,
  inventoryLocation,
  openInventory,
} from '../../tools/demos/src/flash-sale/inventory.js';
import { PG_URL, REDIS_URL } from '../helpers/engines.js';

/** The guarded resource's name in the demo's inventories. */
const RESOURCE = 'stock';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-flash-sale-inventory-'));
const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
const pool = new pg.Pool({ connectionString: PG_URL, max: 2 });
pool.on('error', () => undefined);

afterAll(async () => {
  // The lock keys' fencing counters (the inventories remove their own keys and schemas).
  const keys = await redis.keys('*flash-sale-inventory:*');
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  await pool.end();
  rmSync(dir, { recursive: true, force: true });
});

/** The guard's record of the stock, read with the library's own guard on the engine. */
type GuardRecord = (location: InventoryLocation) => Promise<{ token: bigint } | null>;

const STORES: readonly {
  name: string;
  store: () => string;
  kind: InventoryLocation['kind'];
  guard: GuardRecord | undefined;
}[] = [
  {
    name: 'PostgreSQL (PgFence)',
    store: () => PG_URL,
    kind: 'postgres',
    guard: (location) =>
      new PgFence(pool, { schema: (location as { schema: string }).schema }).read(RESOURCE),
  },
  {
    name: 'Redis (RedisFence)',
    store: () => REDIS_URL,
    kind: 'redis',
    guard: (location) =>
      new RedisFence(redis, `${(location as { prefix: string }).prefix}:fenced`).read(RESOURCE),
  },
  {
    name: 'SQLite (the row’s fence_token)',
    store: () => `sqlite:${join(dir, 'locks.db')}`,
    kind: 'sqlite',
    guard: undefined,
  },
];

/** The demo's stock for `store`: seeded by an orchestrator, opened by two buyers. */
async function sale(store: string, stock: number) {
  const location = inventoryLocation(store, dir, randomBytes(4).toString('hex'));
  const seeded = await createInventory(location, stock);
  const buyers: Inventory[] = [];
  try {
    buyers.push(await openInventory(location), await openInventory(location));
  } catch (error) {
    await Promise.all(buyers.map((b) => b.close()));
    await seeded.drop();
    await seeded.close();
    throw error;
  }
  return {
    location,
    seeded,
    a: buyers[0]!,
    b: buyers[1]!,
    async close() {
      await Promise.all(buyers.map((b) => b.close()));
      await seeded.drop();
      await seeded.close();
    },
  };
}

describe.each(STORES)('flash-sale stock on $name', ({ store, kind, guard }) => {
  it('a fenced write records its token in the guard', async () => {
    const locker = createLocker(store());
    const s = await sale(store(), 10);
    try {
      expect(s.location.kind).toBe(kind);
      expect(s.a.kind).toBe(kind);
      expect(await s.a.read()).toEqual({ stock: 10, fenceToken: 0n });
      const lease = await locker.acquire(`flash-sale-inventory:${randomBytes(6).toString('hex')}`);
      const token = lease.fencingToken;
      expect(await s.a.writeFenced(9, token, 0)).toBe(true);
      await lease.release();
      // Both buyers see the stock and the token the guard accepted.
      expect(await s.a.read()).toEqual({ stock: 9, fenceToken: token });
      expect(await s.b.read()).toEqual({ stock: 9, fenceToken: token });
      if (guard !== undefined) expect((await guard(s.location))?.token).toBe(token);
      expect(await s.b.writeLog()).toEqual([{ token, stock: 9, worker: 0 }]);
    } finally {
      await s.close();
      await locker.close();
    }
  });

  it('a late write with the token of a lease that ran out is refused; the newer write stays', async () => {
    const locker = createLocker(store());
    const key = `flash-sale-inventory:${randomBytes(6).toString('hex')}`;
    const s = await sale(store(), 10);
    try {
      // Buyer A holds the lock and reads the stock, then stalls past its TTL (no watchdog).
      const leaseA = await locker.acquire(key, { ttlMs: 1_000, autoRenew: false });
      expect((await s.a.read()).stock).toBe(10);
      // Buyer B gets the lock once A's lease has run out, and buys.
      const leaseB = await locker.acquire(key, { ttlMs: 10_000, waitMs: 10_000 });
      expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);
      expect(await s.b.writeFenced(9, leaseB.fencingToken, 1)).toBe(true);
      // A wakes up and writes what it computed from its stale read: refused.
      expect(await s.a.writeFenced(9, leaseA.fencingToken, 0)).toBe(false);
      expect(await s.a.read()).toEqual({ stock: 9, fenceToken: leaseB.fencingToken });
      expect(await s.a.writeLog()).toEqual([{ token: leaseB.fencingToken, stock: 9, worker: 1 }]);
      // B may write again with its own token (an equal token passes).
      expect(await s.b.writeFenced(8, leaseB.fencingToken, 1)).toBe(true);
      expect(await s.b.read()).toEqual({ stock: 8, fenceToken: leaseB.fencingToken });
      if (guard !== undefined) {
        // The record that refused A is the library guard's: it names both tokens.
        expect((await guard(s.location))?.token).toBe(leaseB.fencingToken);
        const location = s.location as { schema?: string; prefix?: string };
        const late =
          kind === 'postgres'
            ? new PgFence(pool, { schema: location.schema! }).transaction(
                RESOURCE,
                leaseA.fencingToken,
                async () => undefined,
              )
            : new RedisFence(redis, `${location.prefix!}:fenced`).write(
                RESOURCE,
                leaseA.fencingToken,
                '9',
              );
        const refusal = await late.then(
          () => 'written',
          (error: unknown) => error,
        );
        expect(refusal).toBeInstanceOf(StaleTokenError);
        expect(refusal).toMatchObject({
          attemptedToken: leaseA.fencingToken,
          currentToken: leaseB.fencingToken,
        });
        expect((await s.a.read()).stock).toBe(8);
      }
      await leaseB.release();
    } finally {
      await s.close();
      await locker.close();
    }
  });
});
