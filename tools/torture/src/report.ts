/**
 * Reports of a torture matrix: the markdown tables (lock, semaphore, election and lock-delay cells), the SVG chart
 * (liveness gaps and double-grant rates per cell) and the guarantees page, all generated from
 * the JSON result.
 */
import type { CellSummary, MatrixResult } from './matrix.js';

const dash = (value: number | null, suffix = '') => (value === null ? '–' : `${value}${suffix}`);

/** Whether a cell is a semaphore's (cells of results older than semaphore cells are locks). */
const isSemaphore = (cell: CellSummary) => cell.primitive === 'semaphore';

/** Whether a cell is a lock-delay cell (a lock's or an election's; `torture --lock-delay`). */
const isLockDelay = (cell: CellSummary) => (cell.lockDelayMs ?? 0) > 0;

/** Whether a cell is a leader election's without a lock-delay. */
const isElection = (cell: CellSummary) => cell.primitive === 'election' && !isLockDelay(cell);

/**
 * Whether a cell is a lock's without a lock-delay (no `primitive` in results older than
 * semaphore cells).
 */
const isLock = (cell: CellSummary) =>
  (cell.primitive === undefined || cell.primitive === 'lock') && !isLockDelay(cell);

const verdictText = (c: CellSummary) =>
  `${c.verdict}${c.reasons.length > 0 ? `: ${c.reasons.join('; ')}` : ''}`;

/** The lock cells' table as markdown. */
export function markdownTable(result: MatrixResult): string {
  return exclusiveTable(result.cells.filter(isLock));
}

/**
 * The election cells' table as markdown: the lock table's columns, a grant being a leadership
 * and its term the token (skipped cells say why).
 */
export function electionTable(result: MatrixResult): string {
  const cells = result.cells.filter(isElection);
  if (cells.length === 0) return '_No election cells were run._';
  return exclusiveTable(cells);
}

/** The table of cells with one holder at a time (locks, elections). */
function exclusiveTable(cells: readonly CellSummary[]): string {
  const header =
    '| backend | fault | runs | grants | double grants (runs) | stale writes rejected | stale writes accepted | token regressions / duplicates | next grant after fault p50 / p99 (× TTL) | loss detected p50 / p99 (ms) | verdict |';
  const rule = `|${' --- |'.repeat(11)}`;
  const rows = cells.map(
    (c) =>
      `| ${c.backend} | ${c.fault} | ${c.runs} | ${c.grants} | ${c.believedOverlaps} (${c.doubleGrantRuns}) | ${c.staleRejected} | **${c.staleAccepted}** | ${c.tokenRegressions} / ${c.tokenDuplicates} | ${dash(c.livenessP50Ttl)} / ${dash(c.livenessP99Ttl)} | ${dash(c.lossDetectionP50Ms)} / ${dash(c.lossDetectionP99Ms)} | ${verdictText(c)} |`,
  );
  return [header, rule, ...rows].join('\n');
}

/**
 * The semaphore cells' table as markdown: per cell, the grants (permits), the most holders the
 * register saw inside at once against the permits and the most writing at once (accepted or
 * not: above the permits, a fault put more writers at the resource than it allows), stale
 * writes rejected and accepted (a write whose token was not among the N highest written),
 * writes made after the writer's permit lapsed (accepted / rejected), grants beyond the permits
 * as the library believed them, and the verdict (skipped cells say why).
 */
export function semaphoreTable(result: MatrixResult): string {
  const cells = result.cells.filter(isSemaphore);
  if (cells.length === 0) return '_No semaphore cells were run._';
  const header =
    '| backend | fault | permits | runs | grants | most holders inside at once (≤ permits) | most holders writing at once | stale writes rejected | stale writes accepted | writes after the permit lapsed: accepted / rejected | grants beyond the permits (runs) | token regressions / duplicates | all permits in use again after fault p50 / p99 (× TTL) | verdict |';
  const rule = `|${' --- |'.repeat(14)}`;
  const rows = cells.map((c) => {
    const skipped = c.verdict === 'skipped';
    const figure = (value: number | string) => (skipped ? '–' : value);
    return `| ${c.backend} | ${c.fault} | ${c.permits ?? 1} | ${c.runs} | ${figure(c.grants)} | ${figure(c.maxInside ?? '–')} | ${figure(c.maxWriting ?? '–')} | ${figure(c.staleRejected)} | **${figure(c.staleAccepted)}** | ${figure(`${c.lapsedWritesAccepted ?? '–'} / ${c.lapsedWritesRejected ?? '–'}`)} | ${figure(`${c.believedOverlaps} (${c.doubleGrantRuns})`)} | ${figure(`${c.tokenRegressions} / ${c.tokenDuplicates}`)} | ${dash(c.livenessP50Ttl)} / ${dash(c.livenessP99Ttl)} | ${verdictText(c)} |`;
  });
  return [header, rule, ...rows].join('\n');
}

/**
 * The lock-delay cells' table as markdown: per cell, the primitive (lock or election), the
 * delay D every grant carried, the time from the fault to the next grant to another client (ms
 * and × TTL: after a kill or a pause it should be at least D, on top of the TTL running out),
 * the grants made inside the delay of a killed or paused holder whose grant was alive at the
 * fault (must be 0) out of the faults so judged, stale writes accepted, and the verdict
 * (skipped cells say why).
 */
export function lockDelayTable(result: MatrixResult): string {
  const cells = result.cells.filter(isLockDelay);
  if (cells.length === 0) return '_No lock-delay cells were run._';
  const header =
    '| backend | primitive | fault | runs | lock-delay D (ms) | grants | next grant after fault p50 / p99 (ms) | next grant after fault p50 / p99 (× TTL) | grants inside the delay (faults judged) | stale writes accepted | verdict |';
  const rule = `|${' --- |'.repeat(11)}`;
  const rows = cells.map((c) => {
    const skipped = c.verdict === 'skipped';
    const figure = (value: number | string) => (skipped ? '–' : value);
    return `| ${c.backend} | ${c.primitive ?? 'lock'} | ${c.fault} | ${c.runs} | ${c.lockDelayMs} | ${figure(c.grants)} | ${dash(c.livenessP50Ms ?? null)} / ${dash(c.livenessP99Ms ?? null)} | ${dash(c.livenessP50Ttl)} / ${dash(c.livenessP99Ttl)} | ${figure(`**${c.grantsInsideDelay ?? 0}** (${c.delayFaults ?? 0})`)} | ${figure(c.staleAccepted)} | ${verdictText(c)} |`;
  });
  return [header, rule, ...rows].join('\n');
}

/** The fault legend (id → what was done). */
export function faultLegend(result: MatrixResult): string {
  const seen = new Map<string, string>();
  for (const cell of result.cells) seen.set(cell.fault, cell.title);
  return [...seen].map(([id, title]) => `- **${id}**: ${title}`).join('\n');
}

/** The self-test lines. */
export function selfTestLines(result: MatrixResult): string {
  if (result.selfTest.length === 0) return '_The self-test was not run._';
  return result.selfTest
    .map(
      (t) =>
        `- ${t.name}: ${t.caught ? 'caught' : '**not caught**'} (${t.cell.staleAccepted} stale writes accepted, ${t.cell.believedOverlaps} double grants${isSemaphore(t.cell) ? `, most holders inside at once ${t.cell.maxInside ?? '–'} of ${t.cell.permits ?? 1} allowed` : ''}; expected: ${t.expectation}).`,
    )
    .join('\n');
}

/** Horizontal bars: next-grant gap p50/p99 (× TTL) and double-grant rate per cell. */
export function svgChart(result: MatrixResult): string {
  const cells = result.cells;
  const rowHeight = 18;
  const labelWidth = 190;
  const panelWidth = 300;
  const top = 40;
  const height = top + cells.length * rowHeight + 30;
  const width = labelWidth + 2 * panelWidth + 60;
  const maxGap = Math.max(1, ...cells.map((c) => c.livenessP99Ttl ?? 0));
  const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<title>fencelock torture: next grant after each fault and runs with a double grant, per backend and fault</title>`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${labelWidth}" y="16" font-weight="bold">${cells.some(isSemaphore) ? 'next grant (sem/N: all N permits in use) after the fault (× TTL)' : 'next grant after the fault (× TTL): p50 dark, p99 light'}</text>`,
    `<text x="${labelWidth + panelWidth + 40}" y="16" font-weight="bold">${cells.some(isSemaphore) ? 'runs with a double grant (sem/N: beyond N)' : 'runs with a double grant (lock alone)'}</text>`,
  ];
  cells.forEach((cell, i) => {
    const y = top + i * rowHeight;
    const delay = isLockDelay(cell) ? ` delay ${cell.lockDelayMs}` : '';
    const label = isSemaphore(cell)
      ? `${cell.backend} ${cell.fault} sem/${cell.permits ?? 1}`
      : cell.primitive === 'election'
        ? `${cell.backend} ${cell.fault} election${delay}`
        : `${cell.backend} ${cell.fault}${delay}`;
    parts.push(`<text x="4" y="${y + 12}">${escapeXml(label)}</text>`);
    const p99 = ((cell.livenessP99Ttl ?? 0) / maxGap) * panelWidth;
    const p50 = ((cell.livenessP50Ttl ?? 0) / maxGap) * panelWidth;
    parts.push(
      `<rect x="${labelWidth}" y="${y + 3}" width="${p99.toFixed(1)}" height="12" fill="#9ecae1"/>`,
    );
    parts.push(
      `<rect x="${labelWidth}" y="${y + 3}" width="${p50.toFixed(1)}" height="12" fill="#3182bd"/>`,
    );
    if (cell.livenessP99Ttl !== null) {
      parts.push(
        `<text x="${labelWidth + p99 + 4}" y="${y + 12}">${cell.livenessP50Ttl} / ${cell.livenessP99Ttl}</text>`,
      );
    }
    const rate = cell.runs === 0 ? 0 : cell.doubleGrantRuns / cell.runs;
    const x = labelWidth + panelWidth + 40;
    if (cell.verdict === 'skipped') {
      parts.push(`<text x="${x}" y="${y + 12}" fill="#555">skipped</text>`);
      return;
    }
    parts.push(
      `<rect x="${x}" y="${y + 3}" width="${(rate * panelWidth).toFixed(1)}" height="12" fill="${rate > 0 ? '#e6550d' : '#31a354'}"/>`,
    );
    parts.push(
      `<text x="${x + rate * panelWidth + 4}" y="${y + 12}">${(rate * 100).toFixed(0)}%${cell.staleAccepted > 0 ? ' STALE ACCEPTED' : ''}</text>`,
    );
  });
  parts.push(
    `<text x="4" y="${height - 8}" fill="#555">${escapeXml(`${result.generatedAt} · ${result.command}`)}</text>`,
    '</svg>',
  );
  return `${parts.join('\n')}\n`;
}

/** Totals for the headline. */
function totals(cells: readonly CellSummary[]) {
  const sum = (pick: (c: CellSummary) => number) => cells.reduce((n, c) => n + pick(c), 0);
  return {
    runs: sum((c) => c.runs),
    writes: sum((c) => c.writes),
    staleAccepted: sum((c) => c.staleAccepted),
    staleRejected: sum((c) => c.staleRejected),
    failed: cells.filter((c) => c.verdict === 'fail').length,
    documented: cells.filter((c) => c.verdict === 'documented failure').length,
    notExercised: cells.filter((c) => c.verdict === 'not exercised').length,
    skipped: cells.filter((c) => c.verdict === 'skipped').length,
  };
}

/** The headline sentence of a result. */
export function headline(result: MatrixResult): string {
  const t = totals(result.cells);
  const backends = new Set(result.cells.map((c) => c.backend)).size;
  const faults = new Set(result.cells.map((c) => c.fault)).size;
  const semaphores = result.cells.filter(isSemaphore);
  const elections = result.cells.filter(isElection);
  const delays = result.cells.filter(isLockDelay);
  const permits = [...new Set(semaphores.map((c) => c.permits ?? 1))].join(' or ');
  const kinds =
    semaphores.length + elections.length + delays.length > 0
      ? ` (${[
          `${result.cells.filter(isLock).length} lock cells`,
          semaphores.length > 0 ? `${semaphores.length} semaphore cells of ${permits} permits` : '',
          elections.length > 0 ? `${elections.length} election cells` : '',
          delays.length > 0 ? `${delays.length} lock-delay cells` : '',
        ]
          .filter((part) => part !== '')
          .join(', ')})`
      : '';
  return `${t.staleAccepted} stale writes accepted and ${t.staleRejected} rejected by the fenced register, over ${t.runs} runs (${t.writes} fenced writes) of ${faults} faults on ${backends} backends${kinds}; ${t.failed} cells failed${t.documented > 0 ? ` (and ${t.documented} failed as their backend documents, outside its assumptions)` : ''}, ${t.notExercised} not exercised${skippedText(result.cells)}.`;
}

/**
 * ", N skipped (why)" for the headline: faults missing on the machine, stores without semaphores
 * or elections.
 */
function skippedText(cells: readonly CellSummary[]): string {
  const skipped = cells.filter((c) => c.verdict === 'skipped');
  const locks = skipped.filter(isLock).length;
  const semaphores = skipped.filter(isSemaphore).length;
  const elections = skipped.filter(isElection).length;
  const delays = skipped.filter(isLockDelay).length;
  const parts = [
    locks > 0 ? `${locks} skipped (fault not available on the machine)` : '',
    semaphores > 0 ? `${semaphores} semaphore cells skipped (reasons in the table)` : '',
    elections > 0 ? `${elections} election cells skipped (reasons in the table)` : '',
    delays > 0 ? `${delays} lock-delay cells skipped (reasons in the table)` : '',
  ];
  return parts
    .filter((part) => part !== '')
    .map((part) => `, ${part}`)
    .join('');
}

/** docs/guarantees.md, generated from a committed result. */
export function guaranteesPage(result: MatrixResult, source: string, chart: string): string {
  return `# Guarantees, measured

<!-- Generated by \`npm run torture:report -- ${source}\` from ${source}; do not edit by hand. -->

Every figure below comes from \`npm run torture\`: ${result.settings.clients} client processes
contend for one key on a real engine, each writing through a fenced register (a PostgreSQL
server that no fault touches) after it acquires, while a fault (listed below) hits the holder.
The checker counts stale writes the register accepted (must be 0) and rejected (how often
fencing saved the day), double grants as the lock alone delivered them (two clients that
believed they held the lock at the same moment), token regressions and duplicates, the time
from the fault to the next grant to another client, and the time the library took to report a
lease lost once the engine had given it away.

**${headline(result)}**

Reproduce: \`${result.command}\` (${result.settings.runs} runs per cell, TTL ${result.settings.ttlMs} ms,
${result.settings.durationMs} ms per run; etcd leases are at least 2 s). Machine:
${result.machine.cpus} CPUs, load average ${result.machine.loadAverage.join(' / ')} at the end,
Node ${result.machine.node}, ${result.generatedAt}.

## Faults

${faultLegend(result)}

## Results

${markdownTable(result)}

Verdicts: **fail** — stale writes accepted, lost register updates, token regressions or
duplicates on a backend that promises strict tokens, or double grants without any fault;
**not exercised** — the fault can make a stale holder write on this backend, but no stale
write happened in these runs, so the cell proves nothing about fencing; **documented
failure** — a failure under a fault outside the backend's documented assumptions (the reason
names the assumption; Redlock's delayed restart is the case); **skipped** — the
fault could not be caused on the machine (the reason says which tool was missing); **pass**
otherwise.
Double grants are expected under pauses, partitions and early expiry on every backend
(Kleppmann; Jepsen on etcd): that is what the fencing token is for.

ZooKeeper, seen in the fault tests (the \`zookeeper\` package 7.3.0): a child process that
inherited a client socket (the package does not set close-on-exec) and outlived it made every
new client given that descriptor number lose its session at once, so new sessions failed in
that process ([ZooKeeper](engines/zookeeper.md), "Child processes"). Sessions already open and locks already held
were not affected: an availability issue, not a safety one.

![liveness and double grants](${chart})

${semaphoreSection(result)}${electionSection(result)}${lockDelaySection(result)}## Checker self-test

${selfTestLines(result)}
`;
}

/**
 * The guarantees page's semaphore section (empty for a result without semaphore cells), ending
 * in a blank line.
 */
function semaphoreSection(result: MatrixResult): string {
  if (!result.cells.some(isSemaphore)) return '';
  return `## Semaphores

The same runs with a semaphore of N permits: every client takes a permit
(\`locker.semaphore(key, { permits }).acquire()\`) instead of the lock and writes twice through
the register with the permit's token. The register accepts a write only while its token is
among the N highest written so far (fewer than N higher tokens wrote before it); a write that is
not is stale. At most N permits are valid at once and every later grant has a higher token, so
the rule never lets more than N holders in at once. The checker replays the log: stale writes
accepted must be 0, and the most holders inside at once as the register saw them (from a
holder's first accepted write to its last) must not exceed N. The most holders writing at once
counts rejected writes too: above N, a fault put more writers at the resource than the permits
allow and the register kept N of them. A cell is **not exercised** when, under a fault that can
cause it, neither that happened nor a write made after its writer's permit lapsed was refused.

What the rule keeps is N holders inside, not the N valid ones. A holder whose permit is still
valid but whose write comes after N later holders wrote is refused, and a lapsed holder whose
token is still among the N highest is let in (its valid rival with a lower token is refused
instead); the table counts the writes made after the writer's own permit lapsed (reported lost,
or past the validity it last reported), accepted and rejected. "Grants beyond the permits"
counts grants made while N other clients still believed they held a permit, the semaphore's
double grant; the time after a fault runs until other clients held all N permits at once (the
permit the fault hit was back). A backend whose \`capabilities.permits\` is false has its
semaphore cells skipped, with the reason.

${semaphoreTable(result)}

`;
}

/**
 * The guarantees page's election section (empty for a result without election cells), ending in
 * a blank line.
 */
function electionSection(result: MatrixResult): string {
  if (!result.cells.some(isElection)) return '';
  return `## Leader elections

The same runs with a leader election: every client campaigns in the key's election
(\`locker.election(key).campaign(value)\`) instead of taking the lock, and writes through the
register with its leadership's term as the token. It is judged as a lock: a grant is a
leadership, "double grants" are two clients that believed they led at the same moment, and a
stale write is a deposed leader's write the register accepted. A backend whose
\`capabilities.election\` is false has its election cells skipped, with the reason.

${electionTable(result)}

`;
}

/**
 * The guarantees page's lock-delay section (empty for a result without lock-delay cells), ending
 * in a blank line.
 */
function lockDelaySection(result: MatrixResult): string {
  if (!result.cells.some(isLockDelay)) return '';
  return `## Lock-delay

The same runs (\`npm run torture -- --lock-delay <ms>\`) with every lock grant and leadership
carrying a lock-delay D (\`lockDelayMs\`, Chubby's lock-delay, Consul's session \`LockDelay\`):
when a grant ends without a release, the store grants the key to nobody until D after that end.
For every fault that killed (F1) or paused (F2) a holder whose grant was still alive at the fault
(acquired, not released, not reported lost, within the validity its client last computed), the
grant ended no earlier than the fault, so the checker counts the grants acquired in (fault,
fault + D − slack), the slack being 25 ms + 1% of D for the engines' own clocks; for a pause, up
to the holder's resume at most (a grant that outlived the pause is then released, which clears
the delay). Such a grant fails the cell. The time from the fault to the next grant should be at
least D (after a kill, about the TTL plus D). A cell where no fault hit a live grant is **not
exercised**; a backend whose \`capabilities.lockDelay\` is false has its lock-delay cells
skipped, with the reason. Semaphore permits carry no lock-delay. These cells are kept apart from
the plain lock and election cells above.

${lockDelayTable(result)}

`;
}

/**
 * The README's short summary: the headline, then one row per backend (cells passed of those
 * exercised, stale writes accepted / rejected); the cell-by-cell table is docs/guarantees.md.
 */
export function readmeSummary(result: MatrixResult, source: string): string {
  const backends = [...new Set(result.cells.map((c) => c.backend))];
  const withSemaphores = result.cells.some(isSemaphore);
  const withElections = result.cells.some(isElection);
  const withDelays = result.cells.some(isLockDelay);
  const passedOf = (cells: readonly CellSummary[]) => {
    const exercised = cells.filter((c) => c.verdict !== 'skipped' && c.verdict !== 'not exercised');
    if (cells.length > 0 && cells.every((c) => c.verdict === 'skipped')) return 'skipped';
    return `${exercised.filter((c) => c.verdict === 'pass').length} of ${exercised.length}`;
  };
  const rows = backends.map((backend) => {
    const cells = result.cells.filter((c) => c.backend === backend);
    const locks = passedOf(cells.filter(isLock));
    const semaphores = withSemaphores ? ` ${passedOf(cells.filter(isSemaphore))} |` : '';
    const elections = withElections ? ` ${passedOf(cells.filter(isElection))} |` : '';
    const delays = withDelays ? ` ${passedOf(cells.filter(isLockDelay))} |` : '';
    const accepted = cells.reduce((n, c) => n + c.staleAccepted, 0);
    const rejected = cells.reduce((n, c) => n + c.staleRejected, 0);
    return `| ${backend} | ${locks} |${semaphores}${elections}${delays} ${accepted} / ${rejected} |`;
  });
  const columns = [
    'backend',
    'faults passed',
    ...(withSemaphores ? ['semaphore faults passed'] : []),
    ...(withElections ? ['election faults passed'] : []),
    ...(withDelays ? ['lock-delay faults passed'] : []),
    'stale writes accepted / rejected',
  ];
  return [
    `${headline(result)} Fault by fault, with double grants and liveness: [docs/guarantees.md](docs/guarantees.md), generated from \`${source}\`.`,
    '',
    `| ${columns.join(' | ')} |`,
    `|${' --- |'.repeat(columns.length)}`,
    ...rows,
  ].join('\n');
}
