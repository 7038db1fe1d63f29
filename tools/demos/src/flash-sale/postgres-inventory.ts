/**
 * The flash-sale's stock in the lock store's PostgreSQL database, in a schema of the run's own:
 * table `inventory` (one row) and `write_log`, plus `PgFence`'s fence table. A fenced write is a
 * `PgFence.transaction` that updates the stock and appends the log entry, so both commit only
 * while the buyer's fencing token is the newest the resource has seen; the fence row stays locked
 * until the commit, so the log's order is the commit order.
 */

import { StaleTokenError } from 'fencelock';
import { PgFence } from 'fencelock/fencing/postgres';
import pg from 'pg';
import type { Inventory, InventoryLocation, LoggedWrite, StockReading } from './stock.js';

type PostgresLocation = Extract<InventoryLocation, { kind: 'postgres' }>;

/** Name of the guarded resource. */
const RESOURCE = 'stock';

/** A connection to the stock in PostgreSQL (one client; the worker buys one purchase at a time). */
export class PostgresInventory implements Inventory {
  readonly kind = 'postgres';
  readonly #client: pg.Client;
  readonly #fence: PgFence;
  /** Quoted schema name. */
  readonly #schema: string;
  #closed = false;

  private constructor(client: pg.Client, location: PostgresLocation) {
    this.#client = client;
    this.#fence = new PgFence(client, { schema: location.schema });
    this.#schema = `"${location.schema}"`;
  }

  static async #connect(location: PostgresLocation): Promise<PostgresInventory> {
    const client = new pg.Client({ connectionString: location.connectionString });
    // Queries report their own failures; an idle connection's error must not crash the process.
    client.on('error', () => undefined);
    await client.connect();
    return new PostgresInventory(client, location);
  }

  /** Create the run's schema with `stock` units and an empty log (replacing an earlier one). */
  static async create(location: PostgresLocation, stock: number): Promise<PostgresInventory> {
    const inventory = await PostgresInventory.#connect(location);
    const s = inventory.#schema;
    try {
      await inventory.drop();
      await inventory.#client.query(`CREATE SCHEMA ${s}`);
      await inventory.#client.query(`CREATE TABLE ${s}.inventory (
  id    integer PRIMARY KEY CHECK (id = 1),
  stock bigint  NOT NULL
)`);
      await inventory.#client.query(`CREATE TABLE ${s}.write_log (
  seq    bigserial PRIMARY KEY,  -- commit order (taken under the fence row's lock)
  token  bigint,                 -- NULL for an unfenced (--no-lock) write
  stock  bigint  NOT NULL,
  worker integer NOT NULL
)`);
      await inventory.#client.query(`INSERT INTO ${s}.inventory (id, stock) VALUES (1, $1)`, [
        stock,
      ]);
      // Creates the fence table now rather than in the first buyer's purchase.
      await inventory.#fence.read(RESOURCE);
    } catch (error) {
      await inventory.close();
      throw error;
    }
    return inventory;
  }

  static open(location: PostgresLocation): Promise<PostgresInventory> {
    return PostgresInventory.#connect(location);
  }

  async read(): Promise<StockReading> {
    const result = await this.#client.query<{ stock: string }>(
      `SELECT stock::text AS stock FROM ${this.#schema}.inventory WHERE id = 1`,
    );
    const row = result.rows[0];
    if (row === undefined) throw new Error('inventory is not initialised');
    const fence = await this.#fence.read(RESOURCE);
    return { stock: Number(row.stock), fenceToken: fence?.token ?? 0n };
  }

  async writeFenced(stock: number, token: bigint, worker: number): Promise<boolean> {
    try {
      await this.#fence.transaction(RESOURCE, token, async (tx) => {
        await tx.query(`UPDATE ${this.#schema}.inventory SET stock = $1 WHERE id = 1`, [stock]);
        await tx.query(
          `INSERT INTO ${this.#schema}.write_log (token, stock, worker) VALUES ($1, $2, $3)`,
          [token.toString(), stock, worker],
        );
      });
      return true;
    } catch (error) {
      if (error instanceof StaleTokenError) return false;
      throw error;
    }
  }

  async writeUnfenced(stock: number, worker: number): Promise<void> {
    // One statement, so write and log entry still commit together.
    await this.#client.query(
      `WITH written AS (UPDATE ${this.#schema}.inventory SET stock = $1 WHERE id = 1)
       INSERT INTO ${this.#schema}.write_log (token, stock, worker) VALUES (NULL, $1, $2)`,
      [stock, worker],
    );
  }

  async writeLog(): Promise<LoggedWrite[]> {
    const result = await this.#client.query<{
      token: string | null;
      stock: string;
      worker: number;
    }>(
      `SELECT token::text AS token, stock::text AS stock, worker
         FROM ${this.#schema}.write_log ORDER BY seq`,
    );
    return result.rows.map((r) => ({
      token: r.token === null ? null : BigInt(r.token),
      stock: Number(r.stock),
      worker: r.worker,
    }));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#client.end();
  }

  async drop(): Promise<void> {
    await this.#client.query(`DROP SCHEMA IF EXISTS ${this.#schema} CASCADE`);
  }
}
