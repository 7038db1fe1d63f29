/**
 * `list` in PostgreSQL: a page is one statement (lease mode: list-sql.ts, locks first, then
 * semaphores; advisory mode: `advisoryList` of sql.ts, locks only), whose rows, one per holder, are gathered here into one entry per key. The cursor
 * is list-cursor.ts's: the part and the last key the walk read.
 */
import type { ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { InvalidArgumentError } from '../../errors.js';
import { formatListCursor, parseKeyListCursor } from '../list-cursor.js';
import type { PostgresConnectionSet } from './connection.js';
import type { ListRow } from './list-sql.js';

/** A part's page statements: from the prefix, or after the previous page's last key. */
interface PageStatements {
  readonly first: string;
  readonly next: string;
}

/** One page of held keys on one backend's connections (lease mode: locks, then semaphores). */
export function listPage(db: PostgresConnectionSet, request: ListRequest): Promise<ListPage> {
  return walkPage(db, request, db.sql.list.locks, db.sql.list.semaphores);
}

/** One page of held keys in advisory mode: the holders whose session holds the lock. */
export function listAdvisoryPage(
  db: PostgresConnectionSet,
  request: ListRequest,
): Promise<ListPage> {
  return walkPage(db, request, db.sql.advisoryList, undefined);
}

/**
 * One page of the walk: of the locks' part, or of the semaphores' part where the store has one
 * (a cursor of that part from elsewhere is refused where it has none).
 */
async function walkPage(
  db: PostgresConnectionSet,
  request: ListRequest,
  locks: PageStatements,
  semaphores: PageStatements | undefined,
): Promise<ListPage> {
  // The walk's last key need not start with the prefix (it walks past the prefix's keys), and
  // never lists a key that does not (`starts_with`): any valid key is a position.
  const { part, after } = parseKeyListCursor(request.cursor);
  const statements = part === 'l' ? locks : semaphores;
  if (statements === undefined) {
    throw new InvalidArgumentError('cursor', 'a cursor of this store', request.cursor);
  }
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
  const more = part === 'l' && semaphores !== undefined;
  return { entries, cursor: more ? formatListCursor({ part: 'p', after: null }) : null };
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
