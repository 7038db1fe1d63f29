/**
 * How the torture matrix judges a cell from its runs: pass, fail, not exercised (the fault could
 * bite but no stale write happened), skipped (the fault cannot be caused on this machine) and
 * documented failure (a failure under a fault outside the backend's documented assumptions).
 */
import { describe, expect, it } from 'vitest';
import { checkRun } from '../../tools/torture/src/checker.js';
import { FAULTS } from '../../tools/torture/src/faults.js';
import type { CellRun } from '../../tools/torture/src/harness.js';
import { summarize } from '../../tools/torture/src/matrix.js';
import type { BackendName } from '../../tools/torture/src/topologies.js';

const fault = (id: string) => FAULTS.find((f) => f.id === id)!;

/** A run whose register log is `writes` ([writer, token, accepted]) after two clean grants. */
function run(
  backend: BackendName,
  faultId: string,
  writes: readonly [string, bigint, boolean][],
  skipped?: string,
): CellRun {
  const events = [
    { at: 0, client: 'a', type: 'acquired', token: 1n, remainingMs: 100 },
    { at: 50, client: 'a', type: 'releasing' },
    { at: 60, client: 'b', type: 'acquired', token: 2n, remainingMs: 100 },
    { at: 90, client: 'b', type: 'releasing' },
  ] as const;
  const log = writes.map(([writer, token, accepted], i) => ({
    seq: i + 1,
    writer,
    token,
    accepted,
  }));
  const accepted = BigInt(writes.filter(([, , ok]) => ok).length);
  return {
    backend,
    fault: faultId,
    fenced: true,
    verdict: checkRun(skipped === undefined ? events : [], log, accepted, []),
    faults: [],
    clientErrors: [],
    durationMs: 1_000,
    ...(skipped === undefined ? {} : { skipped }),
  };
}

describe('torture matrix verdicts', () => {
  it('pass when a stale write was rejected, not exercised when the fault never bit', () => {
    const bit = run('redis', 'F2', [
      ['a', 1n, true],
      ['b', 2n, true],
      ['a', 1n, false],
    ]);
    expect(summarize('redis', fault('F2'), 1_000, [bit]).verdict).toBe('pass');
    const quiet = run('redis', 'F2', [
      ['a', 1n, true],
      ['b', 2n, true],
    ]);
    expect(summarize('redis', fault('F2'), 1_000, [quiet]).verdict).toBe('not exercised');
  });

  it('fail on an accepted stale write, with the reason', () => {
    const stale = run('redis', 'F2', [
      ['b', 2n, true],
      ['a', 1n, true],
    ]);
    const cell = summarize('redis', fault('F2'), 1_000, [stale]);
    expect(cell.verdict).toBe('fail');
    expect(cell.reasons).toEqual(['1 stale writes accepted']);
  });

  it('a documented failure outside the backend’s assumptions', () => {
    const repeated = run('redlock', 'F5a', [
      ['a', 2n, true],
      ['b', 2n, true],
    ]);
    const outside = {
      ...fault('F5a'),
      outsideAssumptions: ['redlock'] as const,
      assumption: 'a crashed node stays down for the longest TTL',
    };
    const cell = summarize('redlock', outside, 1_000, [repeated]);
    expect(cell.verdict).toBe('documented failure');
    expect(cell.reasons[0]).toBe('1 stale writes accepted');
    expect(cell.reasons[1]).toBe(
      'outside its assumptions: a crashed node stays down for the longest TTL',
    );
  });

  it('a node or server restarted empty at once is inside the assumptions now (F5a, F5c)', () => {
    const repeated = run('redlock', 'F5a', [
      ['a', 2n, true],
      ['b', 2n, true],
    ]);
    for (const id of ['F5a', 'F5b']) {
      expect(summarize('redlock', fault(id), 1_000, [repeated]).verdict).toBe('fail');
    }
    const single = run('redis', 'F5c', [
      ['a', 2n, true],
      ['b', 2n, true],
    ]);
    expect(summarize('redis', fault('F5c'), 1_000, [single]).verdict).toBe('fail');
  });

  it('fails a Redlock cell on a repeated token, as every backend', () => {
    const events = [
      { at: 0, client: 'a', type: 'acquired', token: 5n, remainingMs: 100 },
      { at: 50, client: 'a', type: 'releasing' },
      { at: 60, client: 'b', type: 'acquired', token: 5n, remainingMs: 100 },
    ] as const;
    const repeated: CellRun = {
      ...run('redlock', 'F0', []),
      verdict: checkRun(events, [], 0n, []),
    };
    const cell = summarize('redlock', fault('F0'), 1_000, [repeated]);
    expect(cell.verdict).toBe('fail');
    expect(cell.reasons).toEqual(['0 token regressions, 1 duplicates']);
  });

  it('skipped when every run was skipped, with the reason; a partly skipped cell says so', () => {
    const reason = 'libfaketime is not installed';
    const skipped = run('redis', 'F6a', [], reason);
    const cell = summarize('redis', fault('F6a'), 1_000, [skipped, skipped]);
    expect(cell.verdict).toBe('skipped');
    expect(cell.reasons).toEqual([reason]);
    const partly = summarize('redis', fault('F6a'), 1_000, [skipped, run('redis', 'F6a', [])]);
    expect(partly.reasons).toEqual(['1 of 2 runs skipped']);
    expect(partly.verdict).toBe('fail');
  });
});
