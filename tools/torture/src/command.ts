/**
 * `npm run torture`: run the fault-injection matrix (this folder) against the engines of
 * `scripts/services.sh`, and `npm run torture:report -- <result.json>`: regenerate
 * docs/guarantees.md, its chart and the README summary from a committed result (`torture merge`
 * joins results made in parts first). `--lock-delay <ms>` runs lock-delay cells instead of the
 * plain ones (tools/torture/README.md). Only option parsing and file writing here; the harness is
 * in harness.ts and matrix.ts.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { parseIntegerOption, UsageError } from '@fencelock/cli/tooling';
import type { Command } from 'commander';
import type { MatrixResult } from './matrix.js';

interface TortureCliOptions {
  readonly backend?: string[];
  readonly fault?: string[];
  readonly primitive?: string[];
  readonly permits: string;
  readonly lockDelay: string;
  readonly runs: string;
  readonly ttl: string;
  readonly clients: string;
  readonly duration: string;
  readonly quick: boolean;
  readonly selfTest: boolean;
  readonly out: string;
}

const README_START = '<!-- guarantees:start -->';
const README_END = '<!-- guarantees:end -->';

/** Add `torture` and `torture report` to `program`. */
export function registerTortureCommand(program: Command): void {
  const torture = program
    .command('torture')
    .description(
      'fault-injection matrix: clients contend under faults (kill -9, SIGSTOP, partitions, restarts…) and a fenced register judges every run',
    )
    .option('--backend <names...>', 'backends to run (default: all)')
    .option(
      '--fault <ids...>',
      'faults to run, e.g. F1 F2 (default: all that apply; docs/guarantees.md describes each)',
    )
    .option(
      '--primitive <names...>',
      'cells to run: lock, semaphore (clients take permits of a semaphore instead of the lock), election (clients campaign in a leader election, the term as token); semaphore and election cells run under F0 to F3, F1 and F2 with --quick (default: all three; lock and election with --lock-delay)',
    )
    .option('--permits <n>', 'permits of the semaphore in the semaphore cells', '2')
    .option(
      '--lock-delay <ms>',
      'lock-delay cells: every lock grant and leadership carries this lockDelayMs (0 to 60000; 0: none, the plain cells); the checker counts grants inside the delay of a killed (F1) or paused (F2) holder, which must be 0, and the report gives the fault-to-next-grant time beside D. Lock and election cells only (default --primitive lock election; semaphore is refused: permits carry no lock-delay); a backend without capabilities.lockDelay has its cells skipped. Results merge beside the plain cells',
      '0',
    )
    .option('--runs <n>', 'runs per cell', '1')
    .option('--ttl <ms>', 'lease TTL of the clients (etcd: at least 2000)', '2000')
    .option('--clients <n>', 'contending client processes per run', '5')
    .option('--duration <ms>', 'length of one run', '8000')
    .option(
      '--quick',
      'the short CI schedule: one run per cell, 1 s TTL, 5 s runs, semaphore cells under F1 and F2 only',
    )
    .option('--no-self-test', 'skip the checker self-test (broken variants)')
    .option('--out <dir>', 'folder for <date>.json, .md and .svg', 'docs/torture')
    .action(async (raw: TortureCliOptions) => {
      const { BACKENDS } = await import('./topologies.js');
      const { FAULTS } = await import('./faults.js');
      const backends = raw.backend ?? [...BACKENDS];
      for (const name of backends) {
        if (!(BACKENDS as readonly string[]).includes(name)) {
          throw new UsageError(
            '--backend',
            `--backend: ${name} is not one of ${BACKENDS.join(', ')}`,
          );
        }
      }
      const faults = raw.fault ?? [];
      for (const id of faults) {
        if (!FAULTS.some((f) => f.id === id)) {
          throw new UsageError(
            '--fault',
            `--fault: ${id} is not one of ${FAULTS.map((f) => f.id).join(', ')}`,
          );
        }
      }
      const { MAX_PERMITS, MAX_LOCK_DELAY_MS } = await import('fencelock');
      const lockDelayMs = parseIntegerOption('--lock-delay', raw.lockDelay, 0, MAX_LOCK_DELAY_MS);
      const primitives = torturePrimitives(raw.primitive, lockDelayMs);
      const { QUICK_CLIENT_FAULTS, CLIENT_FAULTS } = await import('./primitive-cells.js');
      const options = {
        backends: backends as (typeof BACKENDS)[number][],
        faults,
        primitives,
        clientFaults: raw.quick ? QUICK_CLIENT_FAULTS : CLIENT_FAULTS,
        permits: parseIntegerOption('--permits', raw.permits, 1, MAX_PERMITS),
        ...(lockDelayMs > 0 ? { lockDelayMs } : {}),
        runs: raw.quick ? 1 : parseIntegerOption('--runs', raw.runs, 1, 1000),
        ttlMs: raw.quick ? 1_000 : parseIntegerOption('--ttl', raw.ttl, 500, 60_000),
        clients: parseIntegerOption('--clients', raw.clients, 2, 32),
        durationMs: raw.quick
          ? 5_000
          : parseIntegerOption('--duration', raw.duration, 2_000, 600_000),
        selfTest: raw.selfTest,
        log: (line: string) => process.stderr.write(`${line}\n`),
      };
      const { runMatrix } = await import('./matrix.js');
      const {
        markdownTable,
        semaphoreTable,
        electionTable,
        lockDelayTable,
        svgChart,
        headline,
        selfTestLines,
        faultLegend,
      } = await import('./report.js');
      const command = `npm run torture -- ${process.argv.slice(3).join(' ')}`.trim();
      const result = await runMatrix(options, command);
      mkdirSync(raw.out, { recursive: true });
      const stem = join(raw.out, result.generatedAt.slice(0, 10));
      const json = JSON.stringify(result, null, 2);
      writeFileSync(`${stem}.json`, `${json}\n`);
      writeFileSync(
        `${stem}.md`,
        `${headline(result)}\n\n${faultLegend(result)}\n\n${markdownTable(result)}\n\n${semaphoreTable(result)}\n\n${electionTable(result)}\n\n${lockDelayTable(result)}\n\n${selfTestLines(result)}\n`,
      );
      writeFileSync(`${stem}.svg`, svgChart(result));
      process.stdout.write(
        `${headline(result)}\n${selfTestLines(result)}\nwritten: ${stem}.json, .md, .svg\n`,
      );
      const failed = result.cells.filter((c) => c.verdict === 'fail');
      const uncaught = result.selfTest.filter((t) => !t.caught);
      if (failed.length > 0 || uncaught.length > 0) process.exitCode = 1;
    });

  torture
    .command('merge <out> <parts...>')
    .description(
      'merge results made in parts (same settings, disjoint backend × fault cells) into <out>, for report',
    )
    .action(async (out: string, sources: string[]) => {
      const { mergeResults, MergeConflict } = await import('./merge.js');
      try {
        const merged = mergeResults(sources.map(readResult));
        writeFileSync(out, `${JSON.stringify(merged, null, 2)}\n`);
        process.stdout.write(
          `written: ${out} (${merged.cells.length} cells from ${sources.length} parts)\n`,
        );
      } catch (error) {
        if (error instanceof MergeConflict)
          throw new UsageError('merge', `merge: ${error.message}`);
        throw error;
      }
    });

  torture
    .command('report <result>')
    .description(
      'regenerate docs/guarantees.md, its chart and the README summary from a result JSON',
    )
    .action(async (source: string) => {
      const result = readResult(source);
      const { guaranteesPage, readmeSummary, svgChart } = await import('./report.js');
      const chart = join('torture', `${basename(source, '.json')}.svg`);
      mkdirSync(join('docs', dirname(chart)), { recursive: true });
      writeFileSync(join('docs', chart), svgChart(result));
      writeFileSync('docs/guarantees.md', guaranteesPage(result, source, chart));
      const readme = readFileSync('README.md', 'utf8');
      const start = readme.indexOf(README_START);
      const end = readme.indexOf(README_END);
      if (start < 0 || end < start) {
        throw new UsageError(
          'report',
          `report: README.md has no ${README_START} … ${README_END} section`,
        );
      }
      const updated = `${readme.slice(0, start + README_START.length)}\n${readmeSummary(result, source)}\n${readme.slice(end)}`;
      writeFileSync('README.md', updated);
      process.stdout.write(`written: docs/guarantees.md, docs/${chart}, README.md\n`);
    });
}

/**
 * The primitives of a run from `--primitive` (all three when absent) and `--lock-delay`: with a
 * lock-delay, lock and election (when absent), and semaphore is refused, since permits carry no
 * lock-delay.
 * @throws UsageError naming the option at fault.
 */
export function torturePrimitives(
  chosen: readonly string[] | undefined,
  lockDelayMs: number,
): ('lock' | 'semaphore' | 'election')[] {
  const primitives =
    chosen ?? (lockDelayMs > 0 ? ['lock', 'election'] : ['lock', 'semaphore', 'election']);
  for (const name of primitives) {
    if (name !== 'lock' && name !== 'semaphore' && name !== 'election') {
      throw new UsageError(
        '--primitive',
        `--primitive: ${name} is not one of lock, semaphore, election`,
      );
    }
  }
  if (lockDelayMs > 0 && primitives.includes('semaphore')) {
    throw new UsageError(
      '--lock-delay',
      '--lock-delay: semaphore permits carry no lock-delay; run lock-delay cells with --primitive lock election (or leave out --primitive)',
    );
  }
  return primitives as ('lock' | 'semaphore' | 'election')[];
}

/** A result JSON written by `torture` or `torture merge`. */
function readResult(source: string): MatrixResult {
  try {
    return JSON.parse(readFileSync(source, 'utf8'));
  } catch (error) {
    throw new UsageError('result', `cannot read ${source}: ${(error as Error).message}`);
  }
}
