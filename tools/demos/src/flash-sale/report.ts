/**
 * The flash-sale's figures: aggregate the workers' reports and the inventory's write log, then
 * render them as a table (for people) or one JSON object (for scripts and tests).
 */

import type { WorkerFigures } from './protocol.js';
import type { InventoryKind, LoggedWrite } from './stock.js';

/** Final figures of one run. */
export interface FlashSaleResult {
  /** Store URL of the locker (also reported with `--no-lock`, where it is not used). */
  readonly store: string;
  /**
   * Where the stock lived and which guard fenced its writes: `redis` (`RedisFence` on the store's
   * Redis), `postgres` (`PgFence.transaction` in the store's database) or `sqlite` (a SQLite
   * file whose row is its own guard).
   */
  readonly inventory: InventoryKind;
  /** Worker processes. */
  readonly workers: number;
  /** Whether the workers locked (false with `--no-lock`). */
  readonly lock: boolean;
  /** Lease length, ms. */
  readonly ttlMs: number;
  /** Purchase attempts made, all workers. */
  readonly attempts: number;
  /** Initial stock. */
  readonly stock: number;
  /** Purchases counted by the workers (accepted writes of a stock − 1). */
  readonly sold: number;
  /** Stock left in the inventory at the end. */
  readonly stockLeft: number;
  /** Units sold beyond the initial stock: max(0, sold − stock). Must be 0 with the lock. */
  readonly oversold: number;
  /** Whether sold == stock − stockLeft (every sale took one unit off the stock). */
  readonly soldMatchesStockDrop: boolean;
  /** Fenced writes the inventory refused because a newer token had written. */
  readonly staleRejected: number;
  /** Writes skipped because the lease's signal had aborted. */
  readonly skippedLost: number;
  /** `withLock` calls that ended with a `LockLostError`. */
  readonly leasesLost: number;
  /** Writes the inventory accepted (entries in the write log). */
  readonly writes: number;
  /** Time from the start signal to the last worker's report, ms. */
  readonly elapsedMs: number;
  /** attempts / elapsed seconds. */
  readonly throughputPerSec: number;
  /** Median time from calling `withLock` to entering the critical section, ms; null without lock. */
  readonly waitP50Ms: number | null;
  /** 99th percentile of the same, ms; null without lock. */
  readonly waitP99Ms: number | null;
  /**
   * Whether the fencing tokens of successive accepted writes strictly increased; null without
   * lock (unfenced writes carry no token).
   */
  readonly tokensIncreasing: boolean | null;
  /** True when the run is correct (with lock: oversold 0, stock accounted, tokens increasing). */
  readonly ok: boolean;
}

/** What `summarize` needs. */
export interface RunFigures {
  readonly store: string;
  readonly inventory: InventoryKind;
  readonly workers: number;
  readonly lock: boolean;
  readonly ttlMs: number;
  readonly stock: number;
  readonly stockLeft: number;
  readonly elapsedMs: number;
  readonly perWorker: readonly WorkerFigures[];
  readonly writeLog: readonly LoggedWrite[];
}

/**
 * Nearest-rank percentile of `values` (need not be sorted), `p` in [0, 100]; null when empty.
 */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.ceil((p / 100) * sorted.length));
  return sorted[Math.min(rank, sorted.length) - 1]!;
}

/**
 * Whether every token is strictly greater than the one before; null if any write had no token.
 * An empty or one-write log counts as increasing.
 */
export function strictlyIncreasing(tokens: readonly (bigint | null)[]): boolean | null {
  let previous: bigint | undefined;
  for (const token of tokens) {
    if (token === null) return null;
    if (previous !== undefined && token <= previous) return false;
    previous = token;
  }
  return true;
}

const round2 = (value: number): number => Math.round(value * 100) / 100;

/** Aggregate one run's figures. */
export function summarize(run: RunFigures): FlashSaleResult {
  const sum = (pick: (f: WorkerFigures) => number) =>
    run.perWorker.reduce((total, f) => total + pick(f), 0);
  const attempts = sum((f) => f.attempts);
  const sold = sum((f) => f.sold);
  const waits = run.perWorker.flatMap((f) => f.waitsMs);
  const p50 = run.lock ? percentile(waits, 50) : null;
  const p99 = run.lock ? percentile(waits, 99) : null;
  const oversold = Math.max(0, sold - run.stock);
  const soldMatchesStockDrop = sold === run.stock - run.stockLeft;
  const tokensIncreasing = run.lock ? strictlyIncreasing(run.writeLog.map((w) => w.token)) : null;
  return {
    store: run.store,
    inventory: run.inventory,
    workers: run.workers,
    lock: run.lock,
    ttlMs: run.ttlMs,
    attempts,
    stock: run.stock,
    sold,
    stockLeft: run.stockLeft,
    oversold,
    soldMatchesStockDrop,
    staleRejected: sum((f) => f.staleRejected),
    skippedLost: sum((f) => f.skippedLost),
    leasesLost: sum((f) => f.leasesLost),
    writes: run.writeLog.length,
    elapsedMs: Math.round(run.elapsedMs),
    throughputPerSec: run.elapsedMs > 0 ? round2(attempts / (run.elapsedMs / 1000)) : 0,
    waitP50Ms: p50 === null ? null : round2(p50),
    waitP99Ms: p99 === null ? null : round2(p99),
    tokensIncreasing,
    ok: !run.lock || (oversold === 0 && soldMatchesStockDrop && tokensIncreasing === true),
  };
}

const STOCK_PLACES: Record<InventoryKind, string> = {
  sqlite: 'SQLite file, fenced by its row (fence_token)',
  redis: "the store's Redis, through RedisFence",
  postgres: "the store's database, through PgFence.transaction",
};

const yesNo = (value: boolean | null): string =>
  value === null ? 'n/a (no tokens)' : value ? 'yes' : 'NO';
const ms = (value: number | null): string => (value === null ? 'n/a (no lock)' : `${value} ms`);

/** The figures as a two-column text table, ending with a newline. */
export function formatTable(r: FlashSaleResult): string {
  const rows: [string, string][] = [
    ['store', r.lock ? r.store : `${r.store} (not used: --no-lock)`],
    ['stock kept in', STOCK_PLACES[r.inventory]],
    ['workers', String(r.workers)],
    ['lock', r.lock ? `withLock, ttl ${r.ttlMs} ms` : 'none (--no-lock, unfenced writes)'],
    ['attempts', String(r.attempts)],
    ['initial stock', String(r.stock)],
    ['sold', String(r.sold)],
    ['stock left', String(r.stockLeft)],
    ['oversold', String(r.oversold)],
    ['sold == stock − stock left', yesNo(r.soldMatchesStockDrop)],
    ['stale writes rejected', String(r.staleRejected)],
    ['throughput', `${r.throughputPerSec} attempts/s (${r.elapsedMs} ms)`],
    ['acquire wait p50', ms(r.waitP50Ms)],
    ['acquire wait p99', ms(r.waitP99Ms)],
    ['fencing tokens strictly increasing', yesNo(r.tokensIncreasing)],
  ];
  if (r.skippedLost > 0 || r.leasesLost > 0) {
    rows.push(['writes skipped (lease lost)', String(r.skippedLost)]);
    rows.push(['leases lost', String(r.leasesLost)]);
  }
  const left = Math.max(...rows.map(([k]) => k.length));
  const right = Math.max(...rows.map(([, v]) => v.length));
  const line = (l: string, m: string, rr: string) =>
    `${l}${'─'.repeat(left + 2)}${m}${'─'.repeat(right + 2)}${rr}`;
  return [
    line('┌', '┬', '┐'),
    ...rows.map(([k, v]) => `│ ${k.padEnd(left)} │ ${v.padEnd(right)} │`),
    line('└', '┴', '┘'),
    '',
  ].join('\n');
}

/** The one-line verdict printed under the table. */
export function verdict(r: FlashSaleResult): string {
  if (!r.lock) {
    return r.oversold > 0
      ? `Without a lock the sale OVERSOLD by ${r.oversold} (sold ${r.sold} of ${r.stock}): lost updates, as expected.`
      : `Without a lock the sale did not oversell this time (sold ${r.sold} of ${r.stock}); try more workers or attempts.`;
  }
  if (r.ok) {
    return `Correct: sold ${r.sold} of ${r.stock}, oversold 0, fencing tokens strictly increasing.`;
  }
  const problems = [
    r.oversold > 0 ? `oversold by ${r.oversold}` : '',
    r.soldMatchesStockDrop ? '' : `sold ${r.sold} ≠ stock drop ${r.stock - r.stockLeft}`,
    r.tokensIncreasing === true ? '' : 'fencing tokens of successive writes did not increase',
  ].filter((p) => p !== '');
  return `FAILED with the lock: ${problems.join('; ')}.`;
}
