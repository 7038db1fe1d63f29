/**
 * What the fencing guards share: the shape of a fenced register's record and the checks of a
 * guard's arguments (run before any network call).
 */
import { InvalidArgumentError } from '../errors.js';

/** A fenced resource's last accepted write. */
export interface FencedValue {
  /** Fencing token of the write. */
  readonly token: bigint;
  /** Value it wrote. */
  readonly value: string;
}

/**
 * Check a fencing token: a bigint in [0, `max`].
 * @throws InvalidArgumentError
 */
export function checkToken(token: unknown, max?: bigint): bigint {
  if (typeof token !== 'bigint' || token < 0n || (max !== undefined && token > max)) {
    const range = max === undefined ? 'a bigint ≥ 0' : `a bigint in [0, ${max}]`;
    throw new InvalidArgumentError('token', `a fencing token (${range})`, token);
  }
  return token;
}
