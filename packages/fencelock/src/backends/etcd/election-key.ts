/**
 * The names of the keys the etcd backend writes for the candidates of a leader election, and the
 * test that tells them from any other key under an election's folder. A candidate key is
 * `<dir>c-<lease hex>-<owner>`: `dir` is the election's folder
 * (`<namespace>/elections/<key, percent-encoded>/`, apart from the lock and the semaphore of the
 * same key), then the etcd lease it was first put under (an int64, in hex) and its owner id (32
 * to 128 lowercase hex digits, see `validateOwnerId` in options.ts). Its value is the value the
 * candidate campaigns with, replaced by the leader's proclaims: as etcd's own
 * `concurrency.Election`, whose candidate key `<prefix>/<lease hex>` holds the value too.
 *
 * Only such keys, bound to a lease, take part in an election's line: a key someone else put
 * under the folder never leads, waits or answers for a candidate.
 */
import type { IKeyValue } from 'etcd3';
import type { ContenderEntry } from './contender-key.js';

/** A candidate key's name within its election's folder. */
const CANDIDATE_NAME = /^c-[0-9a-f]{1,16}-([0-9a-f]{32,128})$/;

/** The key of `owner`'s candidate in the election whose folder is `dir`. */
export function candidateKey(dir: string, leaseHex: string, owner: string): string {
  return `${dir}c-${leaseHex}-${owner}`;
}

/**
 * `kv` (a key under `dir`, from a range read with or without values) as a candidate of the
 * election, or undefined when it is not one: its name has another shape (a nested folder
 * included), or it is bound to no lease (etcd's lease 0), which no candidate key of this backend
 * ever is. A candidate is an exclusive contender (`mode: 'write'`): the oldest one leads, and its
 * create revision (`order`) is its term.
 */
export function candidateOf(kv: IKeyValue, dir: string): ContenderEntry | undefined {
  const key = kv.key.toString();
  if (!key.startsWith(dir) || kv.lease === '0') return undefined;
  const name = CANDIDATE_NAME.exec(key.slice(dir.length));
  if (name === null) return undefined;
  return { key, owner: name[1]!, mode: 'write', order: BigInt(kv.create_revision) };
}

/** The candidates among `kvs` (keys under `dir`), in the order given. */
export function candidatesOf(kvs: readonly IKeyValue[], dir: string): ContenderEntry[] {
  const entries: ContenderEntry[] = [];
  for (const kv of kvs) {
    const entry = candidateOf(kv, dir);
    if (entry !== undefined) entries.push(entry);
  }
  return entries;
}
