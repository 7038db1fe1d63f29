/**
 * etcd key ranges and the compares a transaction makes on them. A compare with a `range_end`
 * (etcd 3.3 and later) holds when it holds for every key in `[key, range_end)`; over a range with
 * no key, etcd compares a key that does not exist (create and mod revisions 0), and a `Value`
 * compare fails (etcd's `applyCompare`).
 */
import type { ICompare } from 'etcd3';

/** The end of the range of all keys that start with `prefix` (etcd's `GetPrefixRangeEnd`). */
export function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i] = end[i]! + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

/** Every key that starts with `prefix`, as the `key` and `range_end` of a request or compare. */
export function prefixRange(prefix: string): { key: Buffer; range_end: Buffer } {
  const key = Buffer.from(prefix);
  return { key, range_end: prefixEnd(key) };
}

/** A compare that holds when no key starts with `prefix`. */
export function noKeyUnder(prefix: string): ICompare {
  return { ...prefixRange(prefix), target: 'Create', result: 'Equal', create_revision: '0' };
}

/**
 * A compare that holds when no key under `prefix` was created or written after `revision` (keys
 * deleted since are not seen): whatever a read of the prefix at `revision` found is still so, but
 * for deletions.
 */
export function unwrittenSince(prefix: string, revision: bigint): ICompare {
  return {
    ...prefixRange(prefix),
    target: 'Mod',
    result: 'Less',
    mod_revision: String(revision + 1n),
  };
}
