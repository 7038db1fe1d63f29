/**
 * Node names of the ZooKeeper layout, over plain data: a user key as one node name (the lock's
 * and the semaphore's node of the key, `/<namespace>/locks/<name>` and
 * `/<namespace>/semaphores/<name>`), and a lock's line as the contender node names under it.
 */
import type { QueueEntry } from '../../core/predecessor.js';

/**
 * A lock contender node name: `_c_<owner>-<w|r>-<10-digit sequence>`, the owner id being 32 to
 * 128 hex digits (`validateOwnerId`). Only names of this shape are contenders: any other child of
 * a key's node (written by someone else) is ignored by the predecessor rule, `inspect` and `list`.
 */
const NODE_NAME = /^_c_([0-9a-f]{32,128})-([wr])-(\d{10})$/;

/** A lock contender node as an entry of the key's line; its order is the node's sequence number. */
export interface Entry extends QueueEntry {
  readonly name: string;
}

/**
 * `key` as one node name: `encodeURIComponent`, and every dot encoded too (`%2E`), since node
 * names cannot be `.` or `..`. The encoding goes code point by code point into a prefix-free
 * code, so a key starts with a prefix exactly when its node name starts with the prefix's node
 * name (keys and prefixes have no lone surrogates, `validateKey`).
 */
export function nodeNameOf(key: string): string {
  return encodeURIComponent(key).replaceAll('.', '%2E');
}

/**
 * The key whose node name is `name`, or undefined when no key is named so (a node someone else
 * made: not a well-formed encoding, or not `nodeNameOf`'s own spelling of its key).
 */
export function keyOfNodeName(name: string): string | undefined {
  if (name === '') return undefined;
  let key: string;
  try {
    key = decodeURIComponent(name);
  } catch {
    return undefined;
  }
  return nodeNameOf(key) === name ? key : undefined;
}

/** Lock contender entries among `names`, lowest sequence first (other names are ignored). */
export function parseChildren(names: readonly string[]): Entry[] {
  const entries: Entry[] = [];
  for (const name of names) {
    const m = NODE_NAME.exec(name);
    if (m === null) continue;
    entries.push({
      name,
      owner: m[1]!,
      mode: m[2] === 'w' ? 'write' : 'read',
      order: BigInt(m[3]!),
    });
  }
  return entries.sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0));
}
