/**
 * Lock-delay on ZooKeeper (Chubby's lock-delay, Burrows OSDI 2006 section 2.4; Consul's session
 * `LockDelay`), over plain data: the names of the delay's nodes and the judgement of a stamp's
 * age on the ensemble's clock.
 *
 * Layout, beside the contender nodes of a lock's (or an election's) line:
 *
 * - A grant made with `lockDelayMs` = D creates a PERSISTENT marker `_d_<holder node name>` (for
 *   example `_d__c_<owner>-w-0000000007`) under the key's node, its data D in ms (decimal). The
 *   holder's ephemeral node and the marker together mean "held, with a delay".
 * - A marker whose holder node is gone means the grant ended without a release (the session
 *   expired, the lease's own TTL ran out, or the node was taken away): nobody holds the key, and
 *   nobody is granted it while the marker is there.
 * - The end is stamped by a PERSISTENT child `end` of the marker (data D), created by the first
 *   process that sees the holder node gone: the holder's own backend when it deletes the node at
 *   its TTL (one round trip after the end), else the first contender that reads the line after
 *   the end (the waiter that watched the holder's node is woken by its deletion, so within a
 *   round trip or two of it; a contender that comes later stamps on its arrival). The stamp's
 *   ctime is thus no earlier than the end.
 * - A contender at the head of the line writes the stamp (same data): the write's mtime is the
 *   ensemble's "now", its ctime the stamp's, both from the leader's wall clock. The delay left is
 *   D − (mtime − ctime). The two are compared only when both were set in the same epoch (the
 *   high 32 bits of czxid and mzxid: the same leader's clock) and mtime ≥ ctime; otherwise the
 *   stamp is made again (the delay counts afresh from now, the conservative side). The head
 *   waits for the stamp's deletion or the delay left (a timer), whichever comes first, then
 *   reads the line again; once the delay is over it deletes `end` and the marker and is granted.
 * - A release or withdrawal that deletes the live holder node then deletes `end` (if a contender
 *   stamped in between) and the marker; one that finds the node already gone leaves them.
 *
 * The bound: no grant before (the stamp's ctime + D) on the leader's wall clock, and the stamp is
 * no earlier than the end, so no grant before the end + D, assuming the leader's wall clock does
 * not step forward during the delay (ZooKeeper's own TTL nodes assume as much). The wait is longer
 * than D after the end by the time until the first process saw the end (about a round trip when
 * the holder's backend or a waiter is there), plus the recheck's round trips.
 */
import { MAX_LOCK_DELAY_MS } from '../../options.js';
import type { NodeStat } from './native.js';

/** A marker's name: `_d_` and its holder's node name (a lock's writer or an election's candidate). */
const MARKER_NAME = /^_d_(_c_[0-9a-f]{32,128}-[we]-\d{10})$/;

/** The name of the end stamp under a marker. */
export const END_NODE = 'end';

/** The marker's name of the holder node `nodeName`. */
export function markerNameOf(nodeName: string): string {
  return `_d_${nodeName}`;
}

/** The holder node name a marker `name` stands for, or undefined when `name` is no marker. */
export function markedNodeOf(name: string): string | undefined {
  return MARKER_NAME.exec(name)?.[1];
}

/**
 * The markers among the children `names` of a key's node whose holder node is not among them:
 * grants that ended without a release, whose delay may still run.
 */
export function endedMarkers(names: readonly string[]): string[] {
  const present = new Set(names);
  return names.filter((name) => {
    const holder = markedNodeOf(name);
    return holder !== undefined && !present.has(holder);
  });
}

/**
 * Whether the children `names` show no holder because of a lock-delay: an ended grant's marker
 * is there (its delay running, or over but not yet cleared: the key is granted only after it is).
 */
export function delayInForce(names: readonly string[]): boolean {
  return endedMarkers(names).length > 0;
}

/** A marker's (and its stamp's) data: the delay, ms. */
export function encodeDelay(delayMs: number): string {
  return String(delayMs);
}

/** The delay in a marker's data, ms (capped at `MAX_LOCK_DELAY_MS`; 0 when malformed). */
export function decodeDelay(data: string): number {
  if (!/^\d{1,9}$/.test(data)) return 0;
  return Math.min(Number(data), MAX_LOCK_DELAY_MS);
}

/** The epoch of a zxid (its high 32 bits): which leader's proposal it was. */
function epochOf(zxid: number): number {
  return Math.floor(zxid / 2 ** 32);
}

/**
 * The age of an end stamp just written (its stat from that write), ms: mtime − ctime, or
 * undefined when it cannot be judged (set under two leaders, whose clocks differ, or a clock
 * that went back), in which case the stamp is to be made again.
 */
export function stampAgeMs(stat: NodeStat): number | undefined {
  const { ctime, mtime, mzxid } = stat;
  if (ctime === undefined || mtime === undefined || mzxid === undefined) return undefined;
  if (epochOf(stat.czxid) !== epochOf(mzxid)) return undefined;
  const age = new Date(mtime).getTime() - new Date(ctime).getTime();
  return Number.isFinite(age) && age >= 0 ? age : undefined;
}
