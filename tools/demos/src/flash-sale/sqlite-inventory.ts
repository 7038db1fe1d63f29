/**
 * The flash-sale's stock in its own SQLite file (for stores other than Redis and PostgreSQL),
 * shared by the worker processes.
 *
 * Its fencing guard is SQLite's equivalent of `PgFence`: the row remembers the highest fencing
 * token that wrote it, and a fenced write (`UPDATE … WHERE fence_token <= ?`) carrying an older
 * token is refused. Write and write-log entry commit in one transaction, so the log's order is
 * the commit order.
 */
import Database from 'better-sqlite3';
import type { Inventory, LoggedWrite, StockReading } from './stock.js';

const SCHEMA = `
CREATE TABLE IF NOT EXISTS inventory (
  id          INTEGER PRIMARY KEY CHECK (id = 1),
  stock       INTEGER NOT NULL,
  fence_token INTEGER NOT NULL DEFAULT 0  -- highest fencing token of an accepted write
);
CREATE TABLE IF NOT EXISTS write_log (
  seq    INTEGER PRIMARY KEY AUTOINCREMENT,  -- commit order
  token  INTEGER,                            -- NULL for an unfenced (--no-lock) write
  stock  INTEGER NOT NULL,
  worker INTEGER NOT NULL
);
`;

/** How long a writer waits for another process's write transaction, ms. */
const BUSY_TIMEOUT_MS = 10_000;

/** A connection to the inventory file. Open one per process; `close()` when done. */
export class SqliteInventory implements Inventory {
  readonly kind = 'sqlite';
  readonly #db: Database.Database;
  readonly #read: Database.Statement<[], { stock: bigint; fence_token: bigint }>;
  readonly #writeFenced: (stock: number, token: bigint, worker: number) => boolean;
  readonly #writeUnfenced: (stock: number, worker: number) => void;

  private constructor(path: string) {
    const db = new Database(path);
    this.#db = db;
    db.defaultSafeIntegers(true);
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = NORMAL');
    db.exec(SCHEMA);
    this.#read = db.prepare('SELECT stock, fence_token FROM inventory WHERE id = 1');
    const fenced = db.prepare<[number, bigint, bigint]>(
      'UPDATE inventory SET stock = ?, fence_token = ? WHERE id = 1 AND fence_token <= ?',
    );
    const unfenced = db.prepare<[number]>('UPDATE inventory SET stock = ? WHERE id = 1');
    const log = db.prepare<[bigint | null, number, number]>(
      'INSERT INTO write_log (token, stock, worker) VALUES (?, ?, ?)',
    );
    // Write and log entry commit together, so the log's order is the writes' order.
    this.#writeFenced = db
      .transaction((stock: number, token: bigint, worker: number): boolean => {
        if (fenced.run(stock, token, token).changes !== 1) return false;
        log.run(token, stock, worker);
        return true;
      })
      .immediate.bind(null);
    this.#writeUnfenced = db
      .transaction((stock: number, worker: number): void => {
        unfenced.run(stock);
        log.run(null, stock, worker);
      })
      .immediate.bind(null);
  }

  /**
   * Create (or reset) the inventory file at `path` with `stock` units and an empty write log.
   * Call once, in the parent, before the workers open it.
   */
  static create(path: string, stock: number): SqliteInventory {
    const inventory = new SqliteInventory(path);
    inventory.#db
      .transaction(() => {
        inventory.#db.exec('DELETE FROM write_log; DELETE FROM inventory;');
        inventory.#db
          .prepare('INSERT INTO inventory (id, stock, fence_token) VALUES (1, ?, 0)')
          .run(stock);
      })
      .immediate();
    return inventory;
  }

  /** Open an inventory file made by `SqliteInventory.create`. */
  static open(path: string): SqliteInventory {
    return new SqliteInventory(path);
  }

  /** Read the stock and the highest accepted fencing token (no lock taken on the row). */
  async read(): Promise<StockReading> {
    const row = this.#read.get();
    if (row === undefined) throw new Error('inventory is not initialised');
    return { stock: Number(row.stock), fenceToken: row.fence_token };
  }

  /**
   * Write `stock` if `token` is at least the highest token seen (equal is accepted, so one lease
   * may write more than once). Returns false when the write was refused as stale.
   */
  async writeFenced(stock: number, token: bigint, worker: number): Promise<boolean> {
    return this.#writeFenced(stock, token, worker);
  }

  /** Write `stock` with no fencing check at all (the `--no-lock` demonstration). */
  async writeUnfenced(stock: number, worker: number): Promise<void> {
    this.#writeUnfenced(stock, worker);
  }

  /** Every accepted write, in commit order. */
  async writeLog(): Promise<LoggedWrite[]> {
    return this.#db
      .prepare<[], { token: bigint | null; stock: bigint; worker: bigint }>(
        'SELECT token, stock, worker FROM write_log ORDER BY seq',
      )
      .all()
      .map((r) => ({ token: r.token, stock: Number(r.stock), worker: Number(r.worker) }));
  }

  /** Close the connection. Idempotent. */
  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }

  /** Nothing to remove: the file lives in the run's temp folder, which the run deletes. */
  async drop(): Promise<void> {}
}
