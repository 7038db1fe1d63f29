/**
 * The recount of an election's candidates on a stream of its leader changes
 * (packages/cli/src/server/candidate-recount.ts): a new count of the leader last sent is sent; a
 * read of another leader, the same count, a failed read, and anything after stop are not.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { recountCandidates } from '../../packages/cli/src/server/candidate-recount.js';
import type { LeaderAnswer } from '../../packages/cli/src/server/election-operations.js';

const EVERY_MS = 1_000;

function answer(term: string, candidates: number, value = 'v', ownerId = 'owner-a'): LeaderAnswer {
  return { name: 'e', leader: { ownerId, term, value, ttlMs: 5_000, candidates } };
}

describe('recountCandidates', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  /** A recount whose reads answer `reads` in turn, after `lastSent` was sent. */
  function recounting(lastSent: LeaderAnswer, reads: (LeaderAnswer | Error)[]) {
    const sent: LeaderAnswer[] = [];
    let last = lastSent;
    const read = vi.fn(async () => {
      const next = reads.shift() ?? last;
      if (next instanceof Error) throw next;
      return next;
    });
    const stop = recountCandidates(
      read,
      () => last,
      (a) => {
        last = a;
        sent.push(a);
      },
      EVERY_MS,
    );
    return { sent, read, stop };
  }

  it('sends a new count of the leader last sent, once per change', async () => {
    const { sent, read, stop } = recounting(answer('7', 1), [answer('7', 3), answer('7', 3)]);
    await vi.advanceTimersByTimeAsync(EVERY_MS - 1);
    expect(read).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(1);
    expect(sent).toEqual([answer('7', 3)]);
    await vi.advanceTimersByTimeAsync(EVERY_MS);
    expect(read).toHaveBeenCalledTimes(2);
    expect(sent).toEqual([answer('7', 3)]);
    stop();
  });

  it('leaves another leader, term or value, nobody, and a failed read to the leader changes', async () => {
    const { sent, read, stop } = recounting(answer('7', 1), [
      answer('6', 2),
      answer('8', 2),
      answer('7', 2, 'proclaimed'),
      answer('7', 2, 'v', 'owner-b'),
      { name: 'e', leader: null },
      new Error('engine down'),
    ]);
    await vi.advanceTimersByTimeAsync(6 * EVERY_MS);
    expect(read).toHaveBeenCalledTimes(6);
    expect(sent).toEqual([]);
    stop();
  });

  it('neither reads nor sends after stop, a read under way included', async () => {
    let answerRead: (a: LeaderAnswer) => void = () => {};
    const sent: LeaderAnswer[] = [];
    const read = vi.fn(() => new Promise<LeaderAnswer>((resolve) => (answerRead = resolve)));
    const stop = recountCandidates(
      read,
      () => answer('7', 1),
      (a) => sent.push(a),
      EVERY_MS,
    );
    await vi.advanceTimersByTimeAsync(EVERY_MS);
    expect(read).toHaveBeenCalledTimes(1);
    stop();
    answerRead(answer('7', 4));
    await vi.advanceTimersByTimeAsync(10 * EVERY_MS);
    expect(sent).toEqual([]);
    expect(read).toHaveBeenCalledTimes(1);
    expect(vi.getTimerCount()).toBe(0);
  });
});
