/**
 * The torture matrix: every applicable backend × fault cell of the lock, of a semaphore of N
 * permits and of a leader election under the faults of `primitive-cells.ts`, `runs` times each, plus the checker's
 * self-test (broken variants that must fail), summed into the tables the guarantees page is
 * generated from. With a lock-delay (`torture --lock-delay`), the lock and election cells are
 * lock-delay cells: every grant carries it, and they are kept apart from the plain cells.
 */
import { cpus, loadavg } from 'node:os';
import { percentile } from './checker.js';
import { FAULTS, type FaultSpec } from './faults.js';
import { type CellOptions, type CellRun, runCell, skippedRun } from './harness.js';
import { capabilityUnavailable } from './primitive-cells.js';
import { BACKENDS, type BackendName } from './topologies.js';

/**
 * What the clients of a cell contend for: the key's lock, permits of its semaphore, or the
 * leadership of its election (judged as a lock: one holder, the term as the token).
 */
export type Primitive = 'lock' | 'semaphore' | 'election';

export interface MatrixOptions {
  readonly backends: readonly BackendName[];
  /** Fault ids to run (F0, F1, …); all when empty. */
  readonly faults: readonly string[];
  /** Which cells to run: the lock's, the semaphore's, the election's. */
  readonly primitives: readonly Primitive[];
  /**
   * Fault ids of the semaphore and election cells (those of them that apply to a backend, and
   * `faults`).
   */
  readonly clientFaults: readonly string[];
  /** Permits of the semaphore cells' semaphore. */
  readonly permits: number;
  /**
   * The lock-delay every grant of the lock and election cells carries, ms (`--lock-delay`); 0 or
   * absent: none (the plain cells). Not with semaphore cells: permits carry none.
   */
  readonly lockDelayMs?: number;
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

/** `runMatrix` with a lock-delay and semaphore cells: permits carry no lock-delay. */
export class LockDelayOnSemaphore extends Error {
  override readonly name = 'LockDelayOnSemaphore';
  constructor() {
    super(
      'semaphore permits carry no lock-delay: run lock-delay cells with --primitive lock election',
    );
  }
}

/** One backend × fault cell (of the lock or of the semaphore) over all its runs. */
export interface CellSummary {
  readonly backend: BackendName;
  readonly fault: string;
  /** Absent in results written before semaphore cells existed: a lock cell. */
  readonly primitive?: Primitive;
  /** Holders allowed at once: the semaphore's permits, 1 for a lock. */
  readonly permits?: number;
  /**
   * A lock-delay cell's delay, ms (every grant carried it). Absent (or 0): a plain cell, as in
   * results written before lock-delay cells existed.
   */
  readonly lockDelayMs?: number;
  /**
   * Lock-delay cells: faults judged (a killed or paused holder whose grant was alive at the
   * fault) and grants acquired inside such a holder's delay (`RunVerdict.grantsInsideDelay`,
   * must be 0).
   */
  readonly delayFaults?: number;
  readonly grantsInsideDelay?: number;
  readonly title: string;
  readonly runs: number;
  readonly ttlMs: number;
  readonly grants: number;
  readonly writes: number;
  readonly staleAccepted: number;
  readonly staleRejected: number;
  /**
   * The most holders inside at once as the register saw them, over the runs (at most
   * `permits`); absent in results written before it was measured.
   */
  readonly maxInside?: number;
  /** The most holders writing at once, accepted or not (`RunVerdict.maxWriting`). */
  readonly maxWriting?: number;
  /** Writes made after the writer's grant lapsed, accepted / rejected (`RunVerdict`). */
  readonly lapsedWritesAccepted?: number;
  readonly lapsedWritesRejected?: number;
  readonly lostIncrements: number;
  /**
   * Runs in which more clients believed they held a grant at once than the permits allow (two,
   * for a lock: a double grant of the lock alone, no fencing).
   */
  readonly doubleGrantRuns: number;
  /** Grants beyond the permits believed at once (a lock: pairs of overlapping grants). */
  readonly believedOverlaps: number;
  readonly rawOverlaps: number;
  readonly tokenRegressions: number;
  readonly tokenDuplicates: number;
  /**
   * Fault → next grant to another client, in TTLs (a semaphore: → other clients hold every
   * permit at once).
   */
  readonly livenessP50Ttl: number | null;
  readonly livenessP99Ttl: number | null;
  /** The same in ms: lock-delay cells only (to set beside their delay). */
  readonly livenessP50Ms?: number | null;
  readonly livenessP99Ms?: number | null;
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

/**
 * Sum the runs of one cell and judge it.
 * @param permits the semaphore's permit count for a semaphore cell; absent for a lock or an
 *   election cell.
 * @param primitive what the cell's clients contended for.
 * @param lockDelayMs a lock-delay cell's delay (0: a plain cell); such a cell also fails on a
 *   grant inside the delay, and is not exercised when no fault hit a holder with a live grant.
 */
export function summarize(
  backend: BackendName,
  fault: FaultSpec,
  ttlMs: number,
  runs: readonly CellRun[],
  permits?: number,
  primitive: Primitive = permits === undefined ? 'lock' : 'semaphore',
  lockDelayMs = 0,
): CellSummary {
  const allowed = permits ?? 1;
  const sum = (pick: (run: CellRun) => number) => runs.reduce((n, run) => n + pick(run), 0);
  const livenessMs = runs.flatMap((r) => r.verdict.livenessMs);
  const liveness = livenessMs.map((ms) => ms / ttlMs);
  const detection = runs.flatMap((r) => r.verdict.lossDetectionMs);
  const round = (value: number | undefined, digits: number) =>
    value === undefined ? null : Number(value.toFixed(digits));
  const cell = {
    backend,
    fault: fault.id,
    primitive,
    permits: allowed,
    ...(lockDelayMs > 0
      ? {
          lockDelayMs,
          delayFaults: sum((r) => r.verdict.delayFaults),
          grantsInsideDelay: sum((r) => r.verdict.grantsInsideDelay),
          livenessP50Ms: round(percentile(livenessMs, 50), 0),
          livenessP99Ms: round(percentile(livenessMs, 99), 0),
        }
      : {}),
    title: fault.title,
    runs: runs.length,
    ttlMs,
    grants: sum((r) => r.verdict.grants),
    writes: sum((r) => r.verdict.writes),
    staleAccepted: sum((r) => r.verdict.staleAccepted),
    staleRejected: sum((r) => r.verdict.staleRejected),
    maxInside: runs.reduce((most, r) => Math.max(most, r.verdict.maxInside), 0),
    maxWriting: runs.reduce((most, r) => Math.max(most, r.verdict.maxWriting), 0),
    lapsedWritesAccepted: sum((r) => r.verdict.lapsedWritesAccepted),
    lapsedWritesRejected: sum((r) => r.verdict.lapsedWritesRejected),
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
  if (cell.maxInside > allowed) {
    reasons.push(`${cell.maxInside} holders inside at once (${allowed} allowed)`);
  }
  if (cell.lostIncrements > 0) reasons.push(`register lost ${cell.lostIncrements} increments`);
  if (STRICT_TOKENS.has(backend) && cell.tokenRegressions + cell.tokenDuplicates > 0) {
    reasons.push(`${cell.tokenRegressions} token regressions, ${cell.tokenDuplicates} duplicates`);
  }
  const insideDelay = cell.grantsInsideDelay ?? 0;
  if (insideDelay > 0) {
    reasons.push(`${insideDelay} grants inside the lock-delay of ${lockDelayMs} ms`);
  }
  if (fault.id === 'F0' && cell.believedOverlaps > 0) {
    reasons.push(
      permits === undefined
        ? `${cell.believedOverlaps} double grants without any fault`
        : `${cell.believedOverlaps} grants beyond ${permits} permits without any fault`,
    );
  }
  const outside = fault.outsideAssumptions?.includes(backend) === true;
  if (reasons.length > 0 && outside) reasons.push(`outside its assumptions: ${fault.assumption}`);
  // A semaphore's register also refuses a valid holder that N later holders outran, so a
  // rejected write alone does not show that the fault bit: a lapsed holder's refused write does,
  // and so do more than N holders writing at once (the register kept N of them).
  const bitten =
    permits === undefined
      ? cell.staleRejected > 0
      : cell.lapsedWritesRejected > 0 || cell.maxWriting > permits;
  // A lock-delay cell under a fault that kills or pauses a holder proves nothing about the
  // delay unless a fault hit a holder whose grant was alive (the checker judged it).
  const delayUntested =
    lockDelayMs > 0 &&
    cell.delayFaults === 0 &&
    runs.some((r) => r.faults.some((f) => f.killed === true || f.paused === true));
  if (reasons.length === 0 && delayUntested) {
    return {
      ...cell,
      verdict: 'not exercised',
      reasons: ['no fault hit a holder with a live grant: the lock-delay was not tested'],
    };
  }
  const verdict: CellVerdict =
    reasons.length > 0
      ? outside
        ? 'documented failure'
        : 'fail'
      : fault.bites.includes(backend) && !bitten
        ? 'not exercised'
        : 'pass';
  return { ...cell, verdict, reasons };
}

/**
 * Run the matrix: per backend, its lock cells, then its semaphore cells, then its election's
 * (with `options.lockDelayMs`, lock-delay cells of the lock and the election, skipped with the
 * reason on a backend without `capabilities.lockDelay`).
 * @throws LockDelayOnSemaphore with a lock-delay and semaphore cells.
 */
export async function runMatrix(options: MatrixOptions, command: string): Promise<MatrixResult> {
  const lockDelayMs = options.lockDelayMs ?? 0;
  if (lockDelayMs > 0 && options.primitives.includes('semaphore')) {
    throw new LockDelayOnSemaphore();
  }
  const cells: CellSummary[] = [];
  const chosen = (f: FaultSpec) => options.faults.length === 0 || options.faults.includes(f.id);
  const lockFaults = options.primitives.includes('lock') ? FAULTS.filter(chosen) : [];
  const clientFaults = (primitive: Primitive) =>
    options.primitives.includes(primitive)
      ? FAULTS.filter((f) => chosen(f) && options.clientFaults.includes(f.id))
      : [];
  const semaphoreFaults = clientFaults('semaphore');
  const electionFaults = clientFaults('election');
  for (const backend of options.backends) {
    const ttlMs = ttlFor(backend, options.ttlMs);
    const lock = lockFaults.filter((f) => f.backends.includes(backend));
    const election = electionFaults.filter((f) => f.backends.includes(backend));
    const delay = lockDelayMs > 0 ? { lockDelayMs } : {};
    const withoutDelay =
      lockDelayMs > 0 && lock.length + election.length > 0
        ? await capabilityUnavailable(backend, 'lockDelay')
        : undefined;
    for (const fault of lock) {
      cells.push(await runCellRuns(options, { backend, fault, ttlMs, ...delay }, withoutDelay));
    }
    const semaphore = semaphoreFaults.filter((f) => f.backends.includes(backend));
    const withoutPermits =
      semaphore.length > 0 ? await capabilityUnavailable(backend, 'semaphore') : undefined;
    for (const fault of semaphore) {
      cells.push(
        await runCellRuns(
          options,
          { backend, fault, ttlMs, permits: options.permits },
          withoutPermits,
        ),
      );
    }
    const withoutElections =
      election.length > 0 ? await capabilityUnavailable(backend, 'election') : undefined;
    for (const fault of election) {
      cells.push(
        await runCellRuns(
          options,
          { backend, fault, ttlMs, election: true, ...delay },
          withoutElections ?? withoutDelay,
        ),
      );
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
 * One cell, `options.runs` times, summed and logged. `unavailable`: why the cell cannot run here
 * (its runs are skipped with that reason).
 */
async function runCellRuns(
  options: MatrixOptions,
  cell: Pick<CellOptions, 'backend' | 'fault' | 'ttlMs' | 'permits' | 'election' | 'lockDelayMs'>,
  unavailable?: string,
): Promise<CellSummary> {
  const { backend, fault, ttlMs, permits } = cell;
  const lockDelayMs = cell.lockDelayMs ?? 0;
  const primitive: Primitive =
    cell.election === true ? 'election' : permits === undefined ? 'lock' : 'semaphore';
  const runs: CellRun[] = [];
  for (let seed = 1; seed <= options.runs; seed++) {
    const settings: CellOptions = {
      ...cell,
      clients: options.clients,
      durationMs: options.durationMs,
      fenced: true,
    };
    runs.push(
      unavailable === undefined ? await runCell(settings) : skippedRun(settings, unavailable),
    );
  }
  const summary = summarize(backend, fault, ttlMs, runs, permits, primitive, lockDelayMs);
  const name = `${
    primitive === 'lock'
      ? fault.id
      : primitive === 'election'
        ? `${fault.id} election`
        : `${fault.id} semaphore/${permits}`
  }${lockDelayMs > 0 ? ` delay ${lockDelayMs}` : ''}`;
  const inside =
    permits === undefined
      ? lockDelayMs > 0
        ? `, inside the delay ${summary.grantsInsideDelay} (${summary.delayFaults} faults judged), next grant p50 ${summary.livenessP50Ms ?? '–'} ms`
        : ''
      : `, most inside ${summary.maxInside}`;
  options.log(
    `${backend.padEnd(17)} ${name.padEnd(4)} ${summary.verdict.padEnd(13)} grants ${summary.grants}${inside}, stale rejected ${summary.staleRejected}, accepted ${summary.staleAccepted}, double grants ${summary.believedOverlaps}${summary.reasons.length > 0 ? ` (${summary.reasons.join('; ')})` : ''}`,
  );
  return summary;
}

/**
 * The checker's self-test (docs/guarantees.md, "Checker self-test"): broken variants that the
 * checker must fail. Of the lock (when lock cells are chosen):
 * 1. Fencing off: the register accepts every write; a paused Redis holder's late write is then
 *    a stale write accepted.
 * 2. A Redlock quorum of 2 of 5: half the clients see nodes 1–3, the other half nodes 3–5, so
 *    each needs only 2 of the 5 real nodes; two clients then hold the lock at once.
 * Of the semaphore (when semaphore cells are chosen), on Redis with fencing off:
 * 3. Clients that ignore the permit count: they take permits of a semaphore of N + 2 while the
 *    checker allows N, so more than N holders are inside at once.
 * 4. A holder that writes after its permit lapsed (paused past its TTL, N newer holders in).
 * With a lock-delay (when lock cells are chosen), on Redis:
 * 5. A store that ignores the lock-delay: the clients ask for none while the checker expects
 *    one of at least 3 × TTL; the holder is killed, and the next grant comes after its TTL,
 *    inside the delay the checker expects.
 */
async function runSelfTest(options: MatrixOptions): Promise<SelfTestResult[]> {
  const results: SelfTestResult[] = [];
  if (options.primitives.includes('lock')) results.push(...(await lockSelfTest(options)));
  if (options.primitives.includes('lock') && (options.lockDelayMs ?? 0) > 0) {
    results.push(await lockDelaySelfTest(options));
  }
  if (options.primitives.includes('semaphore')) {
    results.push(...(await semaphoreSelfTest(options)));
  }
  for (const result of results) {
    options.log(`self-test: ${result.name}: ${result.caught ? 'caught' : 'NOT CAUGHT'}`);
  }
  return results;
}

async function lockSelfTest(options: MatrixOptions): Promise<SelfTestResult[]> {
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
  return results;
}

async function lockDelaySelfTest(options: MatrixOptions): Promise<SelfTestResult> {
  const kill = FAULTS.find((f) => f.id === 'F1')!;
  // Longer than the TTL the next grant waits for without a delay, so that it falls inside.
  const lockDelayMs = Math.max(options.lockDelayMs ?? 0, 3 * options.ttlMs);
  const ignored = await runCell({
    backend: 'redis',
    fault: kill,
    ttlMs: options.ttlMs,
    clients: options.clients,
    durationMs: options.durationMs,
    fenced: true,
    lockDelayMs,
    clientLockDelayMs: 0,
  });
  const cell = summarize('redis', kill, options.ttlMs, [ignored], undefined, 'lock', lockDelayMs);
  return {
    name: `lock-delay ignored (Redis, holder killed; the clients ask for none, the checker expects ${lockDelayMs} ms)`,
    expectation: 'grants inside the lock-delay > 0, cell fails',
    caught: cell.verdict === 'fail' && (cell.grantsInsideDelay ?? 0) > 0,
    cell,
  };
}

async function semaphoreSelfTest(options: MatrixOptions): Promise<SelfTestResult[]> {
  const { permits } = options;
  const pause = FAULTS.find((f) => f.id === 'F2')!;
  const none = FAULTS.find((f) => f.id === 'F0')!;
  const clientPermits = permits + 2;
  const overfull = await runCell({
    backend: 'redis',
    fault: none,
    ttlMs: options.ttlMs,
    // Enough clients to fill the larger semaphore and wait for it.
    clients: Math.max(options.clients, clientPermits + 1),
    durationMs: options.durationMs,
    fenced: false,
    permits,
    clientPermits,
  });
  const overfullCell = summarize('redis', none, options.ttlMs, [overfull], permits);
  const lapsed = await runCell({
    backend: 'redis',
    fault: pause,
    ttlMs: options.ttlMs,
    clients: options.clients,
    durationMs: options.durationMs,
    fenced: false,
    permits,
  });
  const lapsedCell = summarize('redis', pause, options.ttlMs, [lapsed], permits);
  return [
    {
      name: `semaphore ignoring its permit count (Redis, clients take permits of ${clientPermits} where ${permits} are allowed, fencing off)`,
      expectation: `more than ${permits} holders inside at once, cell fails`,
      caught: overfullCell.verdict === 'fail' && (overfullCell.maxInside ?? 0) > permits,
      cell: overfullCell,
    },
    {
      name: `semaphore holder writing after its permit lapsed (Redis, ${permits} permits, holder paused, fencing off)`,
      expectation: 'stale writes accepted > 0, cell fails',
      caught: lapsedCell.verdict === 'fail' && lapsedCell.staleAccepted > 0,
      cell: lapsedCell,
    },
  ];
}
