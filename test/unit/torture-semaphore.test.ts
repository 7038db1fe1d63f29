/**
 * The torture checker, matrix and report on semaphore cells: stale writes judged against the N
 * highest tokens, the most holders the register saw inside at once, grants beyond the permits,
 * and skipped cells with their reason.
 */
import { describe, expect, it } from 'vitest';
import { type ClientEvent, checkRun } from '../../tools/torture/src/checker.js';
import { FAULTS } from '../../tools/torture/src/faults.js';
import type { CellRun } from '../../tools/torture/src/harness.js';
import { type MatrixResult, summarize } from '../../tools/torture/src/matrix.js';
import type { WriteRecord } from '../../tools/torture/src/register.js';
import { markdownTable, readmeSummary, semaphoreTable } from '../../tools/torture/src/report.js';

const fault = (id: string) => FAULTS.find((f) => f.id === id)!;
const log = (...writes: [string, bigint, boolean][]): WriteRecord[] =>
  writes.map(([writer, token, accepted], i) => ({ seq: i + 1, writer, token, accepted }));
const acquired = (at: number, client: string, token: bigint, remainingMs = 1_000): ClientEvent => ({
  at,
  client,
  type: 'acquired',
  token,
  remainingMs,
});
const releasing = (at: number, client: string): ClientEvent => ({ at, client, type: 'releasing' });

describe('torture checker, semaphore of N permits', () => {
  it('accepts a token among the N highest written; one with N higher before it is stale', () => {
    // 2 permits: a (1) and b (2) inside; c (3) comes in; a's late write has 2 higher before it.
    const writes = log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['a', 1n, true]);
    expect(checkRun([], writes, 4n, [], 2).staleAccepted).toBe(1);
    // b's write after c's is still among the 2 highest: not stale.
    const fresh = log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['b', 2n, true]);
    expect(checkRun([], fresh, 4n, [], 2).staleAccepted).toBe(0);
    // The same log judged as a lock: b's write after c's is stale.
    expect(checkRun([], fresh, 4n, []).staleAccepted).toBe(1);
    // A token another writer already wrote with is stale whatever the permits.
    expect(checkRun([], log(['a', 5n, true], ['b', 5n, true]), 2n, [], 3).staleAccepted).toBe(1);
  });

  it('counts the most holders inside at once from first to last accepted write', () => {
    const two = log(['a', 1n, true], ['b', 2n, true], ['a', 1n, true], ['b', 2n, true]);
    expect(checkRun([], two, 4n, [], 2).maxInside).toBe(2);
    // Three overlapping holders: more than 2 permits allow.
    const three = log(
      ['a', 1n, true],
      ['b', 2n, true],
      ['c', 3n, true],
      ['a', 1n, true],
      ['b', 2n, true],
      ['c', 3n, true],
    );
    expect(checkRun([], three, 6n, [], 2).maxInside).toBe(3);
    // Rejected writes do not make a holder inside; one write each never overlaps.
    const rejected = log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['a', 1n, false]);
    expect(checkRun([], rejected, 3n, [], 2).maxInside).toBe(1);
  });

  it('counts grants beyond the permits believed at once, not every overlap', () => {
    const events = [
      acquired(0, 'a', 1n),
      acquired(10, 'b', 2n),
      releasing(100, 'a'),
      acquired(110, 'c', 3n),
      releasing(200, 'b'),
      releasing(210, 'c'),
    ];
    expect(checkRun(events, [], 0n, [], 2).believedOverlaps).toBe(0);
    // As a lock, a and b overlap, and b and c.
    expect(checkRun(events, [], 0n, []).believedOverlaps).toBe(2);
    // c granted while a and b still believe: one grant beyond 2 permits.
    const over = [acquired(0, 'a', 1n), acquired(10, 'b', 2n), acquired(20, 'c', 3n)];
    expect(checkRun(over, [], 0n, [], 2).believedOverlaps).toBe(1);
  });

  it('counts writes made after the writer’s own grant lapsed, accepted and rejected', () => {
    const written = (at: number, client: string, accepted: boolean): ClientEvent => ({
      at,
      client,
      type: 'written',
      accepted,
      knewLost: false,
    });
    // a's validity runs to 1000: rejected at 500 (outrun by later holders, still valid), then
    // accepted and rejected after it lapsed.
    const events = [
      acquired(0, 'a', 1n),
      written(500, 'a', false),
      written(1_500, 'a', true),
      written(1_600, 'a', false),
      releasing(1_700, 'a'),
    ];
    const verdict = checkRun(events, log(['a', 1n, true]), 1n, [], 2);
    expect([verdict.lapsedWritesAccepted, verdict.lapsedWritesRejected]).toEqual([1, 1]);
  });

  it('counts the most holders writing at once, accepted or not', () => {
    // c lapsed but keeps writing: 3 holders write at once, the register kept 2 inside.
    const writes = log(
      ['a', 1n, true],
      ['b', 2n, true],
      ['c', 3n, true],
      ['a', 1n, false],
      ['b', 2n, true],
      ['c', 3n, true],
    );
    const verdict = checkRun([], writes, 5n, [], 2);
    expect([verdict.maxInside, verdict.maxWriting]).toEqual([2, 3]);
  });

  it('measures liveness until the others hold every permit again', () => {
    // a is killed at 100 holding one of 2 permits; b cycles alone; c joins b at 1_200.
    const events = [
      acquired(0, 'a', 1n),
      acquired(150, 'b', 2n),
      releasing(300, 'b'),
      acquired(400, 'b', 3n),
      acquired(1_200, 'c', 4n),
      releasing(1_300, 'b'),
      releasing(1_300, 'c'),
    ];
    const kill = { at: 100, endedAt: 100, target: 'a', killed: true };
    expect(checkRun(events, [], 0n, [kill], 2).livenessMs).toEqual([1_100]);
    // As a lock: the next grant to another client.
    expect(checkRun(events, [], 0n, [kill]).livenessMs).toEqual([50]);
  });

  it('orders tokens by when grants were asked for and returned, not by receipt', () => {
    const asking = (at: number, client: string): ClientEvent => ({ at, client, type: 'acquiring' });
    // a and b ask at 0; b's grant (token 1) returns first but reaches the harness after a's (2).
    const raced = [
      asking(0, 'a'),
      asking(0, 'b'),
      { ...acquired(12, 'a', 2n), grantedAt: 11 },
      { ...acquired(13, 'b', 1n), grantedAt: 10 },
    ];
    expect(checkRun(raced, [], 0n, [], 2).tokenRegressions).toBe(0);
    // The same receipt order is a regression for a lock.
    expect(checkRun(raced, [], 0n, []).tokenRegressions).toBe(1);
    // c asked at 20, after a's grant (token 2) returned, and got a lower token: a regression.
    const late = [...raced, asking(20, 'c'), { ...acquired(30, 'c', 1n), grantedAt: 29 }];
    const verdict = checkRun(late, [], 0n, [], 2);
    expect([verdict.tokenRegressions, verdict.tokenDuplicates]).toEqual([1, 1]);
  });
});

/** A run of one grant to a, and the register's log `writes`. */
function semaphoreRun(writes: WriteRecord[], skipped?: string): CellRun {
  const accepted = BigInt(writes.filter((w) => w.accepted).length);
  const events = [acquired(0, 'a', 1n), releasing(3_000, 'a')];
  return {
    backend: 'redis',
    fault: 'F2',
    fenced: true,
    permits: 2,
    verdict: checkRun(skipped === undefined ? events : [], writes, accepted, [], 2),
    faults: [],
    clientErrors: [],
    durationMs: 1_000,
    ...(skipped === undefined ? {} : { skipped }),
  };
}

describe('torture matrix and report, semaphore cells', () => {
  it('fails a cell with more holders inside than permits; not exercised unless more wrote', () => {
    // a lapsed (3 writing at once), the register kept 2 inside: the fault bit, the cell passes.
    const bit = semaphoreRun(
      log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['a', 1n, false], ['b', 2n, true]),
    );
    const ok = summarize('redis', fault('F2'), 1_000, [bit], 2);
    expect([ok.primitive, ok.permits, ok.maxInside, ok.maxWriting, ok.verdict]).toEqual([
      'semaphore',
      2,
      2,
      3,
      'pass',
    ]);
    // A valid holder outrun (rejected) while never more than 2 wrote at once, and no write after
    // a lapse: not exercised.
    const outrun = semaphoreRun(
      log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['a', 1n, false]),
    );
    expect(summarize('redis', fault('F2'), 1_000, [outrun], 2).verdict).toBe('not exercised');
    // A lapsed holder's write refused: the fault bit.
    const refused: CellRun = {
      ...outrun,
      verdict: { ...outrun.verdict, lapsedWritesRejected: 1 },
    };
    expect(summarize('redis', fault('F2'), 1_000, [refused], 2).verdict).toBe('pass');
    const three = semaphoreRun(
      log(['a', 1n, true], ['b', 2n, true], ['c', 3n, true], ['a', 1n, true], ['b', 2n, true]),
    );
    const bad = summarize('redis', fault('F2'), 1_000, [three], 2);
    expect(bad.verdict).toBe('fail');
    expect(bad.reasons).toEqual([
      '1 stale writes accepted',
      '3 holders inside at once (2 allowed)',
    ]);
  });

  it('a skipped semaphore cell says why, in the semaphore table only', () => {
    const reason = 'the postgres-advisory store grants no semaphore permits';
    const cell = summarize('postgres-advisory', fault('F1'), 1_000, [semaphoreRun([], reason)], 2);
    expect([cell.verdict, cell.reasons]).toEqual(['skipped', [reason]]);
    const { permits: _, ...lockRun } = semaphoreRun(log(['a', 1n, true]));
    const lock = summarize('redis', fault('F1'), 1_000, [lockRun]);
    const result: MatrixResult = {
      generatedAt: '2026-12-02T00:00:00.000Z',
      command: 'npm run torture',
      machine: { cpus: 2, loadAverage: [1, 1, 1], node: 'v20' },
      settings: { runs: 1, ttlMs: 1_000, clients: 5, durationMs: 5_000 },
      cells: [lock, cell],
      selfTest: [],
    };
    expect(semaphoreTable(result)).toContain(`| postgres-advisory | F1 | 2 | 1 | – | – |`);
    expect(semaphoreTable(result)).toContain(`skipped: ${reason}`);
    expect(markdownTable(result)).not.toContain('postgres-advisory');
    expect(readmeSummary(result, 'x.json')).toContain('| postgres-advisory | 0 of 0 | skipped |');
  });
});
