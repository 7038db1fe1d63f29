/**
 * Bad command lines of `run` and `inspect`: exit code 2, one clear line on stderr, and no call
 * to the engine (the SQLite file is never created; Redis sees no command naming the key; the
 * command never runs). And `--help` on every command and subcommand of the program (its
 * commander tree is walked, so a command added later is checked too).
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createProgram } from '../../../packages/cli/src/cli/program.js';
import { STORE_SCHEMES } from '../../../packages/fencelock/src/index.js';
import { registerDemoCommand } from '../../../tools/demos/src/command.js';
import { registerTortureCommand } from '../../../tools/torture/src/command.js';
import { monitorRedis } from '../handed/stores.js';
import {
  buildCli,
  childCommand,
  cliPath,
  linesOf,
  redisStore,
  runCli,
  sqliteStore,
  stopLeftovers,
  uniqueKey,
} from './support.js';

const scratch = sqliteStore();
const redis = redisStore();

let removeBuild: (() => void) | undefined;

beforeAll(async () => {
  removeBuild = await buildCli();
}, 120_000);
afterEach(() => stopLeftovers());
afterAll(async () => {
  removeBuild?.();
  await redis.close();
  await scratch.close();
});

/** The schemes `createLocker` knows, as its error lists them. */
const SCHEMES = STORE_SCHEMES.join(', ');
const TTL_RANGE = 'an integer in [100, 2147483647]';
const MS_RANGE = 'an integer in [0, 2147483647]';

/** [what, arguments after `run <key>` (before the command), expected stderr line]. */
const BAD_RUN_OPTIONS: readonly (readonly [string, readonly string[], string])[] = [
  [
    'a --ttl that is not a number',
    ['--ttl', 'abc'],
    `invalid --ttl: expected ${TTL_RANGE}, received "abc"`,
  ],
  ['a --ttl below 100 ms', ['--ttl', '99'], `invalid --ttl: expected ${TTL_RANGE}, received "99"`],
  [
    'a fractional --ttl',
    ['--ttl', '1500.5'],
    `invalid --ttl: expected ${TTL_RANGE}, received "1500.5"`,
  ],
  ['a negative --wait', ['--wait', '-5'], `invalid --wait: expected ${MS_RANGE}, received "-5"`],
  [
    'a --wait in seconds',
    ['--wait', '10s'],
    `invalid --wait: expected ${MS_RANGE}, received "10s"`,
  ],
  [
    'a --grace past the timer limit',
    ['--grace', '2147483648'],
    `invalid --grace: expected ${MS_RANGE}, received "2147483648"`,
  ],
];

describe('fencelock run with bad options', () => {
  it.each(BAD_RUN_OPTIONS)(
    'refuses %s with exit code 2 before touching the store',
    async (_, options, message) => {
      const key = uniqueKey('bad-option');
      const storeDir = join(scratch.dir, `never-${Math.random().toString(36).slice(2)}`);
      const envFile = join(scratch.dir, `${key.replaceAll(':', '_')}.json`);
      const result = await runCli([
        'run',
        key,
        '--store',
        `sqlite:${join(storeDir, 'locks.db')}`,
        ...options,
        ...childCommand('env', envFile),
      ]);
      expect(result).toEqual({
        code: 2,
        signal: null,
        stdout: '',
        stderr: `fencelock: ${message}\n`,
      });
      expect(existsSync(storeDir)).toBe(false);
      expect(linesOf(envFile)).toEqual([]);
    },
  );

  it('refuses a bad option on Redis with no command sent to the engine', async () => {
    const key = uniqueKey('bad-option-redis');
    const monitor = await monitorRedis(key);
    try {
      const result = await runCli([
        'run',
        key,
        '--store',
        redis.url,
        '--ttl',
        '0',
        ...childCommand('exit', '0'),
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr).toBe(`fencelock: invalid --ttl: expected ${TTL_RANGE}, received "0"\n`);
      // A command the CLI had sent would have been executed before it exited; give MONITOR's
      // stream a moment to deliver any such line (none is expected).
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(monitor.commands).toEqual([]);
    } finally {
      monitor.close();
    }
    expect(await redis.hasAnyRecord(key)).toBe(false);
  });

  it.each([
    [
      'an unknown store scheme',
      ['run', 'k', '--store', 'bogus://x', '--', 'true'],
      `fencelock: invalid --store: expected a store URL with scheme ${SCHEMES}, received "bogus://x"`,
    ],
    [
      'an empty key',
      ['run', '', '--', 'true'],
      'fencelock: invalid <key>: expected a well-formed string of 1 to 1024 UTF-8 bytes without NUL, received ""',
    ],
    [
      'a key over 1024 bytes',
      ['run', 'k'.repeat(1025), '--', 'true'],
      `fencelock: invalid <key>: expected a well-formed string of 1 to 1024 UTF-8 bytes without NUL, received "${'k'.repeat(60)}…"`,
    ],
    ['a missing command', ['run', 'k'], "error: missing required argument 'command'"],
    [
      'an unknown option',
      ['run', 'k', '--ttl-ms', '100', '--', 'true'],
      "error: unknown option '--ttl-ms'",
    ],
    [
      'inspect with an unknown store scheme',
      ['inspect', 'k', '--store', 'mysql://h/db'],
      `fencelock: invalid --store: expected a store URL with scheme ${SCHEMES}, received "mysql://h/db"`,
    ],
    [
      'inspect with an empty key',
      ['inspect', ''],
      'fencelock: invalid <key>: expected a well-formed string of 1 to 1024 UTF-8 bytes without NUL, received ""',
    ],
    ['inspect without a key', ['inspect'], "error: missing required argument 'key'"],
  ])('refuses %s with exit code 2', async (_, args, message) => {
    // Run in the scratch folder: the default store (./.fencelock/locks.db) must not appear.
    const result = await runCli(args, { cwd: scratch.dir });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr.split('\n')[0]).toBe(message);
    expect(existsSync(join(scratch.dir, '.fencelock'))).toBe(false);
  });
});

/** A password the CLI must never print. */
const PASSWORD = 'S3cretPw';

describe('store URLs in usage errors', () => {
  it.each([
    [
      'run with a PostgreSQL URL with a bad port',
      ['run', 'k', '--store', `postgres://u:${PASSWORD}@127.0.0.1:99999/db`, '--', 'true'],
      'received "postgres://u:***@127.0.0.1:99999/db"',
    ],
    [
      'inspect with a Redis URL with a bad db',
      ['inspect', 'k', '--store', `redis://:${PASSWORD}@127.0.0.1:6390/x`],
      'received "redis://:***@127.0.0.1:6390/x"',
    ],
    [
      'run with a password parameter and an unknown one',
      [
        'run',
        'k',
        '--store',
        `postgres://u@127.0.0.1/db?password=${PASSWORD}&bogus=1`,
        '--',
        'true',
      ],
      'received "postgres://u@127.0.0.1/db?password=***&bogus=1"',
    ],
    [
      'run with an etcd URL with an unknown parameter',
      ['run', 'k', '--store', `etcd://root:${PASSWORD}@127.0.0.1:2379?bogus=1`, '--', 'true'],
      'received "etcd://root:***@127.0.0.1:2379?bogus=1"',
    ],
    [
      'a password holding "@" and "/"',
      ['inspect', 'k', '--store', `redis://u:${PASSWORD}@/x@127.0.0.1:0`],
      'received "redis://u:***@127.0.0.1:0"',
    ],
    [
      'serve with a Redis URL on port 0',
      ['serve', '--store', `redis://user:${PASSWORD}@127.0.0.1:0`],
      'received "redis://user:***@127.0.0.1:0"',
    ],
    [
      'demo versions with a store that is not one Redis node',
      ['demo', 'versions', '--store', `postgres://u:${PASSWORD}@127.0.0.1/db`],
      'invalid --store: expected a single Redis node, redis://host:port[/db] or rediss://…, received "postgres://u:***@127.0.0.1/db"',
    ],
  ])('%s: exit code 2, the password redacted', async (_, args, message) => {
    const result = await runCli(args, { cwd: scratch.dir });
    expect(result.code, result.stderr).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).not.toContain(PASSWORD);
    expect(result.stderr.split('\n')).toHaveLength(2);
    expect(result.stderr).toMatch(/^fencelock: invalid --store/);
    expect(result.stderr).toContain(message);
    expect(existsSync(join(scratch.dir, '.fencelock'))).toBe(false);
  });
});

/** One command of the program's tree: its words after `fencelock` ([] for the program). */
interface CommandEntry {
  readonly words: readonly string[];
  readonly command: Command;
}

/** Every command of the commander tree under `command`, itself first, depth first. */
function commandTree(command: Command, words: readonly string[] = []): CommandEntry[] {
  return [
    { words, command },
    ...command.commands.flatMap((sub) => commandTree(sub, [...words, sub.name()])),
  ];
}

/** A tool's commands as its own program builds them (a `fencelock` program with them added). */
function toolTree(register: (program: Command) => void): CommandEntry[] {
  const program = new Command('fencelock');
  register(program);
  return commandTree(program).filter(({ words }) => words.length > 0);
}

/**
 * The programs as the CLI and the tools build them (only read here: their commands, options and
 * texts). `fencelock demo …` and `fencelock torture …` run the tools' own programs, which answer
 * their --help.
 */
const TREE = [
  ...commandTree(createProgram()).filter(
    ({ words }) => words[0] !== 'demo' && words[0] !== 'torture',
  ),
  ...toolTree(registerDemoCommand),
  ...toolTree(registerTortureCommand),
];

/**
 * Commands whose `--help` is not commander's: they pass every option through to a script, whose
 * own help answers (its usage line).
 */
const DELEGATED_HELP: ReadonlyMap<string, string> = new Map([
  ['bench', 'Usage: node bench/run.mjs [options]   (npm run bench -- [options])'],
]);

/** Text with every run of whitespace as one space: commander wraps help at 80 columns. */
const flat = (text: string) => text.replace(/\s+/g, ' ').trim();

describe('--help', () => {
  it('walks every command and subcommand of the program', () => {
    const names = TREE.map(({ words }) => words.join(' '));
    // The walk must see the commands known today (a broken walk would check nothing).
    expect(names).toEqual(
      expect.arrayContaining([
        '',
        'run',
        'elect',
        'inspect',
        'ls',
        'demo',
        'demo flash-sale',
        'demo versions',
        'serve',
        'torture',
        'torture report',
        'bench',
      ]),
    );
    expect(new Set(names).size).toBe(names.length);
  });

  it.each(
    TREE.filter(({ words }) => !DELEGATED_HELP.has(words.join(' '))).map(
      (entry) => [['fencelock', ...entry.words].join(' '), entry] as const,
    ),
  )('%s --help: exit code 0, its usage line, every option documented', async (name, entry) => {
    const { command, words } = entry;
    const help = command.createHelp();
    // A command that switches commander's help off must say whose help answers instead.
    expect(
      help.visibleOptions(command).map((option) => option.long),
      `${name} has no --help`,
    ).toContain('--help');

    const result = await runCli([...words, '--help']);
    expect([result.code, result.stderr]).toEqual([0, '']);
    const lines = result.stdout.split('\n');
    expect(lines[0]).toBe(`Usage: ${name} ${command.usage()}`);
    const text = flat(result.stdout);
    expect(command.description(), `${name} has a description`).not.toBe('');
    expect(text).toContain(flat(help.commandDescription(command)));
    for (const option of command.options.filter((o) => !o.hidden)) {
      expect(option.description, `${name} ${option.flags} has a description`).not.toBe('');
      expect(text).toContain(flat(`${help.optionTerm(option)} ${help.optionDescription(option)}`));
    }
    expect(text).toContain('-h, --help display help for command');
    for (const argument of command.registeredArguments) {
      expect(lines[0]).toContain(help.argumentTerm(argument));
      if (argument.description !== '') {
        expect(text).toContain(
          flat(`${help.argumentTerm(argument)} ${help.argumentDescription(argument)}`),
        );
      }
    }
    for (const sub of command.commands) {
      expect(text).toContain(
        flat(`${help.subcommandTerm(sub)} ${help.subcommandDescription(sub)}`),
      );
    }
  });

  it.each(
    [...DELEGATED_HELP].map(([words, usage]) => [`fencelock ${words}`, words.split(' '), usage]),
  )('%s --help answers with the help of the script it runs', async (_, words, usage) => {
    expect(TREE.map((entry) => entry.words.join(' '))).toContain(words.join(' '));
    const result = await runCli([...words, '--help']);
    expect([result.code, result.stderr]).toEqual([0, '']);
    expect(result.stdout.split('\n')[0]).toBe(usage);
  });

  it('documents the exit codes of run', async () => {
    const result = await runCli(['run', '--help']);
    expect([result.code, result.stderr]).toEqual([0, '']);
    expect(result.stdout).toContain(
      'Usage: fencelock run [options] <key> [more keys...] -- <command> [args...]',
    );
    for (const line of [
      '  124                 --wait ran out before the lock was granted; the command did not run',
      '  125                 the lease was lost while the command ran; it was sent SIGTERM',
      '  126 / 127           the command could not be started / was not found',
      '  2                   bad usage (unknown option, bad value); nothing was locked',
    ]) {
      expect(result.stdout.split('\n')).toContain(line);
    }
  });

  it('passes unknown bench options through to bench/run.mjs, which refuses them', async () => {
    const bad = await runCli(['bench', '--no-such-option']);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain('--no-such-option');
  });

  it('lists run and inspect among the commands', async () => {
    const { stdout } = await runCli(['--help']);
    // run's own usage line (several keys, `--`), not one rebuilt from its arguments.
    expect(stdout).toMatch(
      /^ {2}run \[options\] <key> \[more keys\.\.\.\] -- <command> \[args\.\.\.\] +hold a lock/m,
    );
    expect(stdout).toMatch(/^ {2}inspect \[options\] <key> +show the holder/m);
  });
});

describe('a reader that stops early', () => {
  it.each([['run', '--help'], ['serve', '--help'], ['inspect', '--help'], ['--help']])(
    '`fencelock %s` into a closed pipe ends quietly with exit 0 (no EPIPE error)',
    async (...args) => {
      // As `fencelock run --help | head -1`: the reading end is closed before the help is written.
      const child = spawn(process.execPath, [cliPath(), ...args], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout.destroy();
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
        stderr += chunk;
      });
      const code = await new Promise((resolve) => child.on('exit', resolve));
      expect(stderr).not.toContain('EPIPE');
      expect(code).toBe(0);
    },
  );
});
