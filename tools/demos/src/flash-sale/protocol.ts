/**
 * What the flash-sale orchestrator and its worker processes say to each other over the
 * `child_process.fork` IPC channel (JSON serialisation, so no bigint in messages).
 *
 * parent → worker: the config as `argv[2]` (JSON), then `{ type: 'go' }` once every worker is
 * ready and the stock is seeded, so all start buying at the same moment.
 * worker → parent: `ready` (its locker has reached the store), `progress` (attempts done so
 * far), then either `done` with its figures (sent after its locker and inventory connection are
 * closed) or `error`.
 */
import type { InventoryLocation } from './stock.js';

/** Key every worker locks. */
export const LOCK_KEY = 'flash-sale:stock';

/** Settings of one worker. */
export interface WorkerConfig {
  /** Index of the worker, 0-based. */
  readonly workerId: number;
  /** Store URL of the locker. */
  readonly store: string;
  /** Where the stock lives (opened after the start signal; see `inventory.ts`). */
  readonly inventory: InventoryLocation;
  /** Purchase attempts this worker makes. */
  readonly attempts: number;
  /** Lease length, ms. */
  readonly ttlMs: number;
  /** False for the `--no-lock` demonstration: no locker, unfenced writes. */
  readonly lock: boolean;
}

/** One worker's figures. */
export interface WorkerFigures {
  readonly workerId: number;
  /** Purchase attempts made. */
  readonly attempts: number;
  /** Purchases whose stock write was accepted. */
  readonly sold: number;
  /** Fenced writes the inventory refused as stale (no sale counted). */
  readonly staleRejected: number;
  /** Writes skipped because `lease.signal` had aborted (lease lost before the write). */
  readonly skippedLost: number;
  /** `withLock` calls that ended with a `LockLostError`. */
  readonly leasesLost: number;
  /** Time from calling `withLock` to entering the critical section, ms, one per attempt. */
  readonly waitsMs: readonly number[];
}

/** Messages from a worker. */
export type WorkerMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'progress'; readonly attempts: number }
  | { readonly type: 'done'; readonly figures: WorkerFigures }
  | { readonly type: 'error'; readonly message: string; readonly stack?: string };

/** Messages to a worker. */
export type ParentMessage = { readonly type: 'go' };
