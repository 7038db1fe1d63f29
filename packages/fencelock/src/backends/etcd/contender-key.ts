/**
 * The names of the keys the etcd backend writes for its contenders, and the test that tells them
 * from any other key under a lock's folder. A contender key is `<dir><w|r>-<lease hex>-<owner>`:
 * `dir` is the lock's folder (`<namespace>/locks/<key, percent-encoded>/`), `w` or `r` its mode,
 * then the etcd lease it was first put under (an int64, in hex) and its owner id (32 to 128
 * lowercase hex digits, see `validateOwnerId` in options.ts).
 *
 * Only such keys, bound to a lease, take part in a lock's line: a key someone else put under the
 * folder (by hand, another tool, an older layout) never blocks, holds or answers for a lock.
 */
import type { IKeyValue } from 'etcd3';
import type { LockMode } from '../../core/backend.js';
import type { QueueEntry } from '../../core/predecessor.js';

/** A contender key's name within its lock's folder. */
const CONTENDER_NAME = /^([wr])-[0-9a-f]{1,16}-([0-9a-f]{32,128})$/;

/** A contender key of this backend, as an entry of its lock's line. */
export interface ContenderEntry extends QueueEntry {
  /** The full etcd key. */
  readonly key: string;
}

/** The key of `owner`'s contender for the lock whose folder is `dir`. */
export function contenderKey(dir: string, mode: LockMode, leaseHex: string, owner: string): string {
  return `${modePrefix(dir, mode)}${leaseHex}-${owner}`;
}

/**
 * The start of the name of every contender key of `mode` in the folder `dir` (`<dir>w-` for the
 * writers). Keys of other shapes may start with it too: a range read or compare over it finds
 * every contender of that mode, and maybe keys that are none.
 */
export function modePrefix(dir: string, mode: LockMode): string {
  return `${dir}${mode === 'read' ? 'r' : 'w'}-`;
}

/**
 * `kv` (a key under `dir`, from a range read with or without values) as a contender of the lock,
 * or undefined when it is not one: its name has another shape (a nested folder included), or it
 * is bound to no lease (etcd's lease 0), which no contender key of this backend ever is.
 */
export function contenderOf(kv: IKeyValue, dir: string): ContenderEntry | undefined {
  const key = kv.key.toString();
  if (!key.startsWith(dir) || kv.lease === '0') return undefined;
  const name = CONTENDER_NAME.exec(key.slice(dir.length));
  if (name === null) return undefined;
  return {
    key,
    owner: name[2]!,
    mode: name[1] === 'r' ? 'read' : 'write',
    order: BigInt(kv.create_revision),
  };
}

/** The contenders among `kvs` (keys under `dir`), in the order given. */
export function contendersOf(kvs: readonly IKeyValue[], dir: string): ContenderEntry[] {
  const entries: ContenderEntry[] = [];
  for (const kv of kvs) {
    const entry = contenderOf(kv, dir);
    if (entry !== undefined) entries.push(entry);
  }
  return entries;
}
