/**
 * `list` on the ZooKeeper store: the held keys under a prefix, read from the backend's layout.
 *
 * - Every lock key has a node `/<namespace>/locks/<node name>` and every semaphore key one under
 *   `/<namespace>/semaphores/` (names.ts: the key percent-encoded, so one node name). Their
 *   children are the contenders' EPHEMERAL_SEQUENTIAL nodes, each in its holder's session (the
 *   node's `ephemeralOwner`): `_c_<owner>-<w|r>-<sequence>` for a lock,
 *   `_c_<owner>-p<N>-<sequence>` for a semaphore of N permits. A node that exists belongs to a
 *   session the ensemble still holds alive; the ensemble deletes it when that session ends.
 * - A page reads the children of `/<namespace>/locks` (then of `/<namespace>/semaphores`), sorts
 *   the node names, keeps those that start with the prefix's node name (the same thing as keys
 *   that start with the prefix, see `nodeNameOf`) after the cursor's name, and reads at most
 *   `pageSize` of them. ZooKeeper cannot page a node's children on the server, so that one read
 *   answers every key of the part; the bound per page is on the keys read after it.
 * - Each key's entry is one `getChildren` of its node: its line as of one zxid, from which the
 *   holders follow by the backend's rules (a lock: the first node if it is a writer's, else the
 *   readers before the first writer, Curator's read-write lock; a semaphore: the first N nodes,
 *   `permitVerdict`), the rest being waiters. Then one `getData` per holder node gives its czxid
 *   (the fencing token, fixed at its create) and its data. The `zookeeper` client has no `multi`
 *   of reads, so these follow the line's read; a holder node gone by then means the key changed
 *   meanwhile, and the line is read again (up to 3 times, then the key is left out of the page,
 *   as a key freed while the listing runs may be).
 * - A page starts with a `sync` of the listing's session, so it sees every grant and release the
 *   ensemble committed before it, whichever server the holders' sessions use.
 *
 * The cursor: `zl` / `zp` to start the locks' / semaphores' part, or `zl:<node name>` /
 * `zp:<node name>` after that key's node (the last one the previous page read).
 */
import type { ListedHolder, ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { InvalidArgumentError } from '../../errors.js';
import { delayInForce } from './lock-delay.js';
import { keyOfNodeName, nodeNameOf, parseChildren } from './names.js';
import { parsePermitLine } from './permit-line.js';
import type { ZkSession } from './session.js';

/** Where a page starts: its part (`l` locks, `p` semaphores), after which node name. */
export interface ZkListCursor {
  readonly part: 'l' | 'p';
  readonly after: string | null;
}

/** How many times a key's line is read when a holder node goes between its reads. */
const LINE_READS = 3;

/**
 * Read a cursor (null: the first page, locks from the prefix on).
 * @throws InvalidArgumentError (argument `cursor`) for text no page of this backend made.
 */
export function parseZkListCursor(cursor: string | null): ZkListCursor {
  if (cursor === null) return { part: 'l', after: null };
  const part = cursor[1];
  if (cursor[0] === 'z' && (part === 'l' || part === 'p')) {
    if (cursor.length === 2) return { part, after: null };
    const after = cursor.slice(3);
    if (cursor[2] === ':' && keyOfNodeName(after) !== undefined) return { part, after };
  }
  throw new InvalidArgumentError('cursor', 'a cursor from this store’s previous page', cursor);
}

/** The text of a cursor. */
export function formatZkListCursor({ part, after }: ZkListCursor): string {
  return after === null ? `z${part}` : `z${part}:${after}`;
}

/** What a page needs from the backend. */
export interface ListSource {
  /** `/<namespace>`. */
  readonly root: string;
  /** The session the listing reads in. */
  session(): Promise<ZkSession>;
  /** Run one engine request; its failure becomes the backend's `BackendError` of `list`. */
  call<T>(run: () => Promise<T>): Promise<T>;
  /**
   * What this process knows of `owner`'s holder node `path` with czxid `token`, when it is one of
   * this backend's own live grants: its remaining validity, ms (> 0). Undefined otherwise.
   */
  ownRemainingMs(owner: string, path: string, token: bigint): number | undefined;
}

/**
 * One page of held keys.
 * @throws InvalidArgumentError for a cursor this backend did not make, before any request.
 * @throws BackendError when the ensemble cannot answer.
 */
export async function listPage(source: ListSource, request: ListRequest): Promise<ListPage> {
  let { part, after } = parseZkListCursor(request.cursor);
  const session = await source.session();
  await source.call(() => session.sync(source.root));
  const prefix = nodeNameOf(request.prefix);
  const entries: ListedLock[] = [];
  let budget = request.pageSize;
  for (;;) {
    const parent = `${source.root}/${part === 'l' ? 'locks' : 'semaphores'}`;
    const names = (await source.call(() => session.children(parent)))
      .filter(
        (name) =>
          name.startsWith(prefix) &&
          (after === null || name > after) &&
          keyOfNodeName(name) !== undefined,
      )
      .sort();
    const chosen = names.slice(0, budget);
    const read = await Promise.all(
      chosen.map((name) => readKey(source, session, part, `${parent}/${name}`, name)),
    );
    for (const entry of read) if (entry !== undefined) entries.push(entry);
    if (names.length > chosen.length) {
      return { entries, cursor: formatZkListCursor({ part, after: chosen.at(-1)! }) };
    }
    if (part === 'p') return { entries, cursor: null };
    budget -= chosen.length;
    if (budget === 0) return { entries, cursor: formatZkListCursor({ part: 'p', after: null }) };
    part = 'p';
    after = null;
  }
}

/** The holders (by node name) and waiter count a key's line shows; undefined: no holder. */
interface Line {
  readonly mode: ListedLock['mode'];
  readonly permits?: number;
  readonly holders: readonly string[];
  readonly waiters: number;
}

/**
 * A lock's line: the first node when it is a writer's, else the readers ahead of the first
 * writer (a writer holds when no node is ahead of it, a reader when no writer's is); nobody while
 * a lock-delay's marker shows an ended grant (lock-delay.ts).
 */
function lockLine(names: readonly string[]): Line | undefined {
  // In a lock-delay (a grant that ended without a release), nobody holds the key.
  if (delayInForce(names)) return undefined;
  const entries = parseChildren(names);
  const first = entries[0];
  if (first === undefined) return undefined;
  if (first.mode === 'write') {
    return { mode: 'write', holders: [first.name], waiters: entries.length - 1 };
  }
  const writer = entries.findIndex((e) => e.mode === 'write');
  const readers = writer === -1 ? entries : entries.slice(0, writer);
  return {
    mode: 'read',
    holders: readers.map((e) => e.name),
    waiters: entries.length - readers.length,
  };
}

/**
 * A semaphore's line: its count N is the first node's, and the first N nodes hold a permit up to
 * the first one with another count (refused, with every node behind it: `permitVerdict`).
 */
function semaphoreLine(names: readonly string[]): Line | undefined {
  const entries = parsePermitLine(names);
  const permits = entries[0]?.permits;
  if (permits === undefined) return undefined;
  const holders: string[] = [];
  for (const entry of entries.slice(0, permits)) {
    if (entry.permits !== permits) break;
    holders.push(entry.name);
  }
  return { mode: 'permits', permits, holders, waiters: entries.length - holders.length };
}

/**
 * One key's entry: its line (one `getChildren`), then each holder node's czxid and data.
 * `ttlMs` of a holder: this process's own knowledge when the node is one of this backend's live
 * grants (`ownRemainingMs`: the session's validity, and a lease without watchdog's own expiry);
 * else the node's data, which its holder wrote at its create: its session's negotiated timeout
 * (or, for a lease without watchdog, the TTL of its last renewal), the longest the node outlives
 * the last time the ensemble heard from that session. The remaining time of another session is
 * not readable, so this is an upper bound. A node whose data is no TTL (not made by fencelock)
 * gets the listing session's negotiated timeout.
 */
async function readKey(
  source: ListSource,
  session: ZkSession,
  part: 'l' | 'p',
  dir: string,
  name: string,
): Promise<ListedLock | undefined> {
  const key = keyOfNodeName(name)!;
  for (let reads = 0; reads < LINE_READS; reads++) {
    const children = await source.call(() => session.children(dir));
    const line = part === 'l' ? lockLine(children) : semaphoreLine(children);
    if (line === undefined) return undefined;
    const nodes = await Promise.all(
      line.holders.map((holder) => source.call(() => session.read(`${dir}/${holder}`))),
    );
    const holders: ListedHolder[] = [];
    for (const [i, node] of nodes.entries()) {
      if (node === undefined) break;
      const holder = line.holders[i]!;
      const owner = ownerOf(holder);
      const fencingToken = BigInt(node.stat.czxid);
      const own = source.ownRemainingMs(owner, `${dir}/${holder}`, fencingToken);
      const written = /^[1-9]\d{0,15}$/.test(node.data) ? Number(node.data) : session.timeoutMs;
      holders.push({ owner, fencingToken, ttlMs: own ?? written });
    }
    if (holders.length < nodes.length) continue;
    // The line's order is the creates' order, as the czxids are; sorted by token all the same.
    holders.sort((a, b) => (a.fencingToken < b.fencingToken ? -1 : 1));
    return {
      key,
      mode: line.mode,
      ...(line.permits === undefined ? {} : { permits: line.permits }),
      holders,
      waiters: line.waiters,
    };
  }
  return undefined;
}

/** The owner id in a contender node name `_c_<owner>-…`. */
function ownerOf(name: string): string {
  return name.slice(3, name.indexOf('-'));
}
