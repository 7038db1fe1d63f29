/**
 * The flash-sale's resource: one stock counter shared by the worker processes, and the
 * resource-side half of fencing (Kleppmann, "How to do distributed locking", 2016). The stock is
 * deliberately NOT updated atomically by a purchase: a buyer reads it, works for a while, then
 * writes the new value, so concurrent buyers lose each other's updates unless a lock serialises
 * them. Each write carries the buyer's fencing token, and a guard refuses a write whose token is
 * older than one it has already accepted.
 *
 * Where the stock lives follows the lock store:
 * - `redis://`, `rediss://`: on that Redis, written through `RedisFence`;
 * - `postgres://`, `postgresql://`: in that database (a schema of the run's own), written through
 *   `PgFence.transaction`;
 * - any other store (sqlite, etcd, ZooKeeper, Redlock, Sentinel, Cluster): in a SQLite file in the
 *   run's temp folder, whose row is its own guard (`… WHERE fence_token <= ?`).
 *
 * Every accepted write is also appended to a write log with its token, so the report can check
 * that the tokens of successive writes strictly increased.
 */
import { join } from 'node:path';
import { parsePostgresUrl } from 'fencelock/postgres';
import { parseRedisUrl } from 'fencelock/redis';
import { SqliteInventory } from './sqlite-inventory.js';
import type { Inventory, InventoryLocation } from './stock.js';

export type {
  Inventory,
  InventoryKind,
  InventoryLocation,
  LoggedWrite,
  StockReading,
} from './stock.js';

/**
 * Where a run with lock store `store` keeps its stock: `dir` is the run's temp folder and
 * `runId` a name no other run uses (hex).
 */
export function inventoryLocation(store: string, dir: string, runId: string): InventoryLocation {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(store)?.[1]?.toLowerCase();
  if (scheme === 'redis' || scheme === 'rediss') {
    const { url } = parseRedisUrl(new URL(store));
    return { kind: 'redis', url: url!, prefix: `fencelock:flash-sale:${runId}` };
  }
  if (scheme === 'postgres' || scheme === 'postgresql') {
    const { connectionString } = parsePostgresUrl(store);
    return { kind: 'postgres', connectionString, schema: `fencelock_flash_sale_${runId}` };
  }
  return { kind: 'sqlite', path: join(dir, 'inventory.db') };
}

/**
 * Set up the stock at `location` with `stock` units and an empty write log (replacing any
 * earlier one). Call once, in the orchestrator, before the workers open it.
 */
export async function createInventory(
  location: InventoryLocation,
  stock: number,
): Promise<Inventory> {
  switch (location.kind) {
    case 'sqlite':
      return SqliteInventory.create(location.path, stock);
    case 'redis': {
      const { RedisInventory } = await import('./redis-inventory.js');
      return RedisInventory.create(location, stock);
    }
    case 'postgres': {
      const { PostgresInventory } = await import('./postgres-inventory.js');
      return PostgresInventory.create(location, stock);
    }
  }
}

/** Open the stock made by `createInventory`. */
export async function openInventory(location: InventoryLocation): Promise<Inventory> {
  switch (location.kind) {
    case 'sqlite':
      return SqliteInventory.open(location.path);
    case 'redis': {
      const { RedisInventory } = await import('./redis-inventory.js');
      return RedisInventory.open(location);
    }
    case 'postgres': {
      const { PostgresInventory } = await import('./postgres-inventory.js');
      return PostgresInventory.open(location);
    }
  }
}
