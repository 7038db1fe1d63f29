/**
 * `fencelock bench …`, `fencelock demo …` and `fencelock torture …`: programs of the repository
 * that are not published (the benchmark suite `bench/run.mjs`, the same as `npm run bench`; the
 * demos of `tools/demos`, as `npm run demo`; the fault matrix of `tools/torture`, as
 * `npm run torture`), run with the arguments passed through. They drive peer libraries
 * and engines installed in a clone, so they run from a clone of the repository; from a published
 * install these commands say so. Only process plumbing here.
 */
import { spawn } from 'node:child_process';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { findInRepository } from '../repository.js';
import { UsageError } from '../usage.js';

/** A command that runs a script of the clone with `node`, passing its arguments on. */
interface RepositoryTool {
  readonly name: string;
  readonly description: string;
  /** The script, relative to the repository's root. */
  readonly script: string;
  /** Arguments put before the user's. */
  readonly leadingArgs: readonly string[];
  /** How to build it when it is missing, for the error message. */
  readonly hint: string;
}

const TOOLS: readonly RepositoryTool[] = [
  {
    name: 'bench',
    description:
      'benchmark fencelock beside peer libraries and the raw engine (from a clone of the repository; options: fencelock bench --help)',
    script: 'bench/run.mjs',
    leadingArgs: [],
    hint: 'the benchmark runs from a clone of the repository (npm run bench)',
  },
  {
    name: 'demo',
    description:
      'run a demonstration: flash-sale or versions (from a clone of the repository; options: fencelock demo --help)',
    script: 'tools/demos/dist/main.js',
    leadingArgs: ['demo'],
    hint: 'the demos run from a clone of the repository, after npm ci (npm run demo)',
  },
  {
    name: 'torture',
    description:
      'the fault-injection matrix against the engines of scripts/services.sh (from a clone of the repository; options: fencelock torture --help)',
    script: 'tools/torture/dist/main.js',
    leadingArgs: ['torture'],
    hint: 'the torture harness runs from a clone of the repository, after npm ci (npm run torture)',
  },
];

/** Add `bench`, `demo` and `torture` to `program`. */
export function registerRepositoryTools(program: Command): void {
  for (const tool of TOOLS) {
    program
      .command(tool.name)
      .description(tool.description)
      .helpOption(false)
      .allowUnknownOption(true)
      .argument('[arguments...]', `passed to ${tool.script}`)
      .action(async (args: string[]) => {
        const here = dirname(fileURLToPath(import.meta.url));
        const script = findInRepository(here, tool.script);
        if (script === undefined) {
          throw new UsageError(
            tool.name,
            `${tool.name}: no ${tool.script} here; ${tool.hint}, not from the published package`,
          );
        }
        const child = spawn(process.execPath, [script, ...tool.leadingArgs, ...args], {
          stdio: 'inherit',
        });
        process.exitCode = await new Promise<number>((resolve) => {
          child.once('error', () => resolve(1));
          child.once('exit', (code, signal) => resolve(code ?? (signal === null ? 1 : 128)));
        });
      });
  }
}
