/**
 * The names and values of the keys the etcd backend writes for a semaphore's contenders, and the
 * test that tells them from any other key under a semaphore's folder. A permit contender key is
 * `<dir>p-<lease hex>-<owner>`: `dir` is the semaphore's folder
 * (`<namespace>/semaphores/<key, percent-encoded>/`, apart from the lock of the same key), then
 * the etcd lease it was first put under (an int64, in hex) and its owner id (32 to 128 lowercase
 * hex digits, see `validateOwnerId` in options.ts). Its value is the permit count the contender
 * uses, in decimal (`1` to `MAX_PERMITS`), so that a contender with another count can be refused.
 *
 * Only such keys, bound to a lease and holding a count, take part in a semaphore's line: a key
 * someone else put under the folder never blocks, holds or answers for a permit.
 */
import type { IKeyValue } from 'etcd3';
import { MAX_PERMITS } from '../../core/permits.js';

/** A permit contender key's name within its semaphore's folder. */
const PERMIT_NAME = /^p-[0-9a-f]{1,16}-([0-9a-f]{32,128})$/;

/** A permit count as a key's value: a decimal integer without leading zeros. */
const PERMIT_COUNT = /^[1-9][0-9]{0,4}$/;

/** A permit contender key of this backend, as an entry of its semaphore's line. */
export interface PermitContender {
  /** The full etcd key. */
  readonly key: string;
  readonly owner: string;
  /** Place in line: the key's create revision (and the permit's fencing token once granted). */
  readonly order: bigint;
  /** The permit count this contender uses (the key's value). */
  readonly permits: number;
  /**
   * The key was written since it was created (its mod revision is not its create revision): its
   * grant was announced (touched) or it moved to another lease, which happens only once it holds
   * a permit, and wakes the waiter behind it.
   */
  readonly announced: boolean;
}

/** The key of `owner`'s contender for the semaphore whose folder is `dir`. */
export function permitContenderKey(dir: string, leaseHex: string, owner: string): string {
  return `${dir}p-${leaseHex}-${owner}`;
}

/** The value a contender key carries for `permits`. */
export function permitCountValue(permits: number): string {
  return String(permits);
}

/**
 * `kv` (a key under `dir`, from a range read with values) as a contender of the semaphore, or
 * undefined when it is not one: its name has another shape (a nested folder included), it is bound
 * to no lease (etcd's lease 0), or its value is not a permit count.
 */
export function permitContenderOf(kv: IKeyValue, dir: string): PermitContender | undefined {
  const key = kv.key.toString();
  if (!key.startsWith(dir) || kv.lease === '0') return undefined;
  const name = PERMIT_NAME.exec(key.slice(dir.length));
  if (name === null) return undefined;
  const value = kv.value.toString();
  if (!PERMIT_COUNT.test(value) || Number(value) > MAX_PERMITS) return undefined;
  return {
    key,
    owner: name[1]!,
    order: BigInt(kv.create_revision),
    permits: Number(value),
    announced: kv.mod_revision !== kv.create_revision,
  };
}

/** The permit contenders among `kvs` (keys under `dir`, with values), in the order given. */
export function permitContendersOf(kvs: readonly IKeyValue[], dir: string): PermitContender[] {
  const entries: PermitContender[] = [];
  for (const kv of kvs) {
    const entry = permitContenderOf(kv, dir);
    if (entry !== undefined) entries.push(entry);
  }
  return entries;
}
