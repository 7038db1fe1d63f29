/**
 * The torture matrix, report and merge on leader-election cells: judged as a lock (one leader,
 * the term as the token), listed in a table of their own and a README column, and kept apart
 * from the lock cell of the same backend and fault when results are merged.
 */
import { describe, expect, it } from 'vitest';
import { type ClientEvent, checkRun } from '../../tools/torture/src/checker.js';
import { FAULTS } from '../../tools/torture/src/faults.js';
import type { CellRun } from '../../tools/torture/src/harness.js';
import { type MatrixResult, summarize } from '../../tools/torture/src/matrix.js';
import { mergeResults } from '../../tools/torture/src/merge.js';
import type { WriteRecord } from '../../tools/torture/src/register.js';
import {
  electionTable,
  guaranteesPage,
  headline,
  markdownTable,
  readmeSummary,
} from '../../tools/torture/src/report.js';

const fault = (id: string) => FAULTS.find((f) => f.id === id)!;
const log = (...writes: [string, bigint, boolean][]): WriteRecord[] =>
  writes.map(([writer, token, accepted], i) => ({ seq: i + 1, writer, token, accepted }));

/** A run's log: each writer granted once (in the order of its first write), then its writes. */
function run(writes: WriteRecord[], accepted: bigint, skipped?: string): CellRun {
  const firsts = [...new Map(writes.map((w) => [w.writer, w.token])).entries()];
  const events: ClientEvent[] = firsts.map(([client, token], i) => ({
    at: i * 100,
    client,
    type: 'acquired',
    token,
    remainingMs: 1_000,
  }));
  return {
    backend: 'redis',
    fault: 'F2',
    fenced: true,
    election: true,
    verdict: checkRun(events, writes, accepted, []),
    faults: [],
    clientErrors: [],
    durationMs: 1_000,
    ...(skipped === undefined ? {} : { skipped }),
  };
}

function result(...cells: MatrixResult['cells']): MatrixResult {
  return {
    generatedAt: '2026-12-03T00:00:00.000Z',
    command: 'npm run torture',
    machine: { cpus: 2, loadAverage: [1, 1, 1], node: 'v20' },
    settings: { runs: 1, ttlMs: 1_000, clients: 5, durationMs: 5_000 },
    cells,
    selfTest: [],
  };
}

describe('torture election cells', () => {
  it('are judged as a lock: a deposed leader’s accepted write fails the cell', () => {
    // Leader a (term 1) paused; b (term 2) wrote; a's late write was refused: the fault bit.
    const refused = run(log(['a', 1n, true], ['b', 2n, true], ['a', 1n, false]), 2n);
    const cell = summarize('redis', fault('F2'), 1_000, [refused], undefined, 'election');
    expect([cell.primitive, cell.verdict, cell.staleRejected]).toEqual(['election', 'pass', 1]);
    const accepted = run(log(['a', 1n, true], ['b', 2n, true], ['a', 1n, true]), 3n);
    const bad = summarize('redis', fault('F2'), 1_000, [accepted], undefined, 'election');
    expect([bad.verdict, bad.reasons]).toEqual([
      'fail',
      ['1 stale writes accepted', '2 holders inside at once (1 allowed)'],
    ]);
  });

  it('have their own table, README column and guarantees section; lock cells stay apart', () => {
    const lock = summarize('redis', fault('F2'), 1_000, [run(log(['a', 1n, true]), 1n)]);
    const election = summarize(
      'redis',
      fault('F2'),
      1_000,
      [run(log(['a', 1n, true], ['b', 2n, true], ['a', 1n, false]), 2n)],
      undefined,
      'election',
    );
    const reason = 'the postgres-advisory store runs no leader elections';
    const skipped = summarize(
      'postgres-advisory',
      fault('F1'),
      1_000,
      [run([], 0n, reason)],
      undefined,
      'election',
    );
    const both = result(lock, election, skipped);
    expect(markdownTable(both).split('\n')).toHaveLength(3);
    const table = electionTable(both);
    // a was never released before b's grant: two leaders believed at once (the pause's doing).
    expect(table).toContain('| redis | F2 | 1 | 2 | 1 (1) | 1 | **0** |');
    expect(table).toContain(`skipped: ${reason}`);
    expect(electionTable(result(lock))).toBe('_No election cells were run._');
    expect(headline(both)).toContain('(1 lock cells, 2 election cells)');
    expect(headline(both)).toContain('1 election cells skipped (reasons in the table)');
    const summary = readmeSummary(both, 'x.json');
    expect(summary).toContain('| backend | faults passed | election faults passed |');
    // The lock cell saw no stale write under F2: not exercised, so not counted.
    expect(summary).toContain('| redis | 0 of 0 | 1 of 1 | 0 / 1 |');
    expect(summary).toContain('| postgres-advisory | 0 of 0 | skipped |');
    expect(guaranteesPage(both, 'x.json', 'x.svg')).toContain('## Leader elections');
    expect(guaranteesPage(result(lock), 'x.json', 'x.svg')).not.toContain('## Leader elections');
  });

  it('merge keeps a lock cell and an election cell of one backend and fault apart, lock first', () => {
    const lock = summarize('redis', fault('F2'), 1_000, [run(log(['a', 1n, true]), 1n)]);
    const election = summarize(
      'redis',
      fault('F2'),
      1_000,
      [run(log(['a', 1n, true]), 1n)],
      undefined,
      'election',
    );
    const merged = mergeResults([result(election), result(lock)]);
    expect(merged.cells.map((c) => c.primitive)).toEqual(['lock', 'election']);
    expect(() => mergeResults([result(election), result(election)])).toThrow(/× election/);
  });
});
