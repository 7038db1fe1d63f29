/**
 * How a fencelock command-line program ends: the exit code for each way a commander program can
 * finish, with messages printed on one line and store passwords redacted. Shared by the
 * `fencelock` binary and the repository's own programs (the demos and the torture harness).
 *
 * Exit codes: 0 success, 1 failure (a run went wrong or an engine error), 2 bad usage (unknown
 * command, bad option value: commander's errors and `UsageError`), 130 / 143 interrupted
 * (an error carrying `signal: 'SIGINT' | 'SIGTERM'`). A command may set `process.exitCode`
 * itself (`fencelock run` passes on its child's code).
 */
import { type Command, CommanderError } from 'commander';
import { redactStoreUrlsIn } from 'fencelock';
import { UsageError } from './usage.js';

/**
 * Parse `argv` (as `process.argv`) with `program`, which must have `exitOverride()` set, and
 * resolve to the exit code; never rejects.
 */
export async function runProgram(program: Command, argv: readonly string[]): Promise<number> {
  const prefix = `${program.name()}: `;
  try {
    await program.parseAsync([...argv]);
    return typeof process.exitCode === 'number' ? process.exitCode : 0;
  } catch (error) {
    if (error instanceof CommanderError) {
      // commander already printed the message (or the help / version).
      return error.exitCode === 0 ? 0 : 2;
    }
    // Messages may echo a store URL (an engine's or a backend's error): never its password.
    if (error instanceof UsageError) {
      process.stderr.write(`${prefix}${redactStoreUrlsIn(error.message)}\n`);
      return 2;
    }
    const signal = (error as { signal?: unknown }).signal;
    if (signal === 'SIGINT' || signal === 'SIGTERM') {
      process.stderr.write(`${prefix}${(error as Error).message}\n`);
      return signal === 'SIGINT' ? 130 : 143;
    }
    const message = error instanceof Error ? error.message : String(error);
    process.stderr.write(`${prefix}${redactStoreUrlsIn(message.replace(/^fencelock: /, ''))}\n`);
    return 1;
  }
}
