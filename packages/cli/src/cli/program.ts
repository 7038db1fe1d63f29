/**
 * The `fencelock` command line: one commander program, one file per command under `commands/`.
 * Commands hold no lock logic; they parse options and call the public Locker API.
 */
import { Command } from 'commander';
import { packageVersion } from '../version.js';
import { registerElectCommand } from './commands/elect.js';
import { registerInspectCommand } from './commands/inspect.js';
import { registerLsCommand } from './commands/ls.js';
import { registerRepositoryTools } from './commands/repository-tools.js';
import { registerRunCommand } from './commands/run.js';
import { registerServeCommand } from './commands/serve.js';

/**
 * Build the program. Usage errors (commander's own and `UsageError`s) throw instead of exiting,
 * so `main` can map them to exit code 2.
 */
export function createProgram(): Command {
  const program = new Command('fencelock')
    .description('distributed locks with a fencing token on every lease')
    .version(packageVersion())
    // The commands' list shows each command's own usage line (`run`'s names several keys and
    // `--`, `elect`'s its command after `--`), not one rebuilt from its declared arguments.
    .configureHelp({ subcommandTerm: (command) => `${command.name()} ${command.usage()}` })
    // Before the commands are added, so they inherit it.
    .exitOverride();
  registerRunCommand(program);
  registerElectCommand(program);
  registerInspectCommand(program);
  registerLsCommand(program);
  registerServeCommand(program);
  registerRepositoryTools(program);
  return program;
}
