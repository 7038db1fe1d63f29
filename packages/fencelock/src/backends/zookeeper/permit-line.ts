/**
 * A semaphore's line on ZooKeeper, over plain data: the contender node names under the
 * semaphore's node, and the rule that says who holds a permit and what a waiter watches.
 *
 * Every contender of a semaphore with N permits creates an EPHEMERAL_SEQUENTIAL node
 * `_c_<owner>-p<N>-<10-digit sequence>`. The permit count is in the name, so one read of the
 * children shows the line, in order, with the count each contender uses. The rule, after
 * Curator's lock recipe (`LockInternals`: a contender's place is its sequence number) counted up
 * to N as in its `InterProcessSemaphoreV2` (at most N leases):
 *
 * - a contender with fewer than N nodes ahead of it holds a permit (positions only go down, so a
 *   holder stays one until its node goes);
 * - the first waiter (exactly N ahead: the N holders) watches every one of them, and is woken by
 *   the first to go;
 * - every later waiter (more than N ahead) watches only its predecessor, the node just ahead. It
 *   is woken when that node goes, or when its data changes: a contender granted while nodes were
 *   behind it writes its own node once (the backend's `announce`), which is how its successor
 *   learns that it is now the first waiter. So a release wakes the first waiter only, and the
 *   grant that follows wakes the next one to count again (no herd).
 * - a contender whose nodes ahead use another count is refused (`mismatch`): two live contenders
 *   admitted this way always agree, since the later one read the line after the earlier one's
 *   node was made.
 */

/**
 * A semaphore contender node name: the owner id (32 to 128 hex digits), the permit count (1 to
 * `MAX_PERMITS`) and the sequence. Other children of a semaphore's node are not contenders.
 */
const PERMIT_NODE_NAME = /^_c_([0-9a-f]{32,128})-p([1-9]\d{0,4})-(\d{10})$/;

/** One contender of a semaphore's line. */
export interface PermitEntry {
  readonly name: string;
  readonly owner: string;
  /** The permit count this contender uses. */
  readonly permits: number;
  /** The node's sequence number: its place in line. */
  readonly order: bigint;
}

/** What the line says to one contender. */
export type PermitVerdict =
  /** A permit is held; `behind`: nodes came after this one (a successor may watch it). */
  | { readonly outcome: 'granted'; readonly behind: boolean }
  /**
   * Not yet: wait until one of `watch` goes (the N holders, for the first waiter) or, for a later
   * waiter (`firstWaiter` false), until its predecessor goes or is written (granted).
   */
  | {
      readonly outcome: 'wait';
      readonly firstWaiter: boolean;
      readonly watch: readonly PermitEntry[];
    }
  /** A node ahead uses another permit count: `inUse`. */
  | { readonly outcome: 'mismatch'; readonly inUse: number };

/** The prefix of a contender node's name of `owner` with `permits` (the server appends the sequence). */
export function permitNodePrefix(owner: string, permits: number): string {
  return `_c_${owner}-p${permits}-`;
}

/** The contender entries among `names`, lowest sequence first (other names are ignored). */
export function parsePermitLine(names: readonly string[]): PermitEntry[] {
  const entries: PermitEntry[] = [];
  for (const name of names) {
    const m = PERMIT_NODE_NAME.exec(name);
    if (m === null) continue;
    entries.push({ name, owner: m[1]!, permits: Number(m[2]), order: BigInt(m[3]!) });
  }
  return entries.sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0));
}

/**
 * The permit count in use that differs from `permits`, if any entry ahead of `before` (all
 * entries when absent) has one: the lowest such entry's.
 */
export function otherCountInUse(
  entries: readonly PermitEntry[],
  permits: number,
  before?: bigint,
): number | undefined {
  for (const entry of entries) {
    if (before !== undefined && entry.order >= before) break;
    if (entry.permits !== permits) return entry.permits;
  }
  return undefined;
}

/**
 * The verdict of the line `entries` (lowest sequence first, `mine` among them) on `mine`, for a
 * semaphore of `permits`.
 */
export function permitVerdict(
  entries: readonly PermitEntry[],
  mine: PermitEntry,
  permits: number,
): PermitVerdict {
  const inUse = otherCountInUse(entries, permits, mine.order);
  if (inUse !== undefined) return { outcome: 'mismatch', inUse };
  const at = entries.indexOf(mine);
  const ahead = entries.slice(0, at);
  if (ahead.length < permits) return { outcome: 'granted', behind: at < entries.length - 1 };
  if (ahead.length === permits) return { outcome: 'wait', firstWaiter: true, watch: ahead };
  return { outcome: 'wait', firstWaiter: false, watch: [ahead.at(-1)!] };
}
