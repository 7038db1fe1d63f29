/**
 * `list` on etcd: the held keys under a prefix, a page at a time, from the backend's key layout.
 * A lock's contenders are the keys of its folder `<namespace>/locks/<key, percent-encoded>/`
 * (`w-…`/`r-…`, contender-key.ts) and a semaphore's those of
 * `<namespace>/semaphores/<key, percent-encoded>/` (`p-…`, permit-key.ts), each bound to its
 * session's lease, its create revision its fencing token. Who holds is the backend's line rule:
 * the oldest contender when it is a writer; else every reader older than the oldest writer
 * (`queueVerdict`); a semaphore's `permits` oldest contenders (`permitVerdict`). The others are
 * the entry's waiters.
 *
 * A page reads one part (locks, then semaphores, as list-cursor.ts) with one Range over the
 * part's folders from the cursor to the end of the prefix's byte range (etcd orders keys by
 * bytes and percent-encoding keeps prefixes, so the keys of the user keys that start with the
 * prefix are the etcd keys from `<part>/<encoded prefix>` to its `prefixEnd`, as etcdctl's
 * `--prefix`; and a folder's keys are contiguous, since an encoded key has no `/`), with a
 * `limit` of `pageSize × CONTENDERS_PER_KEY` keys. One Range is one revision, so every entry of
 * the page is a snapshot of its key (the whole page is one). The last folder of a Range that
 * has `more` may be cut: it is left for the next page, unless it is the page's only folder; that
 * folder (more contenders than the limit) is read alone, oldest first with the same limit and
 * etcd's `count` of the folder, and whole (one more Range) only when its holders may reach
 * past the limit (a read-held lock or a semaphore with that many holders). Then the remaining
 * TTL of each distinct lease of the page's holders (`LeaseTimeToLive`, at most
 * `TTL_REQUESTS_AT_ONCE` at a time): etcd reports whole seconds, rounded down.
 *
 * The cursor (list-cursor.ts's `l:`/`p:` form) names the part and the position after which the
 * next page starts, as the text (latin1, so any bytes round-trip) of the key past the part's
 * folder: `<encoded key>/` for a folder (the next page starts after every key of it), or a key
 * with no folder (not this backend's) after which it starts.
 */
import type { Etcd3, IKeyValue, IRangeRequest, IRangeResponse } from 'etcd3';
import type { ListedHolder, ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { InvalidArgumentError } from '../../errors.js';
import { formatListCursor, type ListCursor, parseListCursor } from '../list-cursor.js';
import { type ContenderEntry, contendersOf } from './contender-key.js';
import { prefixEnd } from './key-range.js';
import { delayInForce, markerKeyOf } from './lock-delay.js';
import { type PermitContender, permitContendersOf } from './permit-key.js';

/**
 * Keys read per listed key: a page's Range reads at most `pageSize × CONTENDERS_PER_KEY` keys,
 * room for a holder and a few readers, permits or waiters per key.
 */
export const CONTENDERS_PER_KEY = 4;

/**
 * Most lock-delay markers read in one transaction: etcd's default `--max-txn-ops`, so a page costs
 * at most `ceil(pageSize / 128)` such reads.
 */
export const MARKER_READS_PER_TXN = 128;

/** Most `LeaseTimeToLive` requests of one page in flight at once. */
export const TTL_REQUESTS_AT_ONCE = 16;

/** What a page needs from the backend: its client, namespace, and error wrapping. */
export interface ListContext {
  readonly client: Etcd3;
  readonly namespace: string;
  /** Run one engine request as the operation `list` (errors become `BackendError`). */
  call<T>(run: () => Promise<T>): Promise<T>;
}

/** A folder of a part: its encoded key (the folder's name) and its keys as read. */
interface Folder {
  readonly name: string;
  readonly kvs: IKeyValue[];
}

/** One entry before the TTLs are known: holders as contender keys with their leases. */
interface Draft {
  readonly key: string;
  readonly mode: ListedLock['mode'];
  readonly permits?: number;
  readonly holders: readonly { owner: string; order: bigint; lease: string }[];
  readonly waiters: number;
  /**
   * A lock whose folder may hold a lock-delay marker (lock-delay.ts): its name was read, or the
   * folder was read only in part.
   */
  readonly marked?: boolean;
}

/**
 * The start of the page `request.cursor` names (null: the first page), checked before any
 * engine call.
 * @throws InvalidArgumentError (`cursor`) for text no page of this backend made for this prefix.
 */
export function listStart(request: ListRequest): ListCursor {
  const start = parseListCursor(request.cursor);
  const { after } = start;
  if (after === null) return start;
  // A position past a folder (`<encoded key>/`) or after a key with no folder, within the prefix.
  const slash = after.indexOf('/');
  if (
    !after.startsWith(encodeURIComponent(request.prefix)) ||
    (slash !== -1 && slash !== after.length - 1) ||
    [...after].some((c) => c.charCodeAt(0) > 0xff)
  ) {
    throw new InvalidArgumentError(
      'cursor',
      'a cursor from this store’s previous page',
      request.cursor,
    );
  }
  return start;
}

/**
 * One page from `start` (`listStart`'s): the held keys of one part, at most `pageSize`, and the
 * cursor of the next page.
 * @throws BackendError (through `context.call`) when the cluster does not answer.
 */
export async function listPage(
  context: ListContext,
  request: ListRequest,
  { part, after }: ListCursor,
): Promise<ListPage> {
  const permits = part === 'p';
  const base = `${context.namespace}/${permits ? 'semaphores' : 'locks'}/`;
  const prefix = Buffer.from(base + encodeURIComponent(request.prefix));
  const from =
    after === null ? prefix : positionAfter(Buffer.concat([Buffer.from(base), latin1(after)]));
  const limit = request.pageSize * CONTENDERS_PER_KEY;
  const response = await context.call(() =>
    context.client.kv.range({
      key: from,
      range_end: prefixEnd(prefix),
      limit,
      keys_only: !permits,
    }),
  );
  const { folders, loose } = foldersOf(response.kvs, base.length);
  // A cut Range may have cut its last folder: leave it for the next page, unless it is alone.
  let taken = response.more && folders.length > 1 ? folders.slice(0, -1) : folders;
  taken = taken.slice(0, request.pageSize);
  const ends = response.more || taken.length < folders.length;
  const drafts: Draft[] = [];
  for (const [i, folder] of taken.entries()) {
    // A folder no user key has (not written by this backend) is passed over unread.
    if (userKeyOf(folder.name) === undefined) continue;
    const dir = `${base}${folder.name}/`;
    const whole = !response.more || i < folders.length - 1;
    const draft = whole
      ? draftOf(folder.name, dir, folder.kvs, permits, undefined)
      : await readLargeFolder(context, folder.name, dir, permits, limit);
    if (draft !== undefined) drafts.push(draft);
  }
  const held = permits
    ? drafts
    : await outsideDelays(context, drafts, BigInt(response.header.revision));
  const entries = await withTtls(context, held);
  // Past the last folder taken, or past the last key when only keys outside folders were read.
  let position: string | null = null;
  const last = taken.at(-1);
  if (last !== undefined) position = `${last.name}/`;
  else if (loose !== undefined && folders.length === 0) position = loose;
  if (ends && position !== null) {
    return { entries, cursor: formatListCursor({ part, after: position }) };
  }
  return { entries, cursor: permits ? null : formatListCursor({ part: 'p', after: null }) };
}

/**
 * Where a page after `position` starts: past every key of the folder when `position` ends one
 * (`…/`), else just past the key `position` itself.
 */
function positionAfter(position: Buffer): Buffer {
  return position.at(-1) === 0x2f
    ? prefixEnd(position)
    : Buffer.concat([position, Buffer.from([0])]);
}

/** The bytes of a position's text (latin1: one byte per character, as `foldersOf` read them). */
function latin1(text: string): Buffer {
  return Buffer.from(text, 'latin1');
}

/**
 * The folders of `kvs` (keys of one part, in key order, `baseLength` bytes of part name before
 * each folder's name), in that order, and the last key read outside any folder (as text of its
 * part-relative bytes).
 */
function foldersOf(
  kvs: readonly IKeyValue[],
  baseLength: number,
): { folders: Folder[]; loose: string | undefined } {
  const folders: Folder[] = [];
  let loose: string | undefined;
  for (const kv of kvs) {
    const rest = kv.key.subarray(baseLength);
    const slash = rest.indexOf(0x2f);
    if (slash === -1) {
      loose = rest.toString('latin1');
      continue;
    }
    const name = rest.subarray(0, slash).toString('latin1');
    const current = folders.at(-1);
    if (current?.name === name) current.kvs.push(kv);
    else folders.push({ name, kvs: [kv] });
  }
  return { folders, loose };
}

/**
 * A folder with more keys than a page's Range reads: its oldest `limit` keys and etcd's count of
 * the folder, in one Range; the whole folder in one more Range only when its holders may reach
 * past those keys.
 */
async function readLargeFolder(
  context: ListContext,
  name: string,
  dir: string,
  permits: boolean,
  limit: number,
): Promise<Draft | undefined> {
  const range: IRangeRequest = {
    key: Buffer.from(dir),
    range_end: prefixEnd(Buffer.from(dir)),
    sort_order: 'Ascend',
    sort_target: 'Create',
    keys_only: !permits,
  };
  const oldest: IRangeResponse = await context.call(() =>
    context.client.kv.range({ ...range, limit }),
  );
  const draft = draftOf(name, dir, oldest.kvs, permits, Number(oldest.count));
  if (!oldest.more || !holdersMayGoOn(draft, Number(oldest.count) - oldest.kvs.length)) {
    return draft;
  }
  const all = await context.call(() => context.client.kv.range(range));
  return draftOf(name, dir, all.kvs, permits, undefined);
}

/**
 * Whether the holders of a folder read from its oldest keys only (`unread` keys not read) may go
 * on past them: no contender among them (all keys of other shapes), a read lock with no writer
 * among them, or a semaphore with fewer contenders among them than permits.
 */
function holdersMayGoOn(draft: Draft | undefined, unread: number): boolean {
  if (draft === undefined) return true;
  if (draft.mode === 'write') return false;
  if (draft.mode === 'permits') return draft.holders.length < draft.permits!;
  return draft.waiters === unread;
}

/**
 * The entry of the folder `name` (the part's folder `dir`) from its keys `kvs` (any order), or
 * undefined when it has no holder (no contender of this backend, or a name `dirOf` never makes).
 * @param count etcd's count of the folder's keys when `kvs` are only its oldest ones; those not
 *   read are counted as waiters.
 */
function draftOf(
  name: string,
  dir: string,
  kvs: readonly IKeyValue[],
  permits: boolean,
  count: number | undefined,
): Draft | undefined {
  const key = userKeyOf(name);
  if (key === undefined) return undefined;
  const leases = new Map(kvs.map((kv) => [kv.key.toString(), kv.lease]));
  const unread = count === undefined ? 0 : Math.max(0, count - kvs.length);
  const byOrder = (a: { order: bigint }, b: { order: bigint }) =>
    a.order < b.order ? -1 : a.order > b.order ? 1 : 0;
  const holderOf = (entry: ContenderEntry | PermitContender) => ({
    owner: entry.owner,
    order: entry.order,
    lease: leases.get(entry.key)!,
  });
  if (permits) {
    const line = permitContendersOf(kvs, dir).sort(byOrder);
    const first = line[0];
    if (first === undefined) return undefined;
    const holders = line.slice(0, first.permits).map(holderOf);
    const waiters = line.length - holders.length + unread;
    return { key, mode: 'permits', permits: first.permits, holders, waiters };
  }
  const line = contendersOf(kvs, dir).sort(byOrder);
  const first = line[0];
  if (first === undefined) return undefined;
  const marker = markerKeyOf(dir, false);
  const marked = count !== undefined || kvs.some((kv) => kv.key.toString() === marker);
  if (first.mode === 'write') {
    const waiters = line.length - 1 + unread;
    return { key, mode: 'write', holders: [holderOf(first)], waiters, marked };
  }
  const writer = line.findIndex((entry) => entry.mode === 'write');
  const holders = (writer === -1 ? line : line.slice(0, writer)).map(holderOf);
  return { key, mode: 'read', holders, waiters: line.length - holders.length + unread, marked };
}

/** The user key of a folder name `dirOf` made (its percent-encoding), or undefined. */
function userKeyOf(name: string): string | undefined {
  try {
    const key = decodeURIComponent(name);
    return encodeURIComponent(key) === name ? key : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The locks among `drafts` that are not in a lock-delay (lock-delay.ts): a lock whose marker, read
 * at the page's `revision`, records a grant none of its holders has, is held by nobody (its first
 * contenders wait for the delay to end) and is left out. Only the markers of `marked` drafts are
 * read (the page's Range read the names, not the values), by key, in transactions of
 * `MARKER_READS_PER_TXN`: no request when no lock of the page has one.
 */
async function outsideDelays(
  context: ListContext,
  drafts: readonly Draft[],
  revision: bigint,
): Promise<Draft[]> {
  const marked = drafts.filter((draft) => draft.marked === true);
  if (marked.length === 0) return [...drafts];
  const kept = new Set(drafts.filter((draft) => draft.marked !== true));
  for (let start = 0; start < marked.length; start += MARKER_READS_PER_TXN) {
    const chunk = marked.slice(start, start + MARKER_READS_PER_TXN);
    const txn = await context.call(() =>
      context.client.kv.txn({
        success: chunk.map((draft) => ({
          request_range: {
            key: Buffer.from(
              markerKeyOf(`${context.namespace}/locks/${encodeURIComponent(draft.key)}/`, false),
            ),
            revision: String(revision),
          },
        })),
      }),
    );
    chunk.forEach((draft, i) => {
      const marker = txn.responses[i]?.response_range?.kvs[0];
      if (marker === undefined || draft.holders.some((h) => !delayInForce(marker, h.order))) {
        kept.add(draft);
      }
    });
  }
  return drafts.filter((draft) => kept.has(draft));
}

/**
 * The entries of `drafts` with each holder's remaining TTL: one `LeaseTimeToLive` per distinct
 * lease, `TTL_REQUESTS_AT_ONCE` at a time. A holder whose lease is gone meanwhile (its key with
 * it) is left out, and an entry left without holders.
 */
async function withTtls(context: ListContext, drafts: readonly Draft[]): Promise<ListedLock[]> {
  const leases = [...new Set(drafts.flatMap((d) => d.holders.map((h) => h.lease)))];
  const ttls = new Map<string, number>();
  let next = 0;
  const worker = async () => {
    while (next < leases.length) {
      const lease = leases[next++]!;
      ttls.set(lease, await remainingMs(context, lease));
    }
  };
  await Promise.all(Array.from({ length: Math.min(TTL_REQUESTS_AT_ONCE, leases.length) }, worker));
  return drafts.flatMap((draft): ListedLock[] => {
    const holders = draft.holders.flatMap((h): ListedHolder[] => {
      const ttlMs = ttls.get(h.lease) ?? 0;
      return ttlMs > 0 ? [{ owner: h.owner, fencingToken: h.order, ttlMs }] : [];
    });
    if (holders.length === 0) return [];
    const { key, mode, permits, waiters } = draft;
    return [{ key, mode, ...(permits === undefined ? {} : { permits }), holders, waiters }];
  });
}

/**
 * A lease's remaining TTL, ms: etcd's whole seconds (rounded down; at least 1 ms while the lease
 * lives), or 0 when the lease is gone (etcd's TTL -1, or "lease not found").
 */
async function remainingMs(context: ListContext, lease: string): Promise<number> {
  const ttl = await context.call(async () => {
    try {
      return (await context.client.leaseClient.leaseTimeToLive({ ID: lease })).TTL;
    } catch (error) {
      if (/lease not found/i.test(String(error))) return '-1';
      throw error;
    }
  });
  const seconds = Number(ttl);
  return seconds < 0 ? 0 : Math.max(1, seconds * 1000);
}
