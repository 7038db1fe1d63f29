/**
 * An election's count of candidates kept current on a stream of its leader changes. The leader
 * changes (`election.observe`, as etcd's `Observe`) report a new leader, term or value, not a
 * candidate joining or leaving the line, and only some engines' watches fire on those at all
 * (etcd's prefix watch, ZooKeeper's children watch; not Redis pub/sub nor PostgreSQL's
 * notices). So the stream's leader is read again every `everyMs`, and a read that shows the
 * leader last sent with another count is sent as an update.
 */
import type { LeaderAnswer } from './election-operations.js';

/** How often the dashboard reads a followed election's count of candidates again, ms. */
export const CANDIDATES_RECOUNT_MS = 1_000;

/**
 * Read the leader with `read` every `everyMs` (the next read `everyMs` after the last ended, so
 * reads never overlap), and call `send` with a read whose leader is the one `lastSent()` shows
 * (owner id, term and value) with another count of candidates. A read of another leader is left
 * to the leader changes, which report it in order; a read that fails is skipped (the leader
 * changes report the engine's failures).
 * @returns a function that stops the reads (idempotent); `send` is not called after it.
 */
export function recountCandidates(
  read: () => Promise<LeaderAnswer>,
  lastSent: () => LeaderAnswer,
  send: (answer: LeaderAnswer) => void,
  everyMs: number,
): () => void {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const next = () => {
    timer = setTimeout(async () => {
      const answer = await read().catch(() => undefined);
      if (stopped) return;
      if (answer !== undefined && sameLeaderOtherCount(lastSent(), answer)) send(answer);
      next();
    }, everyMs);
  };
  next();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function sameLeaderOtherCount(sent: LeaderAnswer, read: LeaderAnswer): boolean {
  const a = sent.leader;
  const b = read.leader;
  return (
    a !== null &&
    b !== null &&
    a.ownerId === b.ownerId &&
    a.term === b.term &&
    a.value === b.value &&
    a.candidates !== b.candidates
  );
}
