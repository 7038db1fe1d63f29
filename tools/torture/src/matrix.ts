/**
 * The torture matrix: every applicable backend × fault cell, `runs` times each, plus the
 * checker's self-test (broken variants that must fail), summed into the table the guarantees
 * page is generated from.
 */
import { cpus, loadavg } from 'node:os';
import { percentile } from './checker.js';
import { FAULTS, type FaultSpec } from './faults.js';
import { type CellRun, runCell } from './harness.js';
import { BACKENDS, type BackendName } from './topologies.js';

export interface MatrixOptions {
  readonly backends: readonly BackendName[];
  /** Fault ids to run (F0, F1, …); all when empty. */
  readonly faults: readonly string[];
  readonly runs: number;
  readonly ttlMs: number;
  readonly clients: number;
  readonly durationMs: number;
  readonly selfTest: boolean;
  readonly log: (line: string) => void;
}

/**
 * `skipped`: the fault cannot be caused on this machine (a tool is missing); `documented
 * failure`: a failure under a fault outside the backend's documented assumptions (see
 * `FaultSpec.outsideAssumptions`). Both say why in `reasons`.
 */
export type CellVerdict = 'pass' | 'fail' | 'documented failure' | 'not exercised' | 'skipped';

/** One backend × fault cell over all its runs. */
export interface CellSummary {
  readonly backend: BackendName;
  readonly fault: string;
  readonly title: string;
  readonly runs: number;
  readonly ttlMs: number;
  readonly grants: number;
  readonly writes: number;
  readonly staleAccepted: number;
  readonly staleRejected: number;
  readonly lostIncrements: number;
  /** Runs in which two clients believed they held the lock at once (lock alone, no fencing). */
  readonly doubleGrantRuns: number;
  readonly believedOverlaps: number;
  readonly rawOverlaps: number;
  readonly tokenRegressions: number;
  readonly tokenDuplicates: number;
  /** Fault → next grant to another client, in TTLs. */
  readonly livenessP50Ttl: number | null;
  readonly livenessP99Ttl: number | null;
  readonly lossDetectionP50Ms: number | null;
  readonly lossDetectionP99Ms: number | null;
  readonly writesAfterKnownLoss: number;
  readonly verdict: CellVerdict;
  readonly reasons: readonly string[];
  readonly clientErrors: readonly string[];
}

export interface SelfTestResult {
  readonly name: string;
  readonly expectation: string;
  /** The broken variant made the checker fail, as it must. */
  readonly caught: boolean;
  readonly cell: CellSummary;
}

export interface MatrixResult {
  readonly generatedAt: string;
  readonly command: string;
  readonly machine: {
    readonly cpus: number;
    readonly loadAverage: readonly number[];
    readonly node: string;
  };
  readonly settings: {
    readonly runs: number;
    readonly ttlMs: number;
    readonly clients: number;
    readonly durationMs: number;
  };
  readonly cells: readonly CellSummary[];
  readonly selfTest: readonly SelfTestResult[];
}

/**
 * Backends whose tokens must never go back or repeat under these faults: all of them. Redlock's
 * rise as long as the nodes' clocks do not step back (a node restarted empty issues its clock),
 * which no fault here breaks.
 */
const STRICT_TOKENS = new Set<BackendName>(BACKENDS);

/** etcd leases are whole seconds with a 2 s minimum on the test cluster. */
function ttlFor(backend: BackendName, ttlMs: number): number {
  return backend === 'etcd' ? Math.max(2_000, Math.ceil(ttlMs / 1_000) * 1_000) : ttlMs;
}

/** Sum the runs of one cell and judge it. */
export function summarize(
  backend: BackendName,
  fault: FaultSpec,
  ttlMs: number,
  runs: readonly CellRun[],
): CellSummary {
  const sum = (pick: (run: CellRun) => number) => runs.reduce((n, run) => n + pick(run), 0);
  const liveness = runs.flatMap((r) => r.verdict.livenessMs.map((ms) => ms / ttlMs));
  const detection = runs.flatMap((r) => r.verdict.lossDetectionMs);
  const round = (value: number | undefined, digits: number) =>
    value === undefined ? null : Number(value.toFixed(digits));
  const cell = {
    backend,
    fault: fault.id,
    title: fault.title,
    runs: runs.length,
    ttlMs,
    grants: sum((r) => r.verdict.grants),
    writes: sum((r) => r.verdict.writes),
    staleAccepted: sum((r) => r.verdict.staleAccepted),
    staleRejected: sum((r) => r.verdict.staleRejected),
    lostIncrements: sum((r) => Math.abs(r.verdict.lostIncrements)),
    doubleGrantRuns: runs.filter((r) => r.verdict.believedOverlaps > 0).length,
    believedOverlaps: sum((r) => r.verdict.believedOverlaps),
    rawOverlaps: sum((r) => r.verdict.rawOverlaps),
    tokenRegressions: sum((r) => r.verdict.tokenRegressions),
    tokenDuplicates: sum((r) => r.verdict.tokenDuplicates),
    livenessP50Ttl: round(percentile(liveness, 50), 2),
    livenessP99Ttl: round(percentile(liveness, 99), 2),
    lossDetectionP50Ms: round(percentile(detection, 50), 0),
    lossDetectionP99Ms: round(percentile(detection, 99), 0),
    writesAfterKnownLoss: sum((r) => r.verdict.writesAfterKnownLoss),
    clientErrors: [...new Set(runs.flatMap((r) => r.clientErrors))].slice(0, 5),
  };
  const skipped = runs.filter((run) => run.skipped !== undefined);
  if (runs.length > 0 && skipped.length === runs.length) {
    return { ...cell, verdict: 'skipped', reasons: [...new Set(skipped.map((r) => r.skipped!))] };
  }
  const reasons: string[] = [];
  if (skipped.length > 0) reasons.push(`${skipped.length} of ${runs.length} runs skipped`);
  if (cell.grants === 0) reasons.push('no grant at all');
  if (cell.staleAccepted > 0) reasons.push(`${cell.staleAccepted} stale writes accepted`);
  if (cell.lostIncrements > 0) reasons.push(`register lost ${cell.lostIncrements} increments`);
  if (STRICT_TOKENS.has(backend) && cell.tokenRegressions + cell.tokenDuplicates > 0) {
    reasons.push(`${cell.tokenRegressions} token regressions, ${cell.tokenDuplicates} duplicates`);
  }
  if (fault.id === 'F0' && cell.believedOverlaps > 0) {
    reasons.push(`${cell.believedOverlaps} double grants without any fault`);
  }
  const outside = fault.outsideAssumptions?.includes(backend) === true;
  if (reasons.length > 0 && outside) reasons.push(`outside its assumptions: ${fault.assumption}`);
  const verdict: CellVerdict =
    reasons.length > 0
      ? outside
        ? 'documented failure'
        : 'fail'
      : fault.bites.includes(backend) && cell.staleRejected === 0
        ? 'not exercised'
        : 'pass';
  return { ...cell, verdict, reasons };
}

/** Run the matrix. */
export async function runMatrix(options: MatrixOptions, command: string): Promise<MatrixResult> {
  const cells: CellSummary[] = [];
  const faults = FAULTS.filter((f) => options.faults.length === 0 || options.faults.includes(f.id));
  for (const backend of options.backends) {
    for (const fault of faults) {
      if (!fault.backends.includes(backend)) continue;
      const ttlMs = ttlFor(backend, options.ttlMs);
      const runs: CellRun[] = [];
      for (let seed = 1; seed <= options.runs; seed++) {
        runs.push(
          await runCell({
            backend,
            fault,
            ttlMs,
            clients: options.clients,
            durationMs: options.durationMs,
            fenced: true,
          }),
        );
      }
      const cell = summarize(backend, fault, ttlMs, runs);
      options.log(
        `${backend.padEnd(17)} ${fault.id.padEnd(4)} ${cell.verdict.padEnd(13)} grants ${cell.grants}, stale rejected ${cell.staleRejected}, accepted ${cell.staleAccepted}, double grants ${cell.believedOverlaps}${cell.reasons.length > 0 ? ` (${cell.reasons.join('; ')})` : ''}`,
      );
      cells.push(cell);
    }
  }
  const selfTest = options.selfTest ? await runSelfTest(options) : [];
  return {
    generatedAt: new Date().toISOString(),
    command,
    machine: {
      cpus: cpus().length,
      loadAverage: loadavg().map((n) => Number(n.toFixed(2))),
      node: process.version,
    },
    settings: {
      runs: options.runs,
      ttlMs: options.ttlMs,
      clients: options.clients,
      durationMs: options.durationMs,
    },
    cells,
    selfTest,
  };
}

/**
 * The checker's self-test (docs/guarantees.md, "Checker self-test"): broken variants that the
 * checker must fail.
 * 1. Fencing off: the register accepts every write; a paused Redis holder's late write is then
 *    a stale write accepted.
 * 2. A Redlock quorum of 2 of 5: half the clients see nodes 1–3, the other half nodes 3–5, so
 *    each needs only 2 of the 5 real nodes; two clients then hold the lock at once.
 */
async function runSelfTest(options: MatrixOptions): Promise<SelfTestResult[]> {
  const results: SelfTestResult[] = [];
  const pause = FAULTS.find((f) => f.id === 'F2')!;
  const none = FAULTS.find((f) => f.id === 'F0')!;
  const unfenced = await runCell({
    backend: 'redis',
    fault: pause,
    ttlMs: options.ttlMs,
    clients: options.clients,
    durationMs: options.durationMs,
    fenced: false,
  });
  const unfencedCell = summarize('redis', pause, options.ttlMs, [unfenced]);
  results.push({
    name: 'fencing off (Redis, holder paused)',
    expectation: 'stale writes accepted > 0, cell fails',
    caught: unfencedCell.verdict === 'fail' && unfencedCell.staleAccepted > 0,
    cell: unfencedCell,
  });
  const redlockTtl = ttlFor('redlock', options.ttlMs);
  const split = await runCell({
    backend: 'redlock',
    fault: none,
    ttlMs: redlockTtl,
    clients: Math.max(4, options.clients),
    durationMs: options.durationMs,
    fenced: true,
    endpointsOf: (client) => (client % 2 === 0 ? [0, 1, 2] : [2, 3, 4]),
  });
  const splitCell = summarize('redlock', none, redlockTtl, [split]);
  results.push({
    name: 'Redlock quorum of 2 of 5 (clients split over nodes 1–3 and 3–5)',
    expectation: 'double grants without any fault, cell fails',
    caught: splitCell.verdict === 'fail' && splitCell.believedOverlaps > 0,
    cell: splitCell,
  });
  for (const result of results) {
    options.log(`self-test: ${result.name}: ${result.caught ? 'caught' : 'NOT CAUGHT'}`);
  }
  return results;
}
