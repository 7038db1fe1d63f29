import { describe, expect, it } from 'vitest';
import type { LockMode } from '../../packages/fencelock/src/core/backend.js';
import { type QueueEntry, queueVerdict } from '../../packages/fencelock/src/core/predecessor.js';

/** An entry of owner `owner` (also its name in the assertions) at `order`. */
function entry(owner: string, mode: LockMode, order: number): QueueEntry {
  return { owner, mode, order: BigInt(order) };
}

/** The owner of the predecessor, `granted`, or `downgrade-blocked by <owner>`. */
function verdictOf(entries: readonly QueueEntry[], mine: QueueEntry, heldWriter?: string): string {
  const verdict = queueVerdict(entries, mine, heldWriter);
  if (verdict.outcome === 'granted') return 'granted';
  if (verdict.outcome === 'wait') return verdict.predecessor.owner;
  return `downgrade-blocked by ${verdict.blocker.owner}`;
}

describe('queueVerdict: writers', () => {
  it('grants the first entry, alone or ahead of others', () => {
    const w1 = entry('w1', 'write', 10);
    expect(verdictOf([w1], w1)).toBe('granted');
    expect(verdictOf([w1, entry('w2', 'write', 11), entry('r3', 'read', 12)], w1)).toBe('granted');
  });

  it('waits on the nearest entry ahead, reader or writer, never on one behind', () => {
    const line = [
      entry('w1', 'write', 10),
      entry('r2', 'read', 20),
      entry('w3', 'write', 30),
      entry('w4', 'write', 40),
    ];
    expect(verdictOf(line, line[1]!)).toBe('w1');
    expect(verdictOf(line, line[2]!)).toBe('r2');
    expect(verdictOf(line, line[3]!)).toBe('w3');
    // A writer waits on a reader ahead of it as on a writer.
    expect(
      verdictOf([entry('r1', 'read', 1), entry('w2', 'write', 2)], entry('w2', 'write', 2)),
    ).toBe('r1');
  });

  it('reads the line in any order, and orders beyond 2^53 exactly (etcd revisions are int64)', () => {
    const big = 2n ** 60n;
    const line: QueueEntry[] = [
      { owner: 'c', mode: 'write', order: big + 2n },
      { owner: 'a', mode: 'write', order: big },
      { owner: 'd', mode: 'write', order: big + 3n },
      { owner: 'b', mode: 'write', order: big + 1n },
    ];
    expect(verdictOf(line, line[2]!)).toBe('c');
    expect(verdictOf(line, line[0]!)).toBe('b');
    expect(verdictOf(line, line[3]!)).toBe('a');
    expect(verdictOf(line, line[1]!)).toBe('granted');
  });

  it('does not need its own entry in the list', () => {
    expect(verdictOf([entry('w1', 'write', 1)], entry('me', 'write', 2))).toBe('w1');
    expect(verdictOf([], entry('me', 'write', 2))).toBe('granted');
  });
});

describe('queueVerdict: readers', () => {
  it('share with earlier readers and wait only on the nearest earlier writer', () => {
    const line = [
      entry('r1', 'read', 1),
      entry('w2', 'write', 2),
      entry('r3', 'read', 3),
      entry('r4', 'read', 4),
      entry('w5', 'write', 5),
      entry('r6', 'read', 6),
    ];
    expect(verdictOf(line, line[0]!)).toBe('granted');
    expect(verdictOf(line, line[2]!)).toBe('w2');
    // Not r3 (a reader): the writer ahead of both.
    expect(verdictOf(line, line[3]!)).toBe('w2');
    expect(verdictOf(line, line[5]!)).toBe('w5');
    expect(
      verdictOf([entry('r1', 'read', 1), entry('r2', 'read', 2)], entry('r3', 'read', 3)),
    ).toBe('granted');
  });
});

describe('queueVerdict: downgrade (a read inside the caller’s write lock)', () => {
  it("passes the caller's own write entry", () => {
    const line = [entry('w1', 'write', 1), entry('r2', 'read', 2)];
    expect(verdictOf(line, line[1]!, 'w1')).toBe('granted');
    // Without heldWriter the same reader waits on that writer.
    expect(verdictOf(line, line[1]!)).toBe('w1');
  });

  it('passes earlier readers too', () => {
    const line = [entry('r0', 'read', 0), entry('w1', 'write', 1), entry('r2', 'read', 2)];
    expect(verdictOf(line, line[2]!, 'w1')).toBe('granted');
  });

  it('is blocked, not told to wait, by another writer ahead of it', () => {
    // Another writer queued behind the held write lock (ahead of the downgrade's entry).
    const line = [entry('w1', 'write', 1), entry('w2', 'write', 2), entry('r3', 'read', 3)];
    expect(verdictOf(line, line[2]!, 'w1')).toBe('downgrade-blocked by w2');
    // A writer ahead of the held one blocks it the same way.
    const before = [entry('w0', 'write', 0), entry('w1', 'write', 1), entry('r3', 'read', 3)];
    expect(verdictOf(before, before[2]!, 'w1')).toBe('downgrade-blocked by w0');
  });

  it('ignores writers behind it', () => {
    const line = [entry('w1', 'write', 1), entry('r2', 'read', 2), entry('w3', 'write', 3)];
    expect(verdictOf(line, line[1]!, 'w1')).toBe('granted');
  });
});
