/**
 * The flash-sale's stock as the buyers see it: what a read returns, what the write log holds,
 * where a run's stock lives, and the `Inventory` every store's implementation
 * (sqlite-inventory.ts, redis-inventory.ts, postgres-inventory.ts) provides. inventory.ts picks
 * one by the lock store.
 */
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
