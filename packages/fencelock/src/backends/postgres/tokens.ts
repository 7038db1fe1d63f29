/** Fencing tokens as statement parameters. */

/** Largest value of a PostgreSQL bigint. */
const MAX_INT8 = (1n << 63n) - 1n;

/**
 * A token as a bigint parameter. No lease or permit here has a token beyond a bigint (they come
 * from a bigint sequence), so such a token is sent as -1, which matches none: the statement then
 * answers `not-owner` or `not-held` instead of failing with "bigint out of range".
 */
export function tokenParameter(token: bigint): string {
  return token > MAX_INT8 ? '-1' : token.toString();
}
