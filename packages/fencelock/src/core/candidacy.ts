/**
 * The checks of a leader-election campaign that need no engine: the candidate's value, and a
 * store that runs elections (`capabilities.election`).
 */
import { InvalidArgumentError } from '../errors.js';
import { LONE_SURROGATE } from '../options.js';
import type { Backend } from './backend.js';
import type { Lease, LeaseContext, LeaseGrant } from './lease.js';

/**
 * Largest value a candidate may publish, in UTF-8 bytes (64 KiB): it is stored with the grant
 * on every engine and read by every observer at each change, so it is meant for an address or
 * a small document, not a payload.
 */
export const MAX_ELECTION_VALUE_BYTES = 65_536;

const RULE = `a well-formed string without U+0000 of at most ${MAX_ELECTION_VALUE_BYTES} UTF-8 bytes`;

/**
 * Check a candidate's value: a well-formed string (no lone surrogate, which UTF-8 cannot carry)
 * without U+0000 (PostgreSQL text cannot hold it) of at most `MAX_ELECTION_VALUE_BYTES` bytes.
 * Linear in the value's length; a string too long to fit is refused by its length first.
 * @throws InvalidArgumentError naming `argument` and that rule.
 */
export function validateElectionValue(value: unknown, argument = 'value'): string {
  if (
    typeof value !== 'string' ||
    // Each UTF-16 unit takes at least one UTF-8 byte: a longer string cannot fit.
    value.length > MAX_ELECTION_VALUE_BYTES ||
    LONE_SURROGATE.test(value) ||
    value.includes('\0') ||
    Buffer.byteLength(value, 'utf8') > MAX_ELECTION_VALUE_BYTES
  ) {
    throw new InvalidArgumentError(argument, RULE, value);
  }
  return value;
}

/**
 * Check that `backend` runs leader elections.
 * @throws InvalidArgumentError naming the store.
 */
export function assertElectionGranted(backend: Backend): void {
  if (!backend.capabilities.election) {
    throw new InvalidArgumentError(
      'store',
      `a store with leader elections (the ${backend.name} store has none)`,
      backend.name,
    );
  }
}

/**
 * What makes a handle a candidate of a leader election (`locker.election`): the value it
 * campaigns with, and the lease its grant becomes (a leadership, made by the election module).
 */
export interface Candidacy {
  readonly value: string;
  /** The lease of a grant; absent for owner-addressed campaigns, which make no lease. */
  readonly lease?: (ctx: LeaseContext, grant: LeaseGrant) => Lease;
}
