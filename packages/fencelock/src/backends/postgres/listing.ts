/**
 * `list` in the PostgreSQL lease mode: a page is one statement of list-sql.ts (locks first, then
 * semaphores), whose rows, one per holder, are gathered here into one entry per key. The cursor
 * is list-cursor.ts's: the part and the last key the walk read.
 */
import type { ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { formatListCursor, parseKeyListCursor } from '../list-cursor.js';
import type { PostgresConnectionSet } from './connection.js';
import type { ListRow } from './list-sql.js';

/** One page of held keys on one backend's connections. */
export async function listPage(db: PostgresConnectionSet, request: ListRequest): Promise<ListPage> {
  // The walk's last key need not start with the prefix (it walks past the prefix's keys), and
  // never lists a key that does not (`starts_with`): any valid key is a position.
  const { part, after } = parseKeyListCursor(request.cursor);
  const statements = part === 'l' ? db.sql.list.locks : db.sql.list.semaphores;
  const { rows } = await db.run('list', () =>
    db.query<ListRow>(after === null ? statements.first : statements.next, [
      after ?? request.prefix,
      request.pageSize,
      request.prefix,
    ]),
  );
  const walked = Number(rows[0]?.walked ?? 0);
  const lastKey = rows[0]?.last_key ?? null;
  const entries = entriesOf(rows);
  // A full walk may have more behind it; a short one ends its part.
  if (walked === request.pageSize && lastKey !== null) {
    return { entries, cursor: formatListCursor({ part, after: lastKey }) };
  }
  return { entries, cursor: part === 'l' ? formatListCursor({ part: 'p', after: null }) : null };
}

/** One entry per key, from rows ordered by key then token (rows without a holder left out). */
function entriesOf(rows: readonly ListRow[]): ListedLock[] {
  const entries: ListedLock[] = [];
  let current: { entry: ListedLock; holders: ListedLock['holders'][number][] } | undefined;
  for (const row of rows) {
    if (row.key === null || row.owner === null || row.token === null || row.mode === null) continue;
    const holder = {
      owner: row.owner,
      fencingToken: BigInt(row.token),
      ttlMs: Number(row.remaining_ms),
    };
    if (current?.entry.key === row.key) {
      current.holders.push(holder);
      continue;
    }
    const holders = [holder];
    const entry: ListedLock = {
      key: row.key,
      mode: row.mode,
      ...(row.permits === null ? {} : { permits: row.permits }),
      holders,
      waiters: row.waiters ?? 0,
    };
    entries.push(entry);
    current = { entry, holders };
  }
  return entries;
}
