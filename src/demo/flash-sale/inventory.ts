/**
 * The flash-sale's resource: one stock counter in its own SQLite file, shared by the worker
 * processes. The store is deliberately NOT atomic for a purchase: a buyer reads the stock, works
 * for a while, then writes the new value, so concurrent buyers lose each other's updates unless
 * a lock serialises them.
 *
 * It is also the resource-side half of fencing (Kleppmann, "How to do distributed locking",
 * 2016): the row remembers the highest fencing token that wrote it, and a fenced write carrying
 * an older token is refused. Every accepted write is appended to a write log, in commit order,
 * with its token, so the report can check that tokens of successive writes strictly increased.
 */
import Database from 'better-sqlite3';

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

/** A connection to the inventory file. Open one per process; `close()` when done. */
export class Inventory {
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
  static create(path: string, stock: number): Inventory {
    const inventory = new Inventory(path);
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

  /** Open an inventory file made by `Inventory.create`. */
  static open(path: string): Inventory {
    return new Inventory(path);
  }

  /** Read the stock and the highest accepted fencing token (no lock taken on the row). */
  read(): StockReading {
    const row = this.#read.get();
    if (row === undefined) throw new Error('inventory is not initialised');
    return { stock: Number(row.stock), fenceToken: row.fence_token };
  }

  /**
   * Write `stock` if `token` is at least the highest token seen (equal is accepted, so one lease
   * may write more than once). Returns false when the write was refused as stale.
   */
  writeFenced(stock: number, token: bigint, worker: number): boolean {
    return this.#writeFenced(stock, token, worker);
  }

  /** Write `stock` with no fencing check at all (the `--no-lock` demonstration). */
  writeUnfenced(stock: number, worker: number): void {
    this.#writeUnfenced(stock, worker);
  }

  /** Every accepted write, in commit order. */
  writeLog(): LoggedWrite[] {
    return this.#db
      .prepare<[], { token: bigint | null; stock: bigint; worker: bigint }>(
        'SELECT token, stock, worker FROM write_log ORDER BY seq',
      )
      .all()
      .map((r) => ({ token: r.token, stock: Number(r.stock), worker: Number(r.worker) }));
  }

  /** Close the connection. Idempotent. */
  close(): void {
    if (this.#db.open) this.#db.close();
  }
}
