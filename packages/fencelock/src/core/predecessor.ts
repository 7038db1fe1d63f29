/**
 * The predecessor rule of queue-based locks (etcd, ZooKeeper), over plain data: every contender
 * has an entry in the key's line, ordered by the engine (etcd's create revision, ZooKeeper's
 * sequence number). A writer holds the lock when no entry is ahead of its own; a reader when no
 * writer's entry is. A contender that does not hold it waits on its predecessor only — the
 * nearest entry ahead that blocks it — so a release wakes one waiter (no herd). This is the rule
 * of Apache Curator's lock recipes (`InterProcessMutex`, `InterProcessReadWriteLock`: a reader
 * waits for earlier writers only) and of etcd's concurrency package (`Mutex`: wait for the
 * deletion of the newest older key).
 *
 * A downgrade (a read asked for inside the caller's write lock of the key, `heldWriter`) passes
 * that writer's entry; any other blocker then makes it `downgrade-blocked` (see
 * `downgradeBlocked` in `rwlock.ts`), since waiting would never end.
 */
import type { LockMode } from './backend.js';

/** One contender's entry in a key's line. */
export interface QueueEntry {
  /** The contender's owner id. */
  readonly owner: string;
  readonly mode: LockMode;
  /** Place in line given by the engine: lower is earlier; unique within the key. */
  readonly order: bigint;
}

/** What the line says to a contender. */
export type QueueVerdict<E extends QueueEntry> =
  | { readonly outcome: 'granted' }
  /** Not yet: wait until `predecessor`'s entry is gone, then ask again. */
  | { readonly outcome: 'wait'; readonly predecessor: E }
  /** A downgrade found `blocker` ahead of it (another writer): refuse instead of waiting. */
  | { readonly outcome: 'downgrade-blocked'; readonly blocker: E };

/**
 * The verdict of the line `entries` (in any order; `mine` may be among them) on `mine`.
 * @param heldWriter owner of the caller's write lock of the key when `mine` is a downgrade
 *   (a `read` entry); that writer's entry does not block it.
 */
export function queueVerdict<E extends QueueEntry>(
  entries: readonly E[],
  mine: QueueEntry,
  heldWriter?: string,
): QueueVerdict<E> {
  let predecessor: E | undefined;
  for (const entry of entries) {
    if (entry.order >= mine.order) continue;
    const blocks = mine.mode === 'write' || (entry.mode === 'write' && entry.owner !== heldWriter);
    if (blocks && (predecessor === undefined || entry.order > predecessor.order)) {
      predecessor = entry;
    }
  }
  if (predecessor === undefined) return { outcome: 'granted' };
  if (heldWriter !== undefined) return { outcome: 'downgrade-blocked', blocker: predecessor };
  return { outcome: 'wait', predecessor };
}
