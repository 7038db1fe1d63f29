/**
 * The line rule of a semaphore on etcd, over plain data: every contender has an entry in the
 * semaphore's line, ordered by its key's create revision. A contender with fewer than `permits`
 * entries ahead of it holds a permit (so grants follow arrival order: whoever holds one, every
 * older contender holds one too). The others wait without a herd:
 *
 * - the first waiter (exactly `permits` entries ahead, all of them holders) waits for the deletion
 *   of any one of those holders: one of its permits is then free for it;
 * - every later waiter waits on its predecessor (the newest entry ahead of it, itself a waiter)
 *   only: for its deletion, or for a write to its key, which announces that the predecessor now
 *   holds a permit (`grantsToAnnounce`); the later waiter then holds one too, or is first waiter.
 *
 * This is the predecessor rule of etcd's concurrency package (`Mutex` waits for the deletion of
 * the newest older key) and of Curator's recipes, widened to `permits` holders.
 */

/** One contender's entry in a semaphore's line. */
export interface PermitLineEntry {
  /** Place in line given by the engine (etcd's create revision): lower is earlier; unique. */
  readonly order: bigint;
}

/** What the line says to a contender. */
export type PermitVerdict<E extends PermitLineEntry> =
  | { readonly outcome: 'granted' }
  /** Not yet, and first in line: wait until any of `holders` (every entry ahead) is gone. */
  | { readonly outcome: 'first-waiter'; readonly holders: readonly E[] }
  /** Not yet, behind another waiter: wait until `predecessor`'s entry is deleted or written. */
  | { readonly outcome: 'later-waiter'; readonly predecessor: E };

/**
 * The verdict of the line `entries` (in any order; `mine` may be among them) on the contender at
 * `mine` when the semaphore has `permits` permits (an integer >= 1).
 */
export function permitVerdict<E extends PermitLineEntry>(
  entries: readonly E[],
  mine: bigint,
  permits: number,
): PermitVerdict<E> {
  const ahead = entries.filter((entry) => entry.order < mine);
  if (ahead.length < permits) return { outcome: 'granted' };
  if (ahead.length === permits) return { outcome: 'first-waiter', holders: ahead };
  let predecessor = ahead[0]!;
  for (const entry of ahead) if (entry.order > predecessor.order) predecessor = entry;
  return { outcome: 'later-waiter', predecessor };
}

/** Whether any entry of `entries` is behind the contender at `mine` (it may be waiting on it). */
export function hasSuccessor(entries: readonly PermitLineEntry[], mine: bigint): boolean {
  return entries.some((entry) => entry.order > mine);
}

/**
 * The grants a contender that held a permit after waiting announces, read from the line
 * `entries`: its own entry and every later entry the line shows holding a permit too (several
 * permits freed at once), each one that has an entry behind it (a later waiter may be waiting on
 * it) and was not `announced` before. A write to each wakes the waiter behind it, so that all the
 * waiters those permits let in wake at once rather than one after the other.
 */
export function grantsToAnnounce<E extends PermitLineEntry & { readonly announced: boolean }>(
  entries: readonly E[],
  mine: bigint,
  permits: number,
): E[] {
  const line = [...entries].sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0));
  const holders = Math.min(permits, line.length - 1);
  return line.slice(0, holders).filter((entry) => entry.order >= mine && !entry.announced);
}
