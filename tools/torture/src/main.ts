#!/usr/bin/env node
/**
 * Entry point of the torture harness: `node tools/torture/dist/main.js torture [options]` and
 * `… torture report <result.json>` (what `npm run torture` and `npm run torture:report` run).
 * Exit codes as the `fencelock` binary's (`runProgram`); 1 when a cell failed.
 */
import { runProgram } from '@fencelock/cli/tooling';
import { Command } from 'commander';
import { registerTortureCommand } from './command.js';

const program = new Command('fencelock').exitOverride();
registerTortureCommand(program);
process.exitCode = await runProgram(program, process.argv);
