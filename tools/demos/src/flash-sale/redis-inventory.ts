/**
 * The flash-sale's stock on the lock store's Redis, written through `RedisFence`: the fence's
 * register `<prefix>:fenced:stock` holds the stock (as its value) and the newest accepted fencing
 * token; the write log is the list `<prefix>:log`.
 *
 * The log entry is pushed right after the guard accepted the write, as a second command. While
 * leases do not overlap (the lock's job) that is the commit order. When a holder lost its lease
 * mid-purchase and its write still got in before the new holder's, the two entries may swap, and
 * the report's token check flags the overlap.
 */

import { StaleTokenError } from 'fencelock';
import { RedisFence } from 'fencelock/fencing/redis';
import { Redis } from 'ioredis';
import type { Inventory, InventoryLocation, LoggedWrite, StockReading } from './stock.js';

type RedisLocation = Extract<InventoryLocation, { kind: 'redis' }>;

/** Name of the guarded resource. */
const RESOURCE = 'stock';

/** A connection to the stock on Redis. */
export class RedisInventory implements Inventory {
  readonly kind = 'redis';
  readonly #client: Redis;
  readonly #fence: RedisFence;
  readonly #fenceKey: string;
  readonly #logKey: string;

  private constructor(location: RedisLocation) {
    this.#client = new Redis(location.url, { maxRetriesPerRequest: 3, connectTimeout: 5000 });
    // Commands report their own failures; without a listener ioredis would log each reconnect.
    this.#client.on('error', () => undefined);
    this.#fence = new RedisFence(this.#client, `${location.prefix}:fenced`);
    this.#fenceKey = `${location.prefix}:fenced:${RESOURCE}`;
    this.#logKey = `${location.prefix}:log`;
  }

  /** Seed `stock` units (written through the guard with token 0) and an empty log. */
  static async create(location: RedisLocation, stock: number): Promise<RedisInventory> {
    const inventory = new RedisInventory(location);
    try {
      await inventory.drop();
      await inventory.#fence.write(RESOURCE, 0n, String(stock));
    } catch (error) {
      await inventory.close();
      throw error;
    }
    return inventory;
  }

  static async open(location: RedisLocation): Promise<RedisInventory> {
    return new RedisInventory(location);
  }

  async read(): Promise<StockReading> {
    const record = await this.#fence.read(RESOURCE);
    if (record === null) throw new Error('inventory is not initialised');
    return { stock: Number(record.value), fenceToken: record.token };
  }

  async writeFenced(stock: number, token: bigint, worker: number): Promise<boolean> {
    try {
      await this.#fence.write(RESOURCE, token, String(stock));
    } catch (error) {
      if (error instanceof StaleTokenError) return false;
      throw error;
    }
    await this.#client.rpush(this.#logKey, JSON.stringify({ token: String(token), stock, worker }));
    return true;
  }

  async writeUnfenced(stock: number, worker: number): Promise<void> {
    // Straight into the register's hash, past the guard.
    const results = await this.#client
      .multi()
      .hset(this.#fenceKey, 'value', String(stock))
      .rpush(this.#logKey, JSON.stringify({ token: null, stock, worker }))
      .exec();
    for (const [error] of results ?? []) if (error) throw error;
  }

  async writeLog(): Promise<LoggedWrite[]> {
    const entries = await this.#client.lrange(this.#logKey, 0, -1);
    return entries.map((entry) => {
      const e = JSON.parse(entry) as { token: string | null; stock: number; worker: number };
      return { token: e.token === null ? null : BigInt(e.token), stock: e.stock, worker: e.worker };
    });
  }

  async close(): Promise<void> {
    if (this.#client.status === 'end') return;
    await this.#client.quit().catch(() => this.#client.disconnect());
  }

  async drop(): Promise<void> {
    await this.#client.del(this.#fenceKey, this.#logKey);
  }
}
