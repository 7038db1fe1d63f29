#!/usr/bin/env node
/**
 * Entry point of the `fencelock` binary (`package.json` `bin`). Exit codes: 0 success,
 * 1 failure (a run went wrong or an engine error), 2 bad usage (unknown command, bad option
 * value), 130 / 143 interrupted.
 */
import { CommanderError } from 'commander';
import { FencelockError } from '../index.js';
import { UsageError } from './options.js';
import { createProgram } from './program.js';

/** Run the CLI with `argv` (as `process.argv`); resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  try {
    await createProgram().parseAsync([...argv]);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // commander already printed the message (or the help / version).
      return error.exitCode === 0 ? 0 : 2;
    }
    if (error instanceof UsageError) {
      process.stderr.write(`fencelock: ${error.message}\n`);
      return 2;
    }
    const signal = (error as { signal?: unknown }).signal;
    if (signal === 'SIGINT' || signal === 'SIGTERM') {
      process.stderr.write(`fencelock: ${(error as Error).message}\n`);
      return signal === 'SIGINT' ? 130 : 143;
    }
    const message =
      error instanceof FencelockError || error instanceof Error ? error.message : String(error);
    process.stderr.write(`fencelock: ${message.replace(/^fencelock: /, '')}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv);
