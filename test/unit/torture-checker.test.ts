/**
 * The torture checker on synthetic histories, including the broken ones it exists to catch: a
 * stale write the register accepted, two clients believing they hold the lock at once, tokens
 * that go back or repeat, and the liveness and loss-detection figures.
 */
import { describe, expect, it } from 'vitest';
import { type ClientEvent, checkRun, percentile } from '../../tools/torture/src/checker.js';
import type { WriteRecord } from '../../tools/torture/src/register.js';

const acquired = (at: number, client: string, token: bigint, remainingMs = 1_000): ClientEvent => ({
  at,
  client,
  type: 'acquired',
  token,
  remainingMs,
});
const releasing = (at: number, client: string): ClientEvent => ({ at, client, type: 'releasing' });
const lost = (at: number, client: string): ClientEvent => ({
  at,
  client,
  type: 'lost',
  reason: 'expired',
});
const write = (seq: number, writer: string, token: bigint, accepted: boolean): WriteRecord => ({
  seq,
  writer,
  token,
  accepted,
});

describe('torture checker', () => {
  it('a clean history: no overlap, no stale write, tokens strictly increasing', () => {
    const events = [
      acquired(0, 'a', 1n),
      releasing(100, 'a'),
      acquired(110, 'b', 2n),
      releasing(200, 'b'),
    ];
    const verdict = checkRun(events, [write(1, 'a', 1n, true), write(2, 'b', 2n, true)], 2n, []);
    expect(verdict).toMatchObject({
      grants: 2,
      writes: 2,
      staleAccepted: 0,
      staleRejected: 0,
      lostIncrements: 0,
      believedOverlaps: 0,
      rawOverlaps: 0,
      tokenRegressions: 0,
      tokenDuplicates: 0,
    });
  });

  it('recomputes stale acceptance from the log, whatever the register claimed', () => {
    const writes = [write(1, 'b', 5n, true), write(2, 'a', 4n, true), write(3, 'a', 4n, false)];
    const verdict = checkRun([], writes, 2n, []);
    expect(verdict.staleAccepted).toBe(1);
    expect(verdict.staleRejected).toBe(1);
    expect(verdict.lostIncrements).toBe(0);
    // The register's value disagrees with the accepted count: updates were lost.
    expect(checkRun([], writes, 1n, []).lostIncrements).toBe(-1);
  });

  it('counts a write under a token another client already wrote with as stale (a repeated token)', () => {
    // b was given a's token again (e.g. a Redlock node restarted empty); the register accepts
    // b's writes (token not lower): both are stale, a's own later write is not.
    const writes = [
      write(1, 'a', 7n, true),
      write(2, 'b', 7n, true),
      write(3, 'b', 7n, true),
      write(4, 'a', 7n, true),
    ];
    expect(checkRun([], writes, 4n, []).staleAccepted).toBe(2);
    // One holder writing several times under its token is not stale.
    const own = [write(1, 'a', 7n, true), write(2, 'a', 7n, true), write(3, 'b', 8n, true)];
    expect(checkRun([], own, 3n, []).staleAccepted).toBe(0);
  });

  it("ends a killed holder's belief at its death (no double grant from a dead process)", () => {
    // a is killed at 100 (its validity would run to 1000); the engine frees the key at once (a
    // PostgreSQL advisory lock goes with the connection) and b is granted at 110.
    const events = [acquired(0, 'a', 1n), acquired(110, 'b', 2n), releasing(200, 'b')];
    const kill = { at: 100, endedAt: 100, target: 'a', killed: true };
    expect(checkRun(events, [], 0n, [kill]).believedOverlaps).toBe(0);
    // Without the kill mark, the same history is a double grant: a still believed at 110.
    const { killed: _, ...unmarked } = kill;
    expect(checkRun(events, [], 0n, [unmarked]).believedOverlaps).toBe(1);
  });

  it('counts believed overlaps only while both believed; raw overlaps as long as the code ran', () => {
    // a is paused after its grant: its validity (1 s) runs out at 1000; b is granted at 1500;
    // a resumes and starts its release at 3000.
    const paused = [
      acquired(0, 'a', 1n),
      acquired(1_500, 'b', 2n),
      releasing(1_600, 'b'),
      releasing(3_000, 'a'),
    ];
    const verdict = checkRun(paused, [], 0n, []);
    expect(verdict.believedOverlaps).toBe(0);
    expect(verdict.rawOverlaps).toBe(1);
    // b granted at 500 while a still believes (its validity runs to 1000): a double grant.
    const double = [
      acquired(0, 'a', 1n),
      acquired(500, 'b', 2n),
      releasing(600, 'b'),
      releasing(900, 'a'),
    ];
    expect(checkRun(double, [], 0n, []).believedOverlaps).toBe(1);
    // A renewal report extends the belief; a loss report ends it.
    const renewed = [
      acquired(0, 'a', 1n),
      { at: 900, client: 'a', type: 'validity', remainingMs: 1_000 } as const,
      acquired(1_500, 'b', 2n),
      lost(1_700, 'a'),
      releasing(1_800, 'b'),
    ];
    expect(checkRun(renewed, [], 0n, []).believedOverlaps).toBe(1);
    const lostFirst = [
      acquired(0, 'a', 1n),
      lost(400, 'a'),
      acquired(500, 'b', 2n),
      releasing(600, 'b'),
    ];
    expect(checkRun(lostFirst, [], 0n, []).believedOverlaps).toBe(0);
  });

  it('flags token regressions and duplicates in grant order', () => {
    const events = [
      acquired(0, 'a', 5n),
      releasing(10, 'a'),
      acquired(20, 'b', 5n),
      releasing(30, 'b'),
      acquired(40, 'c', 3n),
      releasing(50, 'c'),
      acquired(60, 'a', 6n),
    ];
    const verdict = checkRun(events, [], 0n, []);
    expect(verdict.tokenDuplicates).toBe(1);
    expect(verdict.tokenRegressions).toBe(1);
  });

  it('measures the gap to the next grant to another client, and how long the loss took to notice', () => {
    const events = [
      acquired(0, 'a', 1n),
      acquired(1_200, 'b', 2n),
      releasing(1_300, 'b'),
      lost(3_100, 'a'),
      releasing(3_200, 'a'),
    ];
    // a paused from 100 to 3000: its loss counts from its resume, not from b's grant.
    const verdict = checkRun(events, [], 0n, [
      { at: 100, endedAt: 3_000, target: 'a', paused: true },
    ]);
    expect(verdict.livenessMs).toEqual([1_100]);
    expect(verdict.lossDetectionMs).toEqual([100]);
    const cut = checkRun(events, [], 0n, [{ at: 100, endedAt: 3_000, target: 'a' }]);
    expect(cut.lossDetectionMs).toEqual([1_900]);
  });

  it('percentile by nearest rank', () => {
    expect(percentile([], 50)).toBeUndefined();
    expect(percentile([3, 1, 2], 50)).toBe(2);
    expect(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 99)).toBe(10);
    expect(percentile([1, 2, 3, 4], 25)).toBe(1);
  });
});
