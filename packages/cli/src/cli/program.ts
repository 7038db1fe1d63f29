/**
 * The `fencelock` command line: one commander program, one file per command under `commands/`.
 * Commands hold no lock logic; they parse options and call the public Locker API.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { registerInspectCommand } from './commands/inspect.js';
import { registerRepositoryTools } from './commands/repository-tools.js';
import { registerRunCommand } from './commands/run.js';
import { registerServeCommand } from './commands/serve.js';

/** The package's version, read from its package.json (two levels up from src/cli or dist/cli). */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
  return String((pkg as { version?: unknown }).version ?? '0.0.0');
}

/**
 * Build the program. Usage errors (commander's own and `UsageError`s) throw instead of exiting,
 * so `main` can map them to exit code 2.
 */
export function createProgram(): Command {
  const program = new Command('fencelock')
    .description('distributed locks with a fencing token on every lease')
    .version(packageVersion())
    // Before the commands are added, so they inherit it.
    .exitOverride();
  registerRunCommand(program);
  registerInspectCommand(program);
  registerServeCommand(program);
  registerRepositoryTools(program);
  return program;
}
