/**
 * `locker.list()` and `locker.listPage()`: the held keys of a store under a prefix, read through
 * the backend's pages (`Backend.list`). `list()` is an async iterable over them: its options are
 * checked when it is called, before any engine call, and the pages are fetched one at a time as
 * the caller iterates, so a caller that stops early (`break`, `limit`, its `signal`) costs no
 * more pages than it read. `listPage()` reads one page, for callers that hand pages out.
 */
import { InvalidArgumentError } from '../errors.js';
import { checkOptionNames, isOptionsObject, validateKey } from '../options.js';
import type { Backend, ListedLock, ListPage } from './backend.js';

/** Options of `locker.list()`. */
export interface ListOptions {
  /** Only keys that start with this text (at most 1024 UTF-8 bytes). Default: every key. */
  readonly prefix?: string;
  /** Stop after this many entries (a positive integer). Default: no limit. */
  readonly limit?: number;
  /** Entries fetched per engine request, 1 to 1,000. Default 100. */
  readonly pageSize?: number;
  /** Aborting it ends the iteration with the signal's reason at the next entry or page. */
  readonly signal?: AbortSignal;
}

/** Largest `pageSize`: each page is one bounded request to the engine. */
export const MAX_LIST_PAGE_SIZE = 1_000;
const DEFAULT_PAGE_SIZE = 100;
const OPTION_NAMES = new Set(['prefix', 'limit', 'pageSize', 'signal']);

interface CheckedListOptions {
  readonly prefix: string;
  readonly limit: number;
  readonly pageSize: number;
  readonly signal: AbortSignal | undefined;
}

/**
 * Check `list()`'s options.
 * @throws InvalidArgumentError naming the first bad option.
 */
export function checkListOptions(options: unknown): CheckedListOptions {
  if (options === undefined) {
    return {
      prefix: '',
      limit: Number.POSITIVE_INFINITY,
      pageSize: DEFAULT_PAGE_SIZE,
      signal: undefined,
    };
  }
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an object of list options', options);
  }
  checkOptionNames(options, OPTION_NAMES);
  const { prefix, limit, pageSize, signal } = options as ListOptions;
  if (prefix !== undefined && prefix !== '') validateKey(prefix, 'prefix');
  if (limit !== undefined && !(Number.isSafeInteger(limit) && limit > 0)) {
    throw new InvalidArgumentError('limit', 'a positive integer', limit);
  }
  if (
    pageSize !== undefined &&
    !(Number.isSafeInteger(pageSize) && pageSize >= 1 && pageSize <= MAX_LIST_PAGE_SIZE)
  ) {
    throw new InvalidArgumentError(
      'pageSize',
      `an integer from 1 to ${MAX_LIST_PAGE_SIZE}`,
      pageSize,
    );
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', 'an AbortSignal', signal);
  }
  return {
    prefix: prefix ?? '',
    limit: limit ?? Number.POSITIVE_INFINITY,
    pageSize: pageSize ?? DEFAULT_PAGE_SIZE,
    signal,
  };
}

/** Options of `locker.listPage()`: `list()`'s, with the cursor of the page to read. */
export interface ListPageOptions {
  /** As `ListOptions.prefix`. */
  readonly prefix?: string;
  /** The `cursor` of the previous page; null or absent for the first page. */
  readonly cursor?: string | null;
  /** As `ListOptions.pageSize`. */
  readonly pageSize?: number;
  /** Checked before the engine is asked and once it answered: aborted, the page rejects with its reason. */
  readonly signal?: AbortSignal;
}

/** Longest cursor `listPage` takes, UTF-8 bytes (a key, a part, an engine's own cursor). */
export const MAX_LIST_CURSOR_BYTES = 8 * 1024;
const PAGE_OPTION_NAMES = new Set(['prefix', 'cursor', 'pageSize', 'signal']);

interface CheckedPageOptions {
  readonly prefix: string;
  readonly cursor: string | null;
  readonly pageSize: number;
  readonly signal: AbortSignal | undefined;
}

/**
 * Check `listPage()`'s options.
 * @throws InvalidArgumentError naming the first bad option.
 */
export function checkListPageOptions(options: unknown): CheckedPageOptions {
  if (options !== undefined && !isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an object of list options', options);
  }
  checkOptionNames(options ?? {}, PAGE_OPTION_NAMES);
  const { cursor, ...rest } = (options ?? {}) as ListPageOptions;
  if (
    cursor !== undefined &&
    cursor !== null &&
    (typeof cursor !== 'string' ||
      cursor.length === 0 ||
      Buffer.byteLength(cursor) > MAX_LIST_CURSOR_BYTES)
  ) {
    throw new InvalidArgumentError(
      'cursor',
      `the cursor of a previous page (1 to ${MAX_LIST_CURSOR_BYTES} bytes) or null`,
      cursor,
    );
  }
  const { prefix, pageSize, signal } = checkListOptions(rest);
  return { prefix, cursor: cursor ?? null, pageSize, signal };
}

/**
 * Read one page.
 * @throws as `listHeld`.
 */
export async function listOnePage(
  backend: () => Promise<Backend>,
  options: CheckedPageOptions,
): Promise<ListPage> {
  const { prefix, cursor, pageSize, signal } = options;
  signal?.throwIfAborted();
  const store = listingStore(await backend());
  const page = await store.list({ prefix, cursor, pageSize });
  signal?.throwIfAborted();
  return page;
}

/** The backend, if it lists. */
function listingStore(store: Backend): Backend & Required<Pick<Backend, 'list'>> {
  if (!store.capabilities.list || store.list === undefined) {
    throw new InvalidArgumentError(
      'store',
      'a store that can list its held locks (capabilities.list)',
      store.name,
    );
  }
  return store as Backend & Required<Pick<Backend, 'list'>>;
}

/**
 * Iterate the held keys page by page.
 * @param backend resolves to the store's backend (loaded on the first iteration).
 * @throws InvalidArgumentError (at the first iteration) when the store cannot list; what
 *   `Backend.list` throws; the signal's reason once it aborts.
 */
export async function* listHeld(
  backend: () => Promise<Backend>,
  options: CheckedListOptions,
): AsyncGenerator<ListedLock, void, undefined> {
  const { prefix, limit, pageSize, signal } = options;
  signal?.throwIfAborted();
  const store = listingStore(await backend());
  let cursor: string | null = null;
  let yielded = 0;
  do {
    signal?.throwIfAborted();
    const page = await store.list({
      prefix,
      cursor,
      pageSize: Math.min(pageSize, limit - yielded),
    });
    for (const entry of page.entries) {
      signal?.throwIfAborted();
      yield entry;
      yielded += 1;
      if (yielded >= limit) return;
    }
    cursor = page.cursor;
  } while (cursor !== null);
}
