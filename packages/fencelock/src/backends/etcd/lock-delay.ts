/**
 * Lock-delay on etcd (`AttemptRequest.lockDelayMs`: Chubby's lock-delay, Burrows, OSDI 2006,
 * section 2.4; Consul's session `LockDelay`). etcd ends a grant by itself (the lease carrying the
 * contender key expires) and records no time for it, so the delay is kept by a marker written
 * with the grant that outlives it by the delay:
 *
 * - The marker is a key in the line's folder that is no contender (contender-key.ts,
 *   election-key.ts ignore it): `<dir>w-delay` for a lock (under the writers' names, so the
 *   guards of `attemptAll`, attempt-all.ts, see it), `<dir>c-delay` for an election (so its
 *   watchers are told when a delay starts and ends); its value is the grant's fencing token (the
 *   contender key's create revision, a cluster revision: no two grants share it), decimal.
 * - It is bound to a second lease, whose TTL is `markerSeconds`: the holder's lease TTL + the
 *   delay + the holder's keepalive deadline, rounded up to whole seconds. That lease is granted
 *   after the holder's and refreshed just before each refresh of the holder's lease (a
 *   kept-alive session beats its companion lease first and not its own without it, session.ts;
 *   a lease without the watchdog is renewed once, then the holder's), so it ends no earlier than
 *   the delay after the holder's lease does, also when the process dies between the two
 *   refreshes; a release deletes the marker.
 * - A contender that its line would grant is refused while a marker of another grant (another
 *   token) exists: that grant ended without a release (its key expired or was deleted), and the
 *   delay after it runs until the marker's lease expires. The contender keeps its place in line
 *   and watches the marker's deletion.
 *
 * How exact: the delay ends when etcd expires the marker's lease, at least D after the holder's
 * lease ended (given the holder's refresh lands within its deadline after the marker's) and at
 * most D + the keepalive deadline + 1 s of rounding later, plus up to 500 ms until the leader's
 * expiry tick; on a kept-alive session, a holder that dies before the session's first beat after
 * its grant adds up to the time since the previous beat (a third of the TTL). A leader change
 * extends every lease alike, so the marker still outlives the holder's lease by D. A marker lease
 * that etcd ends early anyway (revoked by hand) ends the delay early.
 */
import type { ICompare, IKeyValue, IRequestOp } from 'etcd3';

/**
 * Least `holderTtlMs` answered while a delay is in force, ms: etcd reports a lease's TTL in whole
 * seconds rounded down (0 for the last second), and expires leases on a 500 ms tick; the marker's
 * deletion wakes the waiter anyway.
 */
export const DELAY_TTL_FLOOR_MS = 500;

/**
 * The marker key of the line whose folder is `dir` (`<namespace>/locks/<key>/`, or
 * `<namespace>/elections/<key>/` when `election`): `<dir>w-delay` or `<dir>c-delay`.
 */
export function markerKeyOf(dir: string, election: boolean): string {
  return `${dir}${election ? 'c' : 'w'}-delay`;
}

/**
 * TTL of the lease a marker lives on, whole seconds: the holder's lease (`holderTtlMs`, as the
 * server granted it) + the delay (`delayMs`) + `slackMs`, rounded up. `slackMs` is the deadline
 * of the holder's keepalive (session.ts): the most its refresh lands after the marker lease's.
 */
export function markerSeconds(holderTtlMs: number, delayMs: number, slackMs: number): number {
  return Math.ceil((holderTtlMs + delayMs + slackMs) / 1000);
}

/**
 * Whether `marker` (the marker key as read, or undefined when absent) keeps out a contender its
 * line grants with `token`: a marker of another grant, which has ended (while a grant lives, its
 * line grants nobody else). A key there bound to no lease (etcd's lease 0) is not this backend's
 * and never keeps anyone out.
 */
export function delayInForce(marker: IKeyValue | undefined, token: bigint): boolean {
  return marker !== undefined && marker.lease !== '0' && marker.value.toString() !== String(token);
}

/** The read of the marker key `marker` (its value: the token it records). */
export function markerReadOp(marker: string): IRequestOp {
  return { request_range: { key: Buffer.from(marker) } };
}

/** The put of the marker `marker` recording the grant `token`, on the lease `leaseId`. */
export function putMarkerOp(marker: string, token: bigint, leaseId: string): IRequestOp {
  return {
    request_put: { key: Buffer.from(marker), value: Buffer.from(String(token)), lease: leaseId },
  };
}

/**
 * The deletion of the marker `marker` only while it records the grant `token` (a nested
 * transaction, etcd 3.3 and later), for the transaction of a release that deletes that grant:
 * the marker of an earlier grant, whose delay is in force, stays.
 */
export function clearMarkerOp(marker: string, token: bigint): IRequestOp {
  return {
    request_txn: {
      compare: [
        {
          key: Buffer.from(marker),
          target: 'Value',
          result: 'Equal',
          value: Buffer.from(String(token)),
        },
      ],
      success: [{ request_delete_range: { key: Buffer.from(marker) } }],
      failure: [],
    },
  };
}

/** A compare that holds while the marker key `marker` does not exist. */
export function markerAbsent(marker: string): ICompare {
  return { key: Buffer.from(marker), target: 'Create', result: 'Equal', create_revision: '0' };
}
