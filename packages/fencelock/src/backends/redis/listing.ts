/**
 * `list` on the Redis backend (one node, Sentinel, Cluster): a page is one `SCAN` (`MATCH` on the
 * backend prefix and the escaped list prefix inside the `{…}` hash tag, `COUNT` = `pageSize`),
 * then one read-only script (list.lua) that reads, for every held object the SCAN found, its live
 * holders (by Redis `TIME`), their tokens and its live line, atomically. An object is named by
 * one key each (lock-keys.ts): a lock's writer key `<prefix>:{<key>}:lock`, its readers
 * `<prefix>:{<key>}:readers`, a semaphore's holders `<prefix>:{<key>}:semaphore:holders`; the
 * user key is what lies between `<prefix>:{` and that suffix (no other key of the layout ends
 * with one of them, whatever `{`, `}` or `:` the user key holds).
 *
 * The cursor is the SCAN cursor (Redis `SCAN` guarantees: a key held from the first page to the
 * last is listed; one that comes or goes meanwhile may or may not be; a key may be listed twice
 * when the server resizes its key table between pages). On a Cluster, each primary is scanned in
 * turn (ordered by address) and the cursor holds that primary's index; the script runs once per
 * hash slot among the page's keys, on the node that owns it. When one SCAN reply holds more than
 * `pageSize` held objects (SCAN's COUNT is a hint), the page takes the first `pageSize` by key
 * name and its cursor repeats that SCAN, after the last name taken.
 *
 * Cursor text: `r:<scan>[:<after>]` (one node, Sentinel), `rc:<primary>:<scan>[:<after>]`
 * (Cluster), where `<after>` is the Redis key name of the last object listed from that SCAN.
 */
import type { Cluster, Redis } from 'ioredis';
import type { ListedHolder, ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { InvalidArgumentError } from '../../errors.js';
import { isClusterClient, type RedisConnection } from './connection.js';
import { composeToken, type FailoverEpoch } from './failover-epoch.js';
import { hashSlot } from './hash-slot.js';
import { readWriteLockKeys, semaphoreKeys } from './lock-keys.js';
import { listScript } from './scripts.js';

/** The key name suffix that marks each listed object, by its kind in list.lua. */
const MARKERS = [
  { kind: 'w', suffix: '}:lock' },
  { kind: 'r', suffix: '}:readers' },
  { kind: 'p', suffix: '}:semaphore:holders' },
] as const;

export type Kind = (typeof MARKERS)[number]['kind'];

/** An object a SCAN found: its Redis key name, its kind and its user key. */
export interface Marker {
  readonly name: string;
  readonly kind: Kind;
  readonly key: string;
}

/** Where a page starts: the primary (0 off a Cluster), its SCAN cursor, after which name. */
interface RedisListCursor {
  readonly node: number;
  readonly scan: string;
  readonly after: string | null;
}

/** One primary's keyspace, scanned one SCAN call at a time. */
export interface KeyScanner {
  readonly options: { readonly host?: string; readonly port?: number };
  scan(
    cursor: string,
    match: 'MATCH',
    pattern: string,
    count: 'COUNT',
    n: number,
  ): Promise<[cursor: string, names: string[]]>;
}

/** Escape Redis glob characters (`* ? [ ] \`) so that `text` matches only itself. */
export function escapeGlob(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/**
 * The held objects among SCAN's `names` whose user key starts with `listPrefix`, once each,
 * ordered by name: the names of the layout of `backendPrefix` that end with a marker's suffix.
 */
export function markersOf(
  names: readonly string[],
  backendPrefix: string,
  listPrefix: string,
): Marker[] {
  const head = `${backendPrefix}:{`;
  const found = new Map<string, Marker>();
  for (const name of names) {
    if (!name.startsWith(head)) continue;
    for (const { kind, suffix } of MARKERS) {
      if (!name.endsWith(suffix) || name.length < head.length + suffix.length) continue;
      const key = name.slice(head.length, name.length - suffix.length);
      if (key.startsWith(listPrefix) && key !== '') found.set(name, { name, kind, key });
    }
  }
  return [...found.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** The SCAN `MATCH` pattern of the objects of `backendPrefix` whose user key starts with `listPrefix`. */
export function scanPatternOf(backendPrefix: string, listPrefix: string): string {
  return `${escapeGlob(backendPrefix)}:{${escapeGlob(listPrefix)}*`;
}

/** The five keys list.lua reads for each object, in the objects' order. */
export function listKeysOf(backendPrefix: string, markers: readonly Marker[]): string[] {
  return markers.flatMap(({ kind, key }) => {
    if (kind === 'p') {
      const s = semaphoreKeys(backendPrefix, key);
      return [s.holders, s.tokens, s.permits, s.queue, s.waiters];
    }
    const k = readWriteLockKeys(backendPrefix, key);
    return [k.lock, k.readers, k.readerTokens, k.queue, k.waiters];
  });
}

/** One list.lua reply (see the script). */
export type ListReply =
  | [0]
  | [1, string, number, number]
  | [2, (string | number)[], number]
  | [3, (string | number)[], number, number];

/** The pages of one Redis backend's held keys. */
export class RedisListing {
  readonly #connection: RedisConnection;
  readonly #prefix: string;
  readonly #epochs: FailoverEpoch | undefined;
  readonly #cluster: boolean;

  constructor(connection: RedisConnection, prefix: string, epochs: FailoverEpoch | undefined) {
    this.#connection = connection;
    this.#prefix = prefix;
    this.#epochs = epochs;
    this.#cluster = isClusterClient(connection.client);
  }

  /**
   * One page: one SCAN (COUNT `pageSize`) on one primary, then list.lua once (once per hash slot
   * of the page's keys on a Cluster).
   * @throws InvalidArgumentError for a cursor this backend did not make (before any engine
   *   call), or one naming a primary the Cluster no longer has; BackendError when Redis fails.
   */
  async page(request: ListRequest): Promise<ListPage> {
    const start = this.#parseCursor(request.cursor);
    const scanners = await this.#connection.call('list', () =>
      Promise.resolve(scannersOf(this.#connection.client)),
    );
    const scanner = scanners[start.node];
    if (scanner === undefined) {
      throw new InvalidArgumentError(
        'cursor',
        `a cursor of this Cluster's ${scanners.length} primaries`,
        request.cursor,
      );
    }
    const pattern = scanPatternOf(this.#prefix, request.prefix);
    const [next, names] = await this.#connection.call('list (SCAN)', () =>
      scanner.scan(start.scan, 'MATCH', pattern, 'COUNT', request.pageSize),
    );
    let markers = markersOf(names, this.#prefix, request.prefix);
    if (start.after !== null) markers = markers.filter((m) => m.name > start.after!);
    let cursor: RedisListCursor | null;
    if (markers.length > request.pageSize) {
      markers = markers.slice(0, request.pageSize);
      cursor = { ...start, after: markers.at(-1)!.name };
    } else if (next !== '0') {
      cursor = { node: start.node, scan: next, after: null };
    } else if (start.node + 1 < scanners.length) {
      cursor = { node: start.node + 1, scan: '0', after: null };
    } else {
      cursor = null;
    }
    const entries = await this.#read(markers);
    return { entries, cursor: cursor === null ? null : this.#formatCursor(cursor) };
  }

  /** Each object's holders and line (list.lua), as entries in the markers' order. */
  async #read(markers: readonly Marker[]): Promise<ListedLock[]> {
    if (markers.length === 0) return [];
    const groups = new Map<number, Marker[]>();
    for (const marker of markers) {
      const slot = this.#cluster ? hashSlot(marker.name) : 0;
      const group = groups.get(slot);
      if (group === undefined) groups.set(slot, [marker]);
      else group.push(marker);
    }
    const read = await Promise.all([...groups.values()].map((group) => this.#readGroup(group)));
    const byName = new Map<string, ListedLock>();
    for (const entries of read) for (const [name, entry] of entries) byName.set(name, entry);
    return markers.flatMap((m) => {
      const entry = byName.get(m.name);
      return entry === undefined ? [] : [entry];
    });
  }

  /** One list.lua call over objects of one hash slot (one node: every object). */
  async #readGroup(group: readonly Marker[]): Promise<[string, ListedLock][]> {
    const keys = listKeysOf(this.#prefix, group);
    const kinds = group.map((m) => m.kind);
    const [epoch, replies] = await this.#connection.call('list', async () => {
      const reading = await this.#epochs?.current();
      return [reading?.epoch, await listScript.run(this.#connection.client, keys, kinds)] as const;
    });
    const tokenOf = (counter: string | number) =>
      epoch === undefined ? BigInt(counter) : composeToken(epoch, BigInt(counter));
    return group.flatMap((marker, i): [string, ListedLock][] => {
      const reply = replies[i] as ListReply | undefined;
      const entry = reply === undefined ? undefined : entryOf(marker.key, reply, tokenOf);
      return entry === undefined ? [] : [[marker.name, entry]];
    });
  }

  /**
   * Read a cursor (null: the first page).
   * @throws InvalidArgumentError for text no page of this backend's topology made.
   */
  #parseCursor(cursor: string | null): RedisListCursor {
    if (cursor === null) return { node: 0, scan: '0', after: null };
    const match = /^(?:r|rc:(\d{1,4})):(\d{1,20})(?::([\s\S]+))?$/.exec(cursor);
    const cluster = match?.[1] !== undefined;
    const after = match?.[3] ?? null;
    if (
      match === null ||
      cluster !== this.#cluster ||
      (!cluster && match[2] === '0' && after === null) ||
      (after !== null && markersOf([after], this.#prefix, '').length !== 1)
    ) {
      throw new InvalidArgumentError('cursor', 'a cursor from this store’s previous page', cursor);
    }
    return { node: Number(match[1] ?? 0), scan: match[2]!, after };
  }

  #formatCursor({ node, scan, after }: RedisListCursor): string {
    const head = this.#cluster ? `rc:${node}:${scan}` : `r:${scan}`;
    return after === null ? head : `${head}:${after}`;
  }
}

/** What to scan: the client itself, or a Cluster's primaries ordered by address. */
function scannersOf(client: Redis | Cluster): KeyScanner[] {
  if (!isClusterClient(client)) return [client as unknown as KeyScanner];
  const primaries = (client as unknown as { nodes(role: 'master'): KeyScanner[] }).nodes('master');
  const address = (s: KeyScanner) => `${s.options.host}:${String(s.options.port).padStart(5, '0')}`;
  return [...primaries].sort((a, b) => (address(a) < address(b) ? -1 : 1));
}

/** A list.lua reply as an entry (undefined: no live holder). */
export function entryOf(
  key: string,
  reply: ListReply,
  tokenOf: (counter: string | number) => bigint,
): ListedLock | undefined {
  switch (reply[0]) {
    case 1: {
      const [, value, pttl, waiters] = reply;
      const sep = value.lastIndexOf(':');
      const holder = {
        owner: value.slice(0, sep),
        fencingToken: tokenOf(value.slice(sep + 1)),
        ttlMs: pttl,
      };
      return { key, mode: 'write', holders: [holder], waiters };
    }
    case 2:
      return { key, mode: 'read', holders: holdersOf(reply[1], tokenOf), waiters: reply[2] };
    case 3:
      return {
        key,
        mode: 'permits',
        permits: reply[3],
        holders: holdersOf(reply[1], tokenOf),
        waiters: reply[2],
      };
    default:
      return undefined;
  }
}

/** `{owner, counter, ms left, …}` as holders, oldest token first. */
export function holdersOf(
  flat: readonly (string | number)[],
  tokenOf: (counter: string | number) => bigint,
): ListedHolder[] {
  const holders: ListedHolder[] = [];
  for (let i = 0; i + 2 < flat.length; i += 3) {
    holders.push({
      owner: String(flat[i]),
      fencingToken: tokenOf(flat[i + 1]!),
      ttlMs: Number(flat[i + 2]),
    });
  }
  return holders.sort((a, b) =>
    a.fencingToken < b.fencingToken ? -1 : a.fencingToken > b.fencingToken ? 1 : 0,
  );
}
