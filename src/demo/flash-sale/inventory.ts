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
import { parsePostgresUrl } from '../../backends/postgres/url.js';
import { parseRedisUrl } from '../../backends/redis/url.js';
import { SqliteInventory } from './sqlite-inventory.js';

/** What a buyer reads. */
export interface StockReading {
  /** Units left. */
  readonly stock: number;
  /** Highest fencing token of an accepted write so far (0n before the first fenced write). */
  readonly fenceToken: bigint;
}

/** One accepted write, from the write log. */
export interface LoggedWrite {
  /** Fencing token the write carried; null for an unfenced write. */
  readonly token: bigint | null;
  /** Stock value written. */
  readonly stock: number;
  /** Index of the worker that wrote it. */
  readonly worker: number;
}

/** Where the stock lives. */
export type InventoryKind = 'sqlite' | 'redis' | 'postgres';

/** Where one run's stock lives; JSON, so it can be handed to the workers. */
export type InventoryLocation =
  | { readonly kind: 'sqlite'; readonly path: string }
  | { readonly kind: 'redis'; readonly url: string; readonly prefix: string }
  | { readonly kind: 'postgres'; readonly connectionString: string; readonly schema: string };

/** One connection to the stock. Open one per process; `close()` when done. */
export interface Inventory {
  readonly kind: InventoryKind;
  /** Read the stock and the highest accepted fencing token (no lock taken). */
  read(): Promise<StockReading>;
  /**
   * Write `stock` through the guard, if `token` is at least the highest token accepted so far
   * (equal passes, so one lease may write more than once), and log it. Returns false when the
   * guard refused the write as stale.
   */
  writeFenced(stock: number, token: bigint, worker: number): Promise<boolean>;
  /** Write `stock` with no fencing check at all (the `--no-lock` demonstration), and log it. */
  writeUnfenced(stock: number, worker: number): Promise<void>;
  /** Every accepted write, in commit order. */
  writeLog(): Promise<LoggedWrite[]>;
  /** Close this connection. Idempotent. */
  close(): Promise<void>;
  /** Remove the run's stock, log and guard records from the engine (not the connection). */
  drop(): Promise<void>;
}

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
