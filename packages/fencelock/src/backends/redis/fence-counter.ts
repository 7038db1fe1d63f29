/**
 * The lifetime of a key's fence counter (`<prefix>:{<key>}:fence`: the last fencing token issued
 * for the key), shared by the Redis and Redlock scripts.
 *
 * Tokens are seeded from the server's clock, in the granting script: on Redis a grant's token is
 * the larger of the counter + 1 and the clock in microseconds (`TIME`); on a Redlock node it is
 * the counter + 1 while the counter lives, the clock (whole ms, in µs) where it is gone. A counter
 * counts up by one per grant from a clock reading, and grants of one key are further apart than
 * a microsecond, so soon after a grant the clock alone is past every token issued for the key:
 * the counter is needed only near the grant (and on Redlock, to let the nodes of a quorum agree
 * on a key in use without a second round). It is kept for the lease's TTL and `FENCE_GRACE_MS` more, a margin for a server
 * clock set back by less than that, and on Redlock for the offset between the nodes' clocks (a
 * node's counter is raised to a token another node's clock gave). After that the key leaves
 * nothing behind on the server; tokens still rise, as long as no server clock steps back by
 * more than the margin.
 */

/** How long a fence counter outlives the TTL of the lease that last set it, ms. */
export const FENCE_GRACE_MS = 5_000;

/** The fence counter's expiry for a grant of `ttlMs`, ms from the grant. */
export function fenceTtlMs(ttlMs: number): number {
  return ttlMs + FENCE_GRACE_MS;
}
