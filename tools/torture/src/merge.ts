/**
 * Several torture results as one: a deep run (ten runs per cell over every backend takes hours)
 * can be made in parts, `--backend` or `--fault` apart, and merged before `torture report`.
 * Parts must share their settings and cover disjoint cells (a backend × fault cell of the lock,
 * the same of the semaphore and of the election are three cells, and a lock-delay cell of the
 * lock or the election is another, one per delay: `--lock-delay` results merge beside the plain
 * cells and never replace them), so every merged cell is exactly the cell one run of the matrix
 * would have written (percentiles are never re-estimated).
 */
import { FAULTS } from './faults.js';
import type { CellSummary, MatrixResult, SelfTestResult } from './matrix.js';
import { BACKENDS } from './topologies.js';

/** Parts that cannot be merged: different settings, or the same cell twice. */
export class MergeConflict extends Error {
  override readonly name = 'MergeConflict';
}

const SETTINGS = ['runs', 'ttlMs', 'clients', 'durationMs'] as const;

/**
 * Merge `parts` (at least one) into one result: cells in the matrix's order (backend, then
 * fault), the newest `generatedAt` and its machine, the commands joined with `; `, and one
 * self-test entry per variant (caught only if every part that ran it caught it).
 * @throws MergeConflict when settings differ or two parts hold the same backend × fault cell.
 */
export function mergeResults(parts: readonly MatrixResult[]): MatrixResult {
  const [first, ...rest] = parts;
  if (first === undefined) throw new MergeConflict('nothing to merge');
  for (const part of rest) {
    for (const setting of SETTINGS) {
      if (part.settings[setting] !== first.settings[setting]) {
        throw new MergeConflict(
          `settings differ: ${setting} is ${first.settings[setting]} in "${first.command}" and ${part.settings[setting]} in "${part.command}"`,
        );
      }
    }
  }
  const cells = new Map<string, CellSummary>();
  for (const part of parts) {
    for (const cell of part.cells) {
      const id = cellId(cell);
      if (cells.has(id)) throw new MergeConflict(`cell ${id} is in more than one part`);
      cells.set(id, cell);
    }
  }
  const newest = parts.reduce((a, b) => (b.generatedAt > a.generatedAt ? b : a));
  return {
    generatedAt: newest.generatedAt,
    command: parts.map((p) => p.command).join('; '),
    machine: newest.machine,
    settings: first.settings,
    cells: [...cells.values()].sort(matrixOrder),
    selfTest: mergeSelfTests(parts.flatMap((p) => p.selfTest)),
  };
}

/**
 * A cell's identity: backend × fault, then the primitive unless a lock, then the lock-delay
 * unless none (e.g. `redis × F1 × election × lock-delay 2000 ms`).
 */
export function cellId(cell: CellSummary): string {
  const kind =
    cell.primitive === undefined || cell.primitive === 'lock' ? '' : ` × ${cell.primitive}`;
  const delay = (cell.lockDelayMs ?? 0) > 0 ? ` × lock-delay ${cell.lockDelayMs} ms` : '';
  return `${cell.backend} × ${cell.fault}${kind}${delay}`;
}

/** Where a primitive's cells come in a backend's: lock, semaphore, election. */
const PRIMITIVE_ORDER = ['lock', 'semaphore', 'election'] as const;

/**
 * The matrix's order: backend, then its lock, semaphore and election cells (each plain first,
 * then by lock-delay), then fault.
 */
function matrixOrder(a: CellSummary, b: CellSummary): number {
  const byBackend = BACKENDS.indexOf(a.backend) - BACKENDS.indexOf(b.backend);
  if (byBackend !== 0) return byBackend;
  const rank = (c: CellSummary) => PRIMITIVE_ORDER.indexOf(c.primitive ?? 'lock');
  const byPrimitive = rank(a) - rank(b);
  if (byPrimitive !== 0) return byPrimitive;
  const byDelay = (a.lockDelayMs ?? 0) - (b.lockDelayMs ?? 0);
  if (byDelay !== 0) return byDelay;
  return FAULTS.findIndex((f) => f.id === a.fault) - FAULTS.findIndex((f) => f.id === b.fault);
}

/** One entry per variant; a variant one part failed to catch stays uncaught. */
function mergeSelfTests(results: readonly SelfTestResult[]): SelfTestResult[] {
  const byName = new Map<string, SelfTestResult>();
  for (const result of results) {
    const seen = byName.get(result.name);
    if (seen === undefined || (seen.caught && !result.caught)) byName.set(result.name, result);
  }
  return [...byName.values()];
}
