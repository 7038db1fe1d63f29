/**
 * `fencelock bench [options]`: the benchmark suite of the repository (`bench/run.mjs`, the same
 * as `npm run bench`), with the options passed through (`fencelock bench --help` lists them).
 * The suite drives peer libraries installed as devDependencies, so it runs from a clone of the
 * repository; the published package has no `bench/`. Only process plumbing here.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { UsageError } from '../options.js';

/** `bench/run.mjs` of the clone this CLI was built in: the nearest one above this module. */
function findBenchScript(): string | undefined {
  for (let dir = dirname(fileURLToPath(import.meta.url)); ; dir = dirname(dir)) {
    const script = join(dir, 'bench', 'run.mjs');
    if (existsSync(script) && existsSync(join(dir, 'package.json'))) return script;
    if (dirname(dir) === dir) return undefined;
  }
}

/** Add `bench` to `program`. */
export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description(
      'benchmark fencelock beside peer libraries and the raw engine (from a clone of the repository; options: fencelock bench --help)',
    )
    .helpOption(false)
    .allowUnknownOption(true)
    .argument('[options...]', 'passed to bench/run.mjs')
    .action(async (args: string[]) => {
      const script = findBenchScript();
      if (script === undefined) {
        throw new UsageError(
          'bench',
          'bench: no bench/run.mjs here; the benchmark runs from a clone of the repository (npm run bench), not from the published package',
        );
      }
      const child = spawn(process.execPath, [script, ...args], { stdio: 'inherit' });
      process.exitCode = await new Promise<number>((resolve) => {
        child.once('error', () => resolve(1));
        child.once('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
      });
    });
}
