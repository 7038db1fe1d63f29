/**
 * Store harnesses for the failure scenario tests of this folder: lockers on a real engine plus a
 * raw view of the engine that bypasses fencelock (a separate ioredis client, or a separate SQLite
 * connection on the same file), so tests can assert engine state and change it directly.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import pg from 'pg';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import { createSqliteBackend } from '../../../packages/fencelock/src/backends/sqlite/index.js';
import {
  createLocker,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { PG_URL, PGBOUNCER_URL, REDIS_PORT, REDIS_URL } from '../../helpers/engines.js';

/** A lease as the engine stores it. */
export interface RawLease {
  readonly owner: string;
  readonly token: bigint;
  /** Remaining engine TTL, ms (Redis PTTL; SQLite expires_at − now, may be <= 0 if expired). */
  readonly ttlMs: number;
}

export interface StoreHarness {
  readonly name: 'redis' | 'sqlite' | 'postgres' | 'postgres-pgbouncer';
  /**
   * `inspect().lastFencingToken` still names the last token once the key is free: true with a
   * per-key counter (Redis); false on PostgreSQL and SQLite, whose tokens come from one counter
   * shared by all keys and whose released rows are deleted (0n then).
   */
  readonly lastTokenOutlivesHolder: boolean;
  /** A new locker (its own engine connection); closed by `close()`. */
  locker(options?: LockerOptions): Locker;
  /** The lease record of `key` in the engine, or null when the engine has none. */
  rawLease(key: string): Promise<RawLease | null>;
  /**
   * The engine's fencing counter of `key` (PostgreSQL, SQLite: the token of its row, live or
   * expired), or null when there is none.
   */
  rawFence(key: string): Promise<bigint | null>;
  /** Delete the lease record of `key` directly in the engine. */
  deleteLease(key: string): Promise<void>;
  /** Close every locker and raw connection, and drop the keys/files this harness used. */
  close(): Promise<void>;
}

/** A key no other test (or engineer sharing the engine) uses. */
export function uniqueKey(tag: string): string {
  return `handed:${tag}:${randomUUID()}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Redis: lockers on `REDIS_URL`, raw view through a separate ioredis client. */
export function redisHarness(): StoreHarness & {
  readonly raw: Redis;
  keysOf(key: string): ReturnType<RedisBackend['keysOf']>;
} {
  const raw = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  // Only used for keysOf (same default prefix as the lockers); never runs a lock operation.
  const layout = createRedisBackend({ client: raw });
  const lockers: Locker[] = [];
  const used = new Set<string>();
  const keysOf = (key: string) => {
    used.add(key);
    return layout.keysOf(key);
  };
  return {
    name: 'redis',
    lastTokenOutlivesHolder: true,
    raw,
    keysOf,
    locker(options) {
      const locker = createLocker(REDIS_URL, options);
      lockers.push(locker);
      return locker;
    },
    async rawLease(key) {
      const { lock } = keysOf(key);
      const [value, pttl] = await Promise.all([raw.get(lock), raw.pttl(lock)]);
      if (value === null) return null;
      const sep = value.indexOf(':');
      return { owner: value.slice(0, sep), token: BigInt(value.slice(sep + 1)), ttlMs: pttl };
    },
    async rawFence(key) {
      const value = await raw.get(keysOf(key).fence);
      return value === null ? null : BigInt(value);
    },
    async deleteLease(key) {
      await raw.del(keysOf(key).lock);
    },
    async close() {
      await Promise.allSettled(lockers.map((l) => l.close()));
      const keys = [...used].flatMap((k) => {
        const { lock, fence } = layout.keysOf(k);
        return [lock, fence];
      });
      if (keys.length > 0) await raw.del(...keys);
      await raw.quit();
    },
  };
}

/** SQLite: lockers on a fresh temporary file, raw view through a separate connection. */
export function sqliteHarness(): StoreHarness & { readonly db: Database.Database } {
  const dir = mkdtempSync(join(tmpdir(), 'fencelock-handed-'));
  const path = join(dir, 'locks.db');
  const lockers: Locker[] = [];
  // Let the backend create its schema, so the raw connection can read the tables at once.
  void createSqliteBackend({ path }).close();
  const db = new Database(path);
  db.defaultSafeIntegers(true);
  db.pragma('busy_timeout = 5000');
  const rawDb = () => db;
  return {
    name: 'sqlite',
    lastTokenOutlivesHolder: false,
    db,
    locker(options) {
      const locker = createLocker(`sqlite:${path}`, options);
      lockers.push(locker);
      return locker;
    },
    async rawLease(key) {
      const row = rawDb()
        .prepare<[string], { owner: string; token: bigint; remaining: bigint }>(
          `SELECT owner, token, expires_at - CAST(unixepoch('subsec') * 1000 AS INTEGER) AS remaining
           FROM fencelock_leases WHERE key = ?`,
        )
        .get(key);
      return row ? { owner: row.owner, token: row.token, ttlMs: Number(row.remaining) } : null;
    },
    async rawFence(key) {
      // Tokens come from one counter for the whole file: the key's own is its row's token.
      const row = rawDb()
        .prepare<[string], { token: bigint }>('SELECT token FROM fencelock_leases WHERE key = ?')
        .get(key);
      return row ? row.token : null;
    },
    async deleteLease(key) {
      rawDb().prepare('DELETE FROM fencelock_leases WHERE key = ?').run(key);
    },
    async close() {
      await Promise.allSettled(lockers.map((l) => l.close()));
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * PostgreSQL (lease mode): lockers on `PG_URL` in a schema of their own, dropped by `close()`;
 * raw view through a separate pool. The "fencing counter" is the token of the key's row (live
 * or expired), null when there is none: tokens come from one sequence shared by all keys. With
 * `viaPgBouncer`, the lockers reach the server through PgBouncer in transaction mode
 * (`pooler=transaction`, LISTEN on `listenUrl`, the server itself).
 */
export function postgresHarness(viaPgBouncer = false): StoreHarness & {
  readonly raw: pg.Pool;
  readonly schema: string;
} {
  const schema = `fencelock_handed_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  const raw = new pg.Pool({ connectionString: PG_URL, max: 2 });
  const lockers: Locker[] = [];
  const table = `"${schema}".fencelock_leases`;
  return {
    name: viaPgBouncer ? 'postgres-pgbouncer' : 'postgres',
    lastTokenOutlivesHolder: false,
    raw,
    schema,
    locker(options) {
      const locker = createLocker(
        viaPgBouncer
          ? `${PGBOUNCER_URL}?pooler=transaction&listenUrl=${encodeURIComponent(PG_URL)}&schema=${schema}`
          : `${PG_URL}?schema=${schema}`,
        options,
      );
      lockers.push(locker);
      return locker;
    },
    async rawLease(key) {
      const { rows } = await raw
        .query<{ owner: string; token: string; remaining: string }>(
          `SELECT owner, token::text AS token,
                  ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000)::text AS remaining
           FROM ${table} WHERE key = $1`,
          [key],
        )
        .catch(missingTable);
      const row = rows[0];
      return row
        ? { owner: row.owner, token: BigInt(row.token), ttlMs: Number(row.remaining) }
        : null;
    },
    async rawFence(key) {
      const { rows } = await raw
        .query<{ token: string }>(`SELECT token::text AS token FROM ${table} WHERE key = $1`, [key])
        .catch(missingTable);
      return rows[0] ? BigInt(rows[0].token) : null;
    },
    async deleteLease(key) {
      await raw.query(`DELETE FROM ${table} WHERE key = $1`, [key]);
    },
    async close() {
      await Promise.allSettled(lockers.map((l) => l.close()));
      await raw.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await raw.end();
    },
  };
}

/** A query on a table the backend has not created yet (no lock operation ran) finds no row. */
function missingTable(error: unknown): { rows: never[] } {
  if ((error as { code?: string }).code === '42P01') return { rows: [] };
  throw error;
}

/** The "all backends" set, for `describe.each`. */
export const ALL_STORES = [
  { name: 'redis', make: redisHarness },
  { name: 'sqlite', make: sqliteHarness },
  { name: 'postgres', make: () => postgresHarness() },
  { name: 'postgres-pgbouncer', make: () => postgresHarness(true) },
] as const satisfies readonly { name: string; make: () => StoreHarness }[];

/** One command the Redis server executed, as MONITOR reports it. */
export interface MonitoredCommand {
  /** Server time of execution, ms since the epoch. */
  readonly serverMs: number;
  /** Command name and arguments, e.g. `['evalsha', sha, '1', lockKey, owner, token, ttl]`. */
  readonly args: readonly string[];
}

/**
 * Watch the shared Redis with MONITOR on a plain socket (ioredis's monitor mode can throw
 * "Command queue state error" when replies race its mode switch on a busy server), keeping only
 * the commands whose line contains `needle`. Resolves once MONITOR is active.
 */
export async function monitorRedis(
  needle: string,
): Promise<{ readonly commands: MonitoredCommand[]; close(): void }> {
  const commands: MonitoredCommand[] = [];
  const socket = connect(REDIS_PORT, '127.0.0.1');
  socket.setEncoding('utf8');
  let buffer = '';
  let active = false;
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('data', (chunk: string) => {
      buffer += chunk;
      let end = buffer.indexOf('\r\n');
      while (end >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        end = buffer.indexOf('\r\n');
        if (!active) {
          if (line !== '+OK') reject(new Error(`MONITOR answered ${line}`));
          active = true;
          resolve();
        } else if (line.includes(needle)) {
          commands.push(parseMonitorLine(line));
        }
      }
    });
    socket.write('MONITOR\r\n');
  });
  socket.on('error', () => undefined);
  return { commands, close: () => socket.destroy() };
}

/** `+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "abc" "1"` → time and arguments. */
function parseMonitorLine(line: string): MonitoredCommand {
  const serverMs = Number(line.slice(1, line.indexOf(' '))) * 1000;
  const rest = line.slice(line.indexOf('] ') + 2);
  const args = [...rest.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((m) => m[1]!);
  return { serverMs, args };
}
