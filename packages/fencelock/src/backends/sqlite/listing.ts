/**
 * `list` on the SQLite store: the held keys under a prefix, a page per read transaction (one
 * snapshot of the file, so each key's holders and line agree). Locks come first (the rows of
 * `fencelock_leases`, a read-held key's readers from `fencelock_readers`), then semaphores
 * (`fencelock_permits`), each in key order by its primary key's index, between the prefix and
 * the first text above every key that starts with it, so a page reads at most `pageSize` live
 * keys' rows (and the expired rows not yet swept among them). The cursor names the part and the
 * last key listed (list-cursor.ts).
 */
import type Database from 'better-sqlite3';
import type { ListedHolder, ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { formatListCursor, type ListCursor } from '../list-cursor.js';
import { NOW, READERS_OWNER } from './schema.js';

interface HolderRow {
  readonly key: string;
  readonly owner: string;
  readonly token: bigint;
  readonly remaining: bigint;
}

interface PermitRow extends HolderRow {
  readonly permits: bigint;
}

/** One part's share of a page: its entries, whether it filled its share, its last key. */
interface PartPage {
  readonly entries: ListedLock[];
  readonly full: boolean;
  readonly lastKey: string;
}

/** Where a page starts: after `after` (exclusive) or at `from` (inclusive), below `to`. */
interface Range {
  readonly after: string | null;
  readonly from: string;
  readonly to: Buffer | null;
}

/**
 * The first byte string above every UTF-8 text that starts with `prefix` ('' → null: no bound).
 * UTF-8 never uses the byte 0xFF, so raising the last byte by one is enough.
 */
function upperBound(prefix: string): Buffer | null {
  if (prefix === '') return null;
  const bytes = Buffer.from(prefix, 'utf8');
  bytes[bytes.length - 1] = bytes[bytes.length - 1]! + 1;
  return bytes;
}

/** `SELECT … WHERE <range> …` text for a table's key column (`to` compared as bytes). */
function rangeSql(range: Range): string {
  const lower = range.after === null ? 'key >= $from' : 'key > $after';
  return range.to === null ? lower : `${lower} AND key < CAST($to AS TEXT)`;
}

export class HeldKeys {
  readonly #db: Database.Database;
  readonly #statements = new Map<string, Database.Statement>();
  readonly #readers: Database.Statement<[string], HolderRow>;
  readonly #lockWaiters: Database.Statement<[string], bigint>;
  readonly #permitHolders: Database.Statement<[string], PermitRow>;
  readonly #permitWaiters: Database.Statement<[string], bigint>;
  /** One page in one read transaction, from where `parseListCursor` said it starts. */
  readonly page: (request: ListRequest, start: ListCursor) => ListPage;

  constructor(db: Database.Database) {
    this.#db = db;
    this.#readers = db
      .prepare<[string], HolderRow>(
        `SELECT key, owner, token, expires_at - ${NOW} AS remaining FROM fencelock_readers
         WHERE key = ? AND expires_at > ${NOW} ORDER BY token`,
      )
      .safeIntegers();
    this.#lockWaiters = db
      .prepare<[string], bigint>(
        `SELECT count(*) FROM fencelock_waiters WHERE key = ? AND expires_at > ${NOW}`,
      )
      .pluck()
      .safeIntegers();
    this.#permitHolders = db
      .prepare<[string], PermitRow>(
        `SELECT key, owner, token, expires_at - ${NOW} AS remaining, permits FROM fencelock_permits
         WHERE key = ? AND expires_at > ${NOW} ORDER BY token`,
      )
      .safeIntegers();
    this.#permitWaiters = db
      .prepare<[string], bigint>(
        `SELECT count(*) FROM fencelock_permit_waiters WHERE key = ? AND expires_at > ${NOW}`,
      )
      .pluck()
      .safeIntegers();
    this.page = db.transaction((request: ListRequest, start: ListCursor) =>
      this.#page(request, start),
    ).deferred;
  }

  #page(request: ListRequest, { part, after }: ListCursor): ListPage {
    const to = upperBound(request.prefix);
    const entries: ListedLock[] = [];
    if (part === 'l') {
      const locks = this.#locks({ after, from: request.prefix, to }, request.pageSize);
      entries.push(...locks.entries);
      if (locks.full) {
        return { entries, cursor: formatListCursor({ part: 'l', after: locks.lastKey }) };
      }
    }
    const semaphores = this.#semaphores(
      { after: part === 'p' ? after : null, from: request.prefix, to },
      request.pageSize - entries.length,
    );
    entries.push(...semaphores.entries);
    const cursor = semaphores.full
      ? formatListCursor({ part: 'p', after: semaphores.lastKey })
      : null;
    return { entries, cursor };
  }

  /** Up to `limit` held locks of the range; `full` when the range may hold more. */
  #locks(range: Range, limit: number): PartPage {
    const rows = this.#select<HolderRow>(
      `SELECT key, owner, token, expires_at - ${NOW} AS remaining FROM fencelock_leases
       WHERE ${rangeSql(range)} AND expires_at > ${NOW} ORDER BY key LIMIT $limit`,
      range,
      limit,
    );
    const entries = rows.flatMap((row): ListedLock[] => {
      const read = row.owner === READERS_OWNER;
      const holders = read ? this.#readers.all(row.key).map(holderOf) : [holderOf(row)];
      if (holders.length === 0) return [];
      const waiters = Number(this.#lockWaiters.get(row.key) ?? 0n);
      return [{ key: row.key, mode: read ? 'read' : 'write', holders, waiters }];
    });
    return { entries, full: rows.length === limit, lastKey: rows.at(-1)?.key ?? '' };
  }

  /** Up to `limit` semaphores of the range with a live permit; `full` as for `#locks`. */
  #semaphores(range: Range, limit: number): PartPage {
    const keys = this.#select<{ key: string }>(
      `SELECT DISTINCT key FROM fencelock_permits
       WHERE ${rangeSql(range)} AND expires_at > ${NOW} ORDER BY key LIMIT $limit`,
      range,
      limit,
    );
    const entries = keys.flatMap(({ key }): ListedLock[] => {
      const rows = this.#permitHolders.all(key);
      if (rows.length === 0) return [];
      return [
        {
          key,
          mode: 'permits',
          permits: Number(rows[0]!.permits),
          holders: rows.map(holderOf),
          waiters: Number(this.#permitWaiters.get(key) ?? 0n),
        },
      ];
    });
    return { entries, full: keys.length === limit, lastKey: keys.at(-1)?.key ?? '' };
  }

  /** Run a range query (prepared once per shape of range). */
  #select<Row>(sql: string, range: Range, limit: number): Row[] {
    let statement = this.#statements.get(sql);
    if (statement === undefined) {
      statement = this.#db.prepare(sql).safeIntegers();
      this.#statements.set(sql, statement);
    }
    const params: Record<string, unknown> = { limit };
    if (range.after === null) params.from = range.from;
    else params.after = range.after;
    if (range.to !== null) params.to = range.to;
    return statement.all(params) as Row[];
  }
}

function holderOf(row: HolderRow): ListedHolder {
  return { owner: row.owner, fencingToken: BigInt(row.token), ttlMs: Number(row.remaining) };
}
