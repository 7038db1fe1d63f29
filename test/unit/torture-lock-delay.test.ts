/**
 * The torture harness's lock-delay cells (`torture --lock-delay <ms>`): the checker counts
 * grants inside the delay of a killed or paused holder whose grant was alive at the fault (and
 * none after it, nor for a holder whose grant had ended before), such a grant fails the cell,
 * merge keeps lock-delay cells apart from the plain cells, the report lists them in a table of
 * their own, and semaphore cells with a lock-delay are refused.
 */
import { Command } from 'commander';
import { describe, expect, it, vi } from 'vitest';
import {
  type ClientEvent,
  checkRun,
  type FaultMark,
  lockDelaySlackMs,
} from '../../tools/torture/src/checker.js';
import { registerTortureCommand, torturePrimitives } from '../../tools/torture/src/command.js';
import { FAULTS } from '../../tools/torture/src/faults.js';
import type { CellRun } from '../../tools/torture/src/harness.js';
import type { MatrixResult } from '../../tools/torture/src/matrix.js';
import { summarize } from '../../tools/torture/src/matrix.js';
import { mergeResults } from '../../tools/torture/src/merge.js';
import {
  electionTable,
  guaranteesPage,
  headline,
  lockDelayTable,
  markdownTable,
  readmeSummary,
} from '../../tools/torture/src/report.js';

// The CLI tests below must never start a matrix: a validation that lets a bad combination
// through fails here instead of contending on the engines.
vi.mock('../../tools/torture/src/matrix.js', async (importActual) => ({
  ...(await importActual<typeof import('../../tools/torture/src/matrix.js')>()),
  runMatrix: vi.fn(async () => {
    throw new Error('the matrix must not run in a unit test');
  }),
}));

const fault = (id: string) => FAULTS.find((f) => f.id === id)!;
const D = 2_000;
const acquired = (at: number, client: string, token: bigint, remainingMs = 1_000): ClientEvent => ({
  at,
  client,
  type: 'acquired',
  token,
  remainingMs,
});
const releasing = (at: number, client: string): ClientEvent => ({ at, client, type: 'releasing' });
const killed: FaultMark = { at: 100, endedAt: 100, target: 'a', killed: true };
const paused: FaultMark = { at: 100, endedAt: 1_000, target: 'a', paused: true };

/** a is granted at 90 and hit at 100; then b is granted at `next`, releases, c later. */
function history(next: number): ClientEvent[] {
  return [
    acquired(0, 'x', 1n),
    releasing(50, 'x'),
    acquired(90, 'a', 2n),
    acquired(next, 'b', 3n),
    releasing(next + 50, 'b'),
    acquired(next + 5_000, 'c', 4n),
  ];
}

/**
 * The cell of one run on Redis with a 1 s TTL: the fault `mark` (of fault `faultId`), the next
 * grant at `nextGrantAt`, every grant carrying `lockDelayMs`.
 */
function cellOf(
  faultId: string,
  nextGrantAt: number,
  mark: FaultMark,
  lockDelayMs: number,
  primitive: 'lock' | 'election' = 'lock',
) {
  const runs = [run(history(nextGrantAt), [mark], lockDelayMs)];
  return summarize('redis', fault(faultId), 1_000, runs, undefined, primitive, lockDelayMs);
}

function run(events: ClientEvent[], marks: FaultMark[], lockDelayMs: number, skipped?: string) {
  const verdict = checkRun(skipped === undefined ? events : [], [], 0n, marks, 1, lockDelayMs);
  const cellRun: CellRun = {
    backend: 'redis',
    fault: marks[0]?.killed === true ? 'F1' : 'F2',
    fenced: true,
    ...(lockDelayMs > 0 ? { lockDelayMs } : {}),
    verdict,
    faults: skipped === undefined ? marks : [],
    clientErrors: [],
    durationMs: 8_000,
    ...(skipped === undefined ? {} : { skipped }),
  };
  return cellRun;
}

function result(command: string, ...cells: MatrixResult['cells']): MatrixResult {
  return {
    generatedAt: '2026-12-03T00:00:00.000Z',
    command,
    machine: { cpus: 2, loadAverage: [1, 1, 1], node: 'v20' },
    settings: { runs: 1, ttlMs: 1_000, clients: 5, durationMs: 8_000 },
    cells,
    selfTest: [],
  };
}

describe('torture checker, lock-delay', () => {
  const edge = killed.at + D - lockDelaySlackMs(D);

  it('counts a grant inside the delay of a killed holder, not one after it', () => {
    expect(lockDelaySlackMs(D)).toBe(45);
    const inside = checkRun(history(1_500), [], 0n, [killed], 1, D);
    expect([inside.delayFaults, inside.grantsInsideDelay]).toEqual([1, 1]);
    expect(inside.livenessMs).toEqual([1_400]);
    expect(checkRun(history(edge - 1), [], 0n, [killed], 1, D).grantsInsideDelay).toBe(1);
    const after = checkRun(history(edge + 1), [], 0n, [killed], 1, D);
    expect([after.delayFaults, after.grantsInsideDelay]).toEqual([1, 0]);
    // Without a lock-delay nothing is judged.
    const plain = checkRun(history(1_500), [], 0n, [killed]);
    expect([plain.delayFaults, plain.grantsInsideDelay]).toEqual([0, 0]);
  });

  it('counts every grant inside, the victim’s own again too, never the victim’s grant itself', () => {
    const events = [
      acquired(90, 'a', 2n),
      acquired(300, 'b', 3n),
      releasing(400, 'b'),
      acquired(500, 'a', 4n),
    ];
    expect(checkRun(events, [], 0n, [killed], 1, D).grantsInsideDelay).toBe(2);
  });

  it('cuts a paused holder’s window at its resume (a grant that outlived the pause is then released)', () => {
    expect(checkRun(history(900), [], 0n, [paused], 1, D).grantsInsideDelay).toBe(1);
    const resumed = checkRun(history(1_200), [], 0n, [paused], 1, D);
    expect([resumed.delayFaults, resumed.grantsInsideDelay]).toEqual([1, 0]);
  });

  it('does not judge a fault whose victim’s grant had ended before it', () => {
    const cases: ClientEvent[][] = [
      // Its release had begun: a live release clears the delay.
      [acquired(50, 'a', 2n), releasing(95, 'a'), acquired(500, 'b', 3n)],
      // Reported lost: the engine may have ended it earlier.
      [
        acquired(50, 'a', 2n),
        { at: 95, client: 'a', type: 'lost', reason: 'expired' },
        acquired(500, 'b', 3n),
      ],
      // Past the validity its client computed: it may have expired on the engine already.
      [acquired(50, 'a', 2n, 40), acquired(500, 'b', 3n)],
      // No grant at all.
      [acquired(500, 'b', 3n)],
    ];
    for (const events of cases) {
      const verdict = checkRun(events, [], 0n, [killed], 1, D);
      expect([verdict.delayFaults, verdict.grantsInsideDelay]).toEqual([0, 0]);
    }
    // A fault that neither killed nor paused (a partition) is not judged.
    const cut: FaultMark = { at: 100, endedAt: 3_000, target: 'a' };
    expect(checkRun(history(500), [], 0n, [cut], 1, D).delayFaults).toBe(0);
  });
});

describe('torture matrix, lock-delay cells', () => {
  it('a grant inside the delay fails the cell, lock or election; after it, the cell passes', () => {
    const bad = cellOf('F1', 1_500, killed, D, 'lock');
    expect([bad.verdict, bad.reasons]).toEqual([
      'fail',
      ['1 grants inside the lock-delay of 2000 ms'],
    ]);
    expect([bad.lockDelayMs, bad.delayFaults, bad.grantsInsideDelay]).toEqual([D, 1, 1]);
    const election = cellOf('F1', 1_500, killed, D, 'election');
    expect(election.verdict).toBe('fail');
    const good = cellOf('F1', 3_100, killed, D, 'lock');
    expect([good.verdict, good.grantsInsideDelay, good.livenessP50Ms, good.livenessP50Ttl]).toEqual(
      ['pass', 0, 3_000, 3],
    );
    // The same history in a plain cell: no lock-delay fields (as before the option), and it passes.
    const plain = cellOf('F1', 1_500, killed, 0);
    expect([plain.verdict, plain.lockDelayMs, plain.grantsInsideDelay]).toEqual([
      'pass',
      undefined,
      undefined,
    ]);
    for (const field of ['lockDelayMs', 'delayFaults', 'grantsInsideDelay', 'livenessP50Ms']) {
      expect(field in plain).toBe(false);
    }
  });

  it('is not exercised when no fault hit a holder with a live grant', () => {
    const released = [acquired(50, 'a', 2n), releasing(95, 'a'), acquired(500, 'b', 3n)];
    const cell = summarize(
      'redis',
      fault('F1'),
      1_000,
      [run(released, [killed], D)],
      undefined,
      'lock',
      D,
    );
    expect(cell.verdict).toBe('not exercised');
    expect(cell.reasons[0]).toMatch(/lock-delay was not tested/);
  });

  it('merge keeps lock-delay cells apart from the plain cells of one backend, fault and primitive', () => {
    const plainLock = cellOf('F1', 1_500, killed, 0);
    const plainElection = cellOf('F1', 1_500, killed, 0, 'election');
    const delayLock = cellOf('F1', 3_100, killed, D, 'lock');
    const delayElection = cellOf('F1', 3_100, killed, D, 'election');
    const published = result('npm run torture -- --runs 1', plainLock, plainElection);
    const delays = result('npm run torture -- --lock-delay 2000', delayElection, delayLock);
    const merged = mergeResults([published, delays]);
    expect(merged.cells).toHaveLength(4);
    expect(merged.cells.map((c) => `${c.primitive} ${c.lockDelayMs ?? 0}`)).toEqual([
      'lock 0',
      'lock 2000',
      'election 0',
      'election 2000',
    ]);
    expect(merged.cells.filter((c) => c.lockDelayMs === undefined)).toEqual([
      plainLock,
      plainElection,
    ]);
    expect(() => mergeResults([delays, delays])).toThrow(
      'cell redis × F1 × election × lock-delay 2000 ms is in more than one part',
    );
    // Another delay is another cell.
    const longer = cellOf('F1', 5_100, killed, 4_000, 'lock');
    expect(mergeResults([merged, result('x', longer)]).cells).toHaveLength(5);
  });

  it('the report lists lock-delay cells in their own table, not in the lock or election table', () => {
    const plainLock = cellOf('F1', 1_500, killed, 0);
    const delayLock = cellOf('F1', 1_500, killed, D, 'lock');
    const delayElection = cellOf('F2', 3_100, paused, D, 'election');
    const reason = 'the sqlite store keeps no lock-delay (capabilities.lockDelay is false)';
    const skipped = summarize(
      'sqlite',
      fault('F1'),
      1_000,
      [run([], [killed], D, reason)],
      undefined,
      'lock',
      D,
    );
    const all = result('npm run torture', plainLock, delayLock, delayElection, skipped);
    expect(markdownTable(all).split('\n')).toHaveLength(3);
    expect(electionTable(all)).toBe('_No election cells were run._');
    const table = lockDelayTable(all);
    expect(table).toContain(
      '| redis | lock | F1 | 1 | 2000 | 4 | 1400 / 1400 | 1.4 / 1.4 | **1** (1) | 0 | fail: 1 grants inside the lock-delay of 2000 ms |',
    );
    expect(table).toContain(
      '| redis | election | F2 | 1 | 2000 | 4 | 3000 / 3000 | 3 / 3 | **0** (1) | 0 |',
    );
    expect(table).toContain(
      `| sqlite | lock | F1 | 1 | 2000 | – | – / – | – / – | – | – | skipped: ${reason} |`,
    );
    expect(lockDelayTable(result('x', plainLock))).toBe('_No lock-delay cells were run._');
    expect(headline(all)).toContain('(1 lock cells, 3 lock-delay cells)');
    expect(headline(all)).toContain('1 lock-delay cells skipped (reasons in the table)');
    // The F2 election cell rejected no stale write: not exercised, so not counted.
    expect(readmeSummary(all, 'x.json')).toContain('| redis | 1 of 1 | 0 of 1 | 0 / 0 |');
    expect(guaranteesPage(all, 'x.json', 'x.svg')).toContain('## Lock-delay');
    expect(guaranteesPage(result('x', plainLock), 'x.json', 'x.svg')).not.toContain(
      '## Lock-delay',
    );
  });
});

describe('torture --lock-delay usage', () => {
  it('runs lock and election cells by default and refuses semaphore cells', () => {
    expect(torturePrimitives(undefined, 0)).toEqual(['lock', 'semaphore', 'election']);
    expect(torturePrimitives(undefined, D)).toEqual(['lock', 'election']);
    expect(torturePrimitives(['election'], D)).toEqual(['election']);
    expect(() => torturePrimitives(['lock', 'semaphore'], D)).toThrow(
      /--lock-delay: semaphore permits carry no lock-delay/,
    );
    expect(torturePrimitives(['semaphore'], 0)).toEqual(['semaphore']);
  });

  it('the command refuses a semaphore or an out-of-range delay before any run', async () => {
    const matrix = await import('../../tools/torture/src/matrix.js');
    expect(vi.isMockFunction(matrix.runMatrix)).toBe(true);
    const parse = (...args: string[]) => {
      const program = new Command().exitOverride();
      registerTortureCommand(program);
      return program.parseAsync(['node', 'fencelock', 'torture', ...args]);
    };
    await expect(parse('--lock-delay', '2000', '--primitive', 'semaphore')).rejects.toThrow(
      /semaphore permits carry no lock-delay/,
    );
    await expect(parse('--lock-delay', '60001')).rejects.toThrow(/--lock-delay/);
    await expect(parse('--lock-delay', '-1')).rejects.toThrow(/--lock-delay/);
    // A valid delay gets as far as the (mocked) matrix.
    await expect(
      parse('--lock-delay', '2000', '--backend', 'redis', '--fault', 'F1'),
    ).rejects.toThrow('the matrix must not run in a unit test');
  });

  it('runMatrix itself refuses semaphore cells with a lock-delay', async () => {
    const { runMatrix, LockDelayOnSemaphore } = await vi.importActual<
      typeof import('../../tools/torture/src/matrix.js')
    >('../../tools/torture/src/matrix.js');
    const options = {
      backends: [],
      faults: [],
      primitives: ['lock', 'semaphore'] as const,
      clientFaults: [],
      permits: 2,
      lockDelayMs: D,
      runs: 1,
      ttlMs: 1_000,
      clients: 2,
      durationMs: 2_000,
      selfTest: false,
      log: () => undefined,
    };
    await expect(runMatrix(options, 'x')).rejects.toThrow(LockDelayOnSemaphore);
  });
});
