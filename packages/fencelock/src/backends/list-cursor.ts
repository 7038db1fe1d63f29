/**
 * The cursor of a store's `list` pages, for the stores that list their locks, then their
 * semaphores (SQLite, PostgreSQL): the part the next page reads (`l` locks, `p` semaphores) and
 * the last key read before it, `l:<key>` or `p:<key>`, or the part alone to start it from the
 * prefix.
 */
import { InvalidArgumentError } from '../errors.js';
import { validateKey } from '../options.js';

/** Where a page starts: its part, after which key (null: from the prefix on). */
export interface ListCursor {
  readonly part: 'l' | 'p';
  readonly after: string | null;
}

/** The first page's start: locks, from the prefix on. */
const FIRST: ListCursor = { part: 'l', after: null };

/**
 * Read a cursor (null: the first page).
 * @throws InvalidArgumentError for text that no page of these stores made.
 */
export function parseListCursor(cursor: string | null): ListCursor {
  if (cursor === null) return FIRST;
  const part = cursor[0];
  if ((part === 'l' || part === 'p') && cursor.length === 1) return { part, after: null };
  if ((part === 'l' || part === 'p') && cursor[1] === ':' && cursor.length > 2) {
    return { part, after: cursor.slice(2) };
  }
  throw refused(cursor);
}

/**
 * Read a cursor whose last key is a store key (SQLite, PostgreSQL): it must be a valid key, or
 * the engine would be sent text it cannot hold (NUL), and with `prefix`, one that starts with it
 * (SQLite's pages stop at the prefix's last key, so its cursors always do; one of another prefix
 * would list keys outside this one).
 * @throws InvalidArgumentError (argument `cursor`) otherwise, before any engine call.
 */
export function parseKeyListCursor(cursor: string | null, prefix?: string): ListCursor {
  const start = parseListCursor(cursor);
  if (start.after === null) return start;
  try {
    validateKey(start.after);
  } catch {
    throw refused(cursor);
  }
  if (prefix !== undefined && !start.after.startsWith(prefix)) throw refused(cursor);
  return start;
}

function refused(cursor: string | null): InvalidArgumentError {
  return new InvalidArgumentError(
    'cursor',
    'a cursor from this store’s previous page of the same prefix',
    cursor,
  );
}

/** The text of a cursor. */
export function formatListCursor({ part, after }: ListCursor): string {
  return after === null ? part : `${part}:${after}`;
}
