/**
 * `list` on Redlock: every node keeps its own copy of the single-node layout (lock-keys.ts), so a
 * page is one `SCAN` of one node (the Redis backend's pattern and markers, redis/listing.ts;
 * `COUNT` = `pageSize`), nodes in the order given, then the Redis backend's read-only list.lua on
 * every node at once over the objects found (each object read atomically on each node). An
 * object is listed only with the holders a quorum of nodes shows with the same owner and token:
 * a majority for locks and read locks, the permit quorum ⌊n·p/(p+1)⌋+1 for a semaphore of p
 * permits (`permitQuorumOf`; p as most of its nodes store it), as votes grant them; a holder's
 * `ttlMs` is the quorum-th longest time left among the nodes that show it (the time until fewer
 * than a quorum still hold it, as `inspect` reports), `waiters` the quorum-th largest live line
 * among them. An object held on several nodes is listed from the first node in the given order
 * that shows one of its agreed holders, so once for the listing.
 *
 * A node whose SCAN fails is skipped for the rest of the listing (its index joins the cursor's
 * skip mask; its objects are then listed from the next node that shows them); more skipped nodes
 * than a quorum can spare is a `QuorumError`, as is a read answered by fewer than a quorum.
 *
 * Cursor text: `rl:<node>:<skip mask>:<scan>[:<after>]` (`<after>`: the last object's name, when
 * one SCAN reply held more than `pageSize` objects).
 */
import type { ListedLock, ListPage, ListRequest } from '../../core/backend.js';
import { InvalidArgumentError, QuorumError } from '../../errors.js';
import {
  entryOf,
  type ListReply,
  listKeysOf,
  type Marker,
  markersOf,
  scanPatternOf,
} from '../redis/listing.js';
import { listScript } from '../redis/scripts.js';
import { type NodeResult, outcomesOf, permitQuorumOf, quorumOf } from './quorum.js';
import type { NodeVoter } from './voter.js';

/** Where a page starts: the node, the nodes skipped so far (a bit each), its SCAN cursor, after. */
interface RedlockListCursor {
  readonly node: number;
  readonly skipped: number;
  readonly scan: string;
  readonly after: string | null;
}

/** One node's answer for one object: the holders it shows and its live line. */
interface NodeView {
  readonly node: number;
  readonly holders: readonly { owner: string; counter: string; ttlMs: number }[];
  readonly waiters: number;
  readonly permits: number;
}

/** The pages of one Redlock backend's held keys. */
export class RedlockListing {
  readonly #voter: NodeVoter;
  readonly #prefix: string;
  readonly #timeoutMs: number;
  readonly #quorum: number;

  /** @param timeoutMs per-node bound of each command of a page, ms. */
  constructor(voter: NodeVoter, prefix: string, timeoutMs: number) {
    this.#voter = voter;
    this.#prefix = prefix;
    this.#timeoutMs = timeoutMs;
    this.#quorum = quorumOf(voter.nodes.length);
  }

  /**
   * One page: one SCAN of one node, then list.lua on every node (one call each).
   * @throws InvalidArgumentError for a cursor this backend did not make (before any command);
   *   QuorumError when more nodes failed than a quorum can spare.
   */
  async page(request: ListRequest): Promise<ListPage> {
    const start = this.#parseCursor(request.cursor);
    const n = this.#voter.nodes.length;
    const pattern = scanPatternOf(this.#prefix, request.prefix);
    const scans = await this.#voter.run(
      this.#timeoutMs,
      (client, node) =>
        node === this.#voter.nodes[start.node]
          ? client.scan(start.scan, 'MATCH', pattern, 'COUNT', request.pageSize)
          : Promise.resolve(undefined),
      () => false,
    ).all;
    const scanned = scans[start.node]!;
    const nextNode = (skipped: number): RedlockListCursor | null =>
      start.node + 1 < n ? { node: start.node + 1, skipped, scan: '0', after: null } : null;
    if (scanned.status !== 'ok' || scanned.value === undefined) {
      const skipped = start.skipped | (1 << start.node);
      if (bitCount(skipped) > n - this.#quorum) {
        throw new QuorumError(
          request.prefix,
          'list (SCAN)',
          outcomesOf(scans, () => false),
        );
      }
      const cursor = nextNode(skipped);
      return { entries: [], cursor: cursor === null ? null : this.#formatCursor(cursor) };
    }
    const [next, names] = scanned.value;
    let markers = markersOf(names, this.#prefix, request.prefix);
    if (start.after !== null) markers = markers.filter((m) => m.name > start.after!);
    let cursor: RedlockListCursor | null;
    if (markers.length > request.pageSize) {
      markers = markers.slice(0, request.pageSize);
      cursor = { ...start, after: markers.at(-1)!.name };
    } else if (next !== '0') {
      cursor = { ...start, scan: next, after: null };
    } else {
      cursor = nextNode(start.skipped);
    }
    const entries = await this.#read(request.prefix, markers, start);
    return { entries, cursor: cursor === null ? null : this.#formatCursor(cursor) };
  }

  /** list.lua on every node; the objects whose agreed holders this page's node lists first. */
  async #read(
    listPrefix: string,
    markers: readonly Marker[],
    start: RedlockListCursor,
  ): Promise<ListedLock[]> {
    if (markers.length === 0) return [];
    const keys = listKeysOf(this.#prefix, markers);
    const kinds = markers.map((m) => m.kind);
    const all = await this.#voter.run(
      this.#timeoutMs,
      (client) => listScript.run(client, keys, kinds),
      () => false,
    ).all;
    const answers = all.flatMap((r, node) =>
      r.status === 'ok' ? [{ node, replies: r.value }] : [],
    );
    if (answers.length < this.#quorum) {
      throw new QuorumError(
        listPrefix,
        'list',
        outcomesOf(all as NodeResult<unknown>[], () => false),
      );
    }
    return markers.flatMap((marker, i) => {
      const views = answers.flatMap(({ node, replies }) => viewOf(node, replies[i] as ListReply));
      const entry = this.#agreed(marker, views, start);
      return entry === undefined ? [] : [entry];
    });
  }

  /**
   * The object's holders a quorum shows with the same owner and token, when the first node (not
   * skipped) showing one of them is this page's node; undefined otherwise.
   */
  #agreed(
    marker: Marker,
    views: readonly NodeView[],
    start: RedlockListCursor,
  ): ListedLock | undefined {
    const permits = marker.kind === 'p' ? mostCommon(views.map((v) => v.permits)) : 1;
    const quorum =
      marker.kind === 'p' ? permitQuorumOf(this.#voter.nodes.length, permits) : this.#quorum;
    const shown = new Map<
      string,
      { owner: string; counter: string; ttls: number[]; nodes: number[] }
    >();
    for (const view of views) {
      for (const h of view.holders) {
        const id = `${h.owner}\u0000${h.counter}`;
        const seen = shown.get(id) ?? { owner: h.owner, counter: h.counter, ttls: [], nodes: [] };
        seen.ttls.push(h.ttlMs);
        seen.nodes.push(view.node);
        shown.set(id, seen);
      }
    }
    const agreed = [...shown.values()].filter((h) => h.nodes.length >= quorum);
    if (agreed.length === 0) return undefined;
    const showing = new Set(agreed.flatMap((h) => h.nodes));
    const first = [...showing]
      .filter((node) => (start.skipped & (1 << node)) === 0)
      .sort((a, b) => a - b)[0];
    if (first !== start.node) return undefined;
    const lines = views.filter((v) => showing.has(v.node)).map((v) => v.waiters);
    const flat = agreed.flatMap((h) => [h.owner, h.counter, quorumthLongest(h.ttls, quorum)]);
    const waiters = quorumthLongest(lines, Math.min(quorum, lines.length));
    const reply: ListReply =
      marker.kind === 'w'
        ? [1, `${agreed[0]!.owner}:${agreed[0]!.counter}`, Number(flat[2]), waiters]
        : marker.kind === 'r'
          ? [2, flat, waiters]
          : [3, flat, waiters, permits];
    return entryOf(marker.key, reply, (counter) => BigInt(counter));
  }

  /**
   * Read a cursor (null: the first page).
   * @throws InvalidArgumentError for text no page of this backend made.
   */
  #parseCursor(cursor: string | null): RedlockListCursor {
    if (cursor === null) return { node: 0, skipped: 0, scan: '0', after: null };
    const match = /^rl:(\d{1,2}):(\d{1,10}):(\d{1,20})(?::([\s\S]+))?$/.exec(cursor);
    const node = Number(match?.[1]);
    const skipped = Number(match?.[2]);
    const after = match?.[4] ?? null;
    if (
      match === null ||
      node >= this.#voter.nodes.length ||
      skipped >= 2 ** this.#voter.nodes.length ||
      (after !== null && markersOf([after], this.#prefix, '').length !== 1)
    ) {
      throw new InvalidArgumentError('cursor', 'a cursor from this store’s previous page', cursor);
    }
    return { node, skipped, scan: match[3]!, after };
  }

  #formatCursor({ node, skipped, scan, after }: RedlockListCursor): string {
    const head = `rl:${node}:${skipped}:${scan}`;
    return after === null ? head : `${head}:${after}`;
  }
}

/** One node's list.lua reply for one object, as the holders it shows. */
function viewOf(node: number, reply: ListReply | undefined): NodeView[] {
  if (reply === undefined) return [];
  switch (reply[0]) {
    case 1: {
      const [, value, pttl, waiters] = reply;
      const sep = value.lastIndexOf(':');
      const holder = { owner: value.slice(0, sep), counter: value.slice(sep + 1), ttlMs: pttl };
      return [{ node, holders: [holder], waiters, permits: 1 }];
    }
    case 2:
    case 3: {
      const flat = reply[1];
      const holders = [];
      for (let i = 0; i + 2 < flat.length; i += 3) {
        holders.push({
          owner: String(flat[i]),
          counter: String(flat[i + 1]),
          ttlMs: Number(flat[i + 2]),
        });
      }
      return [{ node, holders, waiters: reply[2], permits: reply[0] === 3 ? reply[3] : 1 }];
    }
    default:
      return [];
  }
}

/** The `quorum`-th largest of `values` (how long, or how many, at least a quorum of nodes show). */
function quorumthLongest(values: readonly number[], quorum: number): number {
  return [...values].sort((a, b) => b - a)[quorum - 1] ?? 0;
}

/** The value most of `values` hold (the first on a tie; 1 for none). */
function mostCommon(values: readonly number[]): number {
  const counts = new Map<number, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  let best = 1;
  let bestCount = 0;
  for (const [v, c] of counts) {
    if (c > bestCount) {
      best = v;
      bestCount = c;
    }
  }
  return best;
}

function bitCount(mask: number): number {
  let count = 0;
  for (let m = mask; m > 0; m >>>= 1) count += m & 1;
  return count;
}
