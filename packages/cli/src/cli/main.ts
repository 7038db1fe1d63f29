#!/usr/bin/env node
/**
 * Entry point of the `fencelock` binary (`package.json` `bin`). Exit codes: 0 success,
 * 1 failure (a run went wrong or an engine error), 2 bad usage (unknown command, bad option
 * value), 130 / 143 interrupted (see `runProgram`).
 *
 * `fencelock run` ends with its command's exit code (128 + n when the command was killed by
 * signal n), except for its own outcomes, which follow GNU `timeout(1)` and the shell:
 *   124  `--wait` ran out before the lock was granted; the command did not run
 *   125  the lease was lost while the command ran; the command (its whole process group) was
 *        stopped (SIGTERM, then SIGKILL after `--grace` ms), or it finished without a valid lease
 *   126  the command could not be started;  127  the command was not found
 * and 1, 2 as above. A command can itself exit with one of these codes; the one-line message
 * `run` writes on stderr tells them apart. See `RUN_EXIT_CODES` in commands/run.ts.
 *
 * `fencelock elect <name> -- <command>` ends as `run` does (125: the leadership was lost), and
 * `fencelock elect <name> --leader` with 3 when nobody leads. See `ELECT_EXIT_CODES` in
 * commands/elect.ts.
 */
import { createProgram } from './program.js';
import { runProgram } from './run-program.js';

// A reader that stops early (`fencelock run --help | head -1`) closes the pipe: end quietly, as
// Unix tools do, instead of dying on an unhandled EPIPE error. Anything else stays an error.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') throw error;
  process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
});

process.exitCode = await runProgram(createProgram(), process.argv);
