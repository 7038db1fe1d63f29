/**
 * `torture merge`: results made in parts become the result one run would have written, and
 * parts that cannot be merged are refused.
 */
import { describe, expect, it } from 'vitest';
import type { CellSummary, MatrixResult } from '../../tools/torture/src/matrix.js';
import { MergeConflict, mergeResults } from '../../tools/torture/src/merge.js';
import type { BackendName } from '../../tools/torture/src/topologies.js';

function cell(backend: BackendName, fault: string, staleRejected: number): CellSummary {
  return {
    backend,
    fault,
    title: fault,
    runs: 10,
    ttlMs: 2_000,
    grants: 100,
    writes: 100,
    staleAccepted: 0,
    staleRejected,
    lostIncrements: 0,
    doubleGrantRuns: 0,
    believedOverlaps: 0,
    rawOverlaps: 0,
    tokenRegressions: 0,
    tokenDuplicates: 0,
    livenessP50Ttl: 1.2,
    livenessP99Ttl: 1.9,
    lossDetectionP50Ms: null,
    lossDetectionP99Ms: null,
    writesAfterKnownLoss: 0,
    verdict: 'pass',
    reasons: [],
    clientErrors: [],
  };
}

function part(
  generatedAt: string,
  command: string,
  cells: CellSummary[],
  caught: boolean,
  runs = 10,
): MatrixResult {
  return {
    generatedAt,
    command,
    machine: { cpus: 2, loadAverage: [1, 1, 1], node: 'v20' },
    settings: { runs, ttlMs: 2_000, clients: 5, durationMs: 8_000 },
    cells,
    selfTest: [{ name: 'no fencing', expectation: 'fails', caught, cell: cell('redis', 'F0', 0) }],
  };
}

describe('torture merge', () => {
  const etcd = part(
    '2026-12-02T01:00:00.000Z',
    'npm run torture -- --backend etcd --runs 10',
    [cell('etcd', 'F2', 3), cell('etcd', 'F0', 0)],
    true,
  );
  const redis = part(
    '2026-12-02T03:00:00.000Z',
    'npm run torture -- --backend redis --runs 10',
    [cell('redis', 'F1', 5), cell('redis', 'F0', 0)],
    true,
  );

  it('keeps every cell as it was, in the matrix order (backend, then fault)', () => {
    const merged = mergeResults([etcd, redis]);
    expect(merged.cells.map((c) => `${c.backend} ${c.fault}`)).toEqual([
      'redis F0',
      'redis F1',
      'etcd F0',
      'etcd F2',
    ]);
    expect(merged.cells.find((c) => c.backend === 'etcd' && c.fault === 'F2')).toEqual(
      etcd.cells[0],
    );
    expect(merged.generatedAt).toBe(redis.generatedAt);
    expect(merged.command).toBe(`${etcd.command}; ${redis.command}`);
    expect(merged.settings.runs).toBe(10);
  });

  it('keeps a self-test variant uncaught if any part failed to catch it', () => {
    const missed = { ...redis, selfTest: [{ ...redis.selfTest[0]!, caught: false }] };
    expect(mergeResults([etcd, missed]).selfTest).toEqual([
      expect.objectContaining({ name: 'no fencing', caught: false }),
    ]);
    expect(mergeResults([etcd, redis]).selfTest).toHaveLength(1);
  });

  it('refuses parts with other settings, the same cell twice, or no part at all', () => {
    const shallow = part('2026-12-02T04:00:00.000Z', 'quick', [cell('sqlite', 'F0', 0)], true, 3);
    expect(() => mergeResults([etcd, shallow])).toThrow(
      new MergeConflict(
        'settings differ: runs is 10 in "npm run torture -- --backend etcd --runs 10" and 3 in "quick"',
      ),
    );
    expect(() => mergeResults([etcd, etcd])).toThrow('cell etcd × F2 is in more than one part');
    expect(() => mergeResults([])).toThrow(MergeConflict);
  });
});
