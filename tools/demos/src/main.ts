#!/usr/bin/env node
/**
 * Entry point of the demos: `node tools/demos/dist/main.js demo <flash-sale|versions> [options]`
 * (what `npm run demo` and, in a clone, `fencelock demo …` run). Exit codes as the `fencelock`
 * binary's (`runProgram`).
 */
import { runProgram } from '@fencelock/cli/tooling';
import { Command } from 'commander';
import { registerDemoCommand } from './command.js';

const program = new Command('fencelock').exitOverride();
registerDemoCommand(program);
process.exitCode = await runProgram(program, process.argv);
