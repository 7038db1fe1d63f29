#!/usr/bin/env node
/**
 * Entry point of the `fencelock` binary (`package.json` `bin`). Exit codes: 0 success,
 * 1 failure (a run went wrong or an engine error), 2 bad usage (unknown command, bad option
 * value), 130 / 143 interrupted.
 *
 * `fencelock run` ends with its command's exit code (128 + n when the command was killed by
 * signal n), except for its own outcomes, which follow GNU `timeout(1)` and the shell:
 *   124  `--wait` ran out before the lock was granted; the command did not run
 *   125  the lease was lost while the command ran; the command (its whole process group) was
 *        stopped (SIGTERM, then SIGKILL after `--grace` ms), or it finished without a valid lease
 *   126  the command could not be started;  127  the command was not found
 * and 1, 2 as above. A command can itself exit with one of these codes; the one-line message
 * `run` writes on stderr tells them apart. See `RUN_EXIT_CODES` in commands/run.ts.
 */
import { CommanderError } from 'commander';
import { FencelockError } from '../index.js';
import { redactStoreUrlsIn } from '../redact.js';
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
    // Messages may echo a store URL (an engine's or a backend's error): never its password.
    if (error instanceof UsageError) {
      process.stderr.write(`fencelock: ${redactStoreUrlsIn(error.message)}\n`);
      return 2;
    }
    const signal = (error as { signal?: unknown }).signal;
    if (signal === 'SIGINT' || signal === 'SIGTERM') {
      process.stderr.write(`fencelock: ${(error as Error).message}\n`);
      return signal === 'SIGINT' ? 130 : 143;
    }
    const message =
      error instanceof FencelockError || error instanceof Error ? error.message : String(error);
    process.stderr.write(`fencelock: ${redactStoreUrlsIn(message.replace(/^fencelock: /, ''))}\n`);
    return 1;
  }
}

process.exitCode = await main(process.argv);
