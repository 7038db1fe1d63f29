/**
 * `fencelock run` end to end, on the embedded store and on Redis: the built CLI runs the child
 * fixture (or a shell with a child of its own) as a real process; the tests read what the
 * children wrote, the CLI's exit code and stderr, the process table and the engine itself.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { closedPort } from '../../helpers/ports.js';
import { monitorRedis } from '../handed/stores.js';
import {
  buildCli,
  CHILD,
  childCommand,
  cliPath,
  lineStartingWith,
  linesOf,
  processExists,
  processGone,
  processState,
  redisStore,
  runCli,
  STORES,
  type StoreUnderTest,
  sqliteStore,
  startCli,
  stopLeftovers,
  uniqueKey,
  waitFor,
} from './support.js';

/** A scratch folder for the files the children write. */
const scratch = sqliteStore();

let removeBuild: (() => void) | undefined;

beforeAll(async () => {
  removeBuild = await buildCli();
}, 120_000);
afterEach(() => stopLeftovers());
afterAll(async () => {
  removeBuild?.();
  await scratch.close();
});

function file(name: string): string {
  return join(scratch.dir, `${randomTag()}-${name}`);
}

function randomTag(): string {
  return Math.random().toString(36).slice(2, 10);
}

/** The `--json` answer of `fencelock inspect` (tokens as decimal strings). */
interface InspectAnswer {
  readonly key: string;
  readonly holder: { owner: string; fencingToken: string; ttlMs: number } | null;
  readonly lastFencingToken: string;
}

/** The fencing token a child logged as the last field of `line` (`ready <pid> <token>`, …). */
function tokenOf(line: string): string {
  return line.split(' ').at(-1)!;
}

/** The `--json` answer of `fencelock inspect`. */
async function inspect(store: StoreUnderTest, key: string): Promise<InspectAnswer> {
  const result = await runCli(['inspect', key, '--store', store.url, '--json']);
  expect(result.code, result.stderr).toBe(0);
  return JSON.parse(result.stdout);
}

describe.each(STORES)('fencelock run on $name', ({ make }) => {
  let store: StoreUnderTest;

  beforeAll(() => {
    store = make();
  });
  afterAll(() => store.close());

  it.each([0, 3, 42])('ends with the exit code %i of the command', async (code) => {
    const key = uniqueKey(`exit-${code}`);
    const result = await runCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('exit', String(code)),
    ]);
    expect(result).toEqual({ code, signal: null, stdout: '', stderr: '' });
    // The lease was released, not left to expire.
    expect(await inspect(store, key)).toEqual({
      key,
      holder: null,
      lastFencingToken: store.lastTokenOutlivesHolder
        ? expect.stringMatching(/^[1-9][0-9]*$/)
        : '0',
    });
    expect(await store.rawLease(key)).toBeNull();
  });

  it('ends with 128 + n when the command is killed by signal n (SIGKILL: 137)', async () => {
    const key = uniqueKey('signal-death');
    const result = await runCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('kill', 'SIGKILL'),
    ]);
    expect(result).toEqual({ code: 137, signal: null, stdout: '', stderr: '' });
    expect(await store.rawLease(key)).toBeNull();
  });

  it('passes FENCELOCK_KEY and FENCELOCK_TOKEN (decimal) with the rest of the environment', async () => {
    const key = uniqueKey('env');
    const first = file('env-1.json');
    const second = file('env-2.json');
    const env = { FENCELOCK_TEST_EXTRA: 'inherited' };
    const run1 = await runCli(['run', key, '--store', store.url, ...childCommand('env', first)], {
      env,
    });
    const run2 = await runCli(['run', key, '--store', store.url, ...childCommand('env', second)], {
      env,
    });
    expect([run1.code, run2.code]).toEqual([0, 0]);
    const [seen1, seen2] = [first, second].map((f) => JSON.parse(linesOf(f)[0]!));
    for (const seen of [seen1, seen2]) {
      expect(seen).toEqual({
        key,
        token: expect.stringMatching(/^[1-9][0-9]*$/),
        extra: 'inherited',
      });
    }
    expect(BigInt(seen2.token)).toBeGreaterThan(BigInt(seen1.token));
  });

  it('makes a second run on the same key wait until the first command has ended', async () => {
    const key = uniqueKey('queue');
    const log = file('queue.log');
    const goA = file('go-a');
    const goB = file('go-b');
    const runA = startCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('hold', log, 'A', goA),
    ]);
    const tokenA = tokenOf(await lineStartingWith(log, 'start A'));
    const runB = startCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('hold', log, 'B', goB),
    ]);
    // Give B every chance to start its command while A holds the lock (it must not).
    await new Promise((resolve) => setTimeout(resolve, 800));
    expect(linesOf(log)).toEqual([`start A ${tokenA}`]);
    writeFileSync(goA, '');
    await lineStartingWith(log, 'start B');
    writeFileSync(goB, '');
    const [a, b] = await Promise.all([runA.done, runB.done]);
    expect([a.code, a.stderr, b.code, b.stderr]).toEqual([0, '', 0, '']);
    const lines = linesOf(log);
    const tokenB = tokenOf(lines[2]!);
    expect(lines).toEqual([
      `start A ${tokenA}`,
      `end A ${tokenA}`,
      `start B ${tokenB}`,
      `end B ${tokenB}`,
    ]);
    expect(BigInt(tokenB)).toBeGreaterThan(BigInt(tokenA));
  });

  it('gives up after --wait with exit code 124 and one line on stderr, without running the command', async () => {
    const key = uniqueKey('wait-timeout');
    const log = file('holder.log');
    const go = file('go');
    const envFile = file('never.json');
    const holder = startCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('hold', log, 'A', go),
    ]);
    const holderToken = BigInt(tokenOf(await lineStartingWith(log, 'start A')));

    for (const waitMs of ['1500', '0']) {
      const late = await runCli([
        'run',
        key,
        '--store',
        store.url,
        '--wait',
        waitMs,
        ...childCommand('env', envFile),
      ]);
      expect(late).toEqual({
        code: 124,
        signal: null,
        stdout: '',
        stderr: `fencelock: lock "${key}" is held by another owner: gave up after waiting ${waitMs} ms (--wait)\n`,
      });
    }
    expect(linesOf(envFile)).toEqual([]);
    // The holder kept its lease throughout.
    expect((await store.rawLease(key))?.token).toBe(holderToken);
    writeFileSync(go, '');
    expect((await holder.done).code).toBe(0);
  });

  it('sends SIGTERM to the command when the lease is lost, and ends with 125', async () => {
    const key = uniqueKey('lost-term');
    const log = file('lost.log');
    const cli = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--ttl',
      '900',
      ...childCommand('trap', log, '-', '0'),
    ]);
    const token = tokenOf(await lineStartingWith(log, 'ready'));
    // Lose the lease behind the holder's back: its next renewal (every 300 ms) finds no lease.
    await store.deleteLease(key);
    const result = await cli.done;
    expect(result).toEqual({
      code: 125,
      signal: null,
      stdout: '',
      stderr: `fencelock: watchdog: lease on "${key}" (token ${token}) lost: not-held; sending SIGTERM to the command (SIGKILL after 5000 ms)\n`,
    });
    // The command saw SIGTERM and nothing else, and exited 0: still 125, its work was not protected.
    expect(linesOf(log).slice(1)).toEqual(['SIGTERM']);
  });

  it('sends SIGKILL after --grace when the command ignores SIGTERM', async () => {
    const key = uniqueKey('lost-kill');
    const log = file('ignore.log');
    const cli = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--ttl',
      '900',
      '--grace',
      '200',
      ...childCommand('ignore', log),
    ]);
    const ready = await lineStartingWith(log, 'ready');
    const pid = Number(ready.split(' ')[1]);
    const token = tokenOf(ready);
    expect(processExists(pid)).toBe(true);
    await store.deleteLease(key);
    const result = await cli.done;
    expect(result.code).toBe(125);
    expect(result.stderr).toBe(
      `fencelock: watchdog: lease on "${key}" (token ${token}) lost: not-held; sending SIGTERM to the command (SIGKILL after 200 ms)\n`,
    );
    expect(linesOf(log)).toEqual([`ready ${pid} ${token}`, 'SIGTERM']);
    // fencelock ended only after its command was gone.
    expect(processExists(pid)).toBe(false);
  });

  it.each([
    ['SIGTERM', 0],
    ['SIGINT', 42],
  ] as const)(
    'forwards %s to the command and releases the lock once it has exited',
    async (signal, code) => {
      const key = uniqueKey(`forward-${signal}`);
      const log = file('trap.log');
      const go = file('go');
      const cli = startCli([
        'run',
        key,
        '--store',
        store.url,
        ...childCommand('trap', log, go, String(code)),
      ]);
      const token = BigInt(tokenOf(await lineStartingWith(log, 'ready')));
      cli.process.kill(signal);
      await lineStartingWith(log, signal);
      // The command is still winding down: the lease must still be held by this run.
      expect((await store.rawLease(key))?.token).toBe(token);
      writeFileSync(go, '');
      const result = await cli.done;
      expect(result).toEqual({ code, signal: null, stdout: '', stderr: '' });
      expect(linesOf(log).slice(1)).toEqual([signal]);
      expect(await store.rawLease(key)).toBeNull();
    },
  );

  /** The pid a shell command wrote to `pidFile` (its background child's, `$!`). */
  const pidIn = async (pidFile: string) =>
    Number(await waitFor(`a pid in ${pidFile}`, () => linesOf(pidFile)[0]));

  it('on lease loss stops the whole process group: the grandchild is gone too, and run ends with 125', async () => {
    const key = uniqueKey('lost-group');
    const pidFile = file('grandchild.pid');
    const cli = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--ttl',
      '900',
      '--',
      'sh',
      '-c',
      `sleep 30 & echo $! > '${pidFile}'; wait`,
    ]);
    const grandchild = await pidIn(pidFile);
    expect(processGone(grandchild)).toBe(false);
    const token = (await store.rawLease(key))!.token;
    await store.deleteLease(key);
    const lostAt = performance.now();
    expect(await cli.exited).toBe(125);
    // Nothing of the command runs on without the lease once run has ended, well within --grace.
    expect(processGone(grandchild)).toBe(true);
    expect(performance.now() - lostAt).toBeLessThan(5000);
    const result = await cli.done;
    expect(result).toEqual({
      code: 125,
      signal: null,
      stdout: '',
      stderr: `fencelock: watchdog: lease on "${key}" (token ${token}) lost: not-held; sending SIGTERM to the command (SIGKILL after 5000 ms)\n`,
    });
  });

  it.each([
    [
      'a shell and its child that both ignore SIGTERM',
      `trap "" TERM; sleep 30 & echo $! > '%s'; wait`,
    ],
    [
      'a shell that dies on SIGTERM, and a child that ignores it',
      `(trap "" TERM; exec sleep 30) & echo $! > '%s'; wait`,
    ],
  ])('on lease loss sends SIGKILL to the group after --grace: %s', async (_, script) => {
    const key = uniqueKey('lost-group-kill');
    const pidFile = file('grandchild.pid');
    const cli = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--ttl',
      '900',
      '--grace',
      '300',
      '--',
      'sh',
      '-c',
      script.replace('%s', pidFile),
    ]);
    const grandchild = await pidIn(pidFile);
    const token = (await store.rawLease(key))!.token;
    await store.deleteLease(key);
    expect(await cli.exited).toBe(125);
    // run waited for the whole group, not only for the shell.
    expect(processGone(grandchild)).toBe(true);
    const result = await cli.done;
    expect(result.code).toBe(125);
    expect(result.stderr).toBe(
      `fencelock: watchdog: lease on "${key}" (token ${token}) lost: not-held; sending SIGTERM to the command (SIGKILL after 300 ms)\n`,
    );
  });

  it('forwards SIGTERM to the whole process group: the grandchild gets it too', async () => {
    const key = uniqueKey('forward-group');
    const pidFile = file('grandchild.pid');
    const cli = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--',
      'sh',
      '-c',
      `sleep 30 & echo $! > '${pidFile}'; wait`,
    ]);
    const grandchild = await pidIn(pidFile);
    cli.process.kill('SIGTERM');
    // The shell died of SIGTERM: 128 + 15.
    expect(await cli.exited).toBe(143);
    await waitFor(
      'the grandchild to end',
      () => (processGone(grandchild) ? true : undefined),
      2000,
    );
    expect(await cli.done).toEqual({ code: 143, signal: null, stdout: '', stderr: '' });
    expect(await store.rawLease(key)).toBeNull();
  });

  it('passes its stdin, stdout and stderr to the command (in its own process group)', async () => {
    const key = uniqueKey('stdio');
    const result = await runCli(
      [
        'run',
        key,
        '--store',
        store.url,
        '--',
        'sh',
        '-c',
        'cat; echo "to stderr" >&2; [ "$(ps -o pgid= -p $$ | tr -d " ")" = "$$" ] && echo "group leader"',
      ],
      { input: 'from stdin\n' },
    );
    expect(result).toEqual({
      code: 0,
      signal: null,
      stdout: 'from stdin\ngroup leader\n',
      stderr: 'to stderr\n',
    });
  });

  it('on SIGTSTP (Ctrl-Z) stops the command, then itself; SIGCONT resumes both', async () => {
    const key = uniqueKey('tstp');
    const log = file('tstp.log');
    const go = file('go');
    const cli = startCli(['run', key, '--store', store.url, ...childCommand('trap', log, go, '0')]);
    const ready = await lineStartingWith(log, 'ready');
    const pid = Number(ready.split(' ')[1]);
    const fencelock = cli.process.pid!;
    cli.process.kill('SIGTSTP');
    await waitFor('both to stop', () =>
      processState(pid) === 'T' && processState(fencelock) === 'T' ? true : undefined,
    );
    cli.process.kill('SIGCONT');
    await waitFor('both to run again', () =>
      processState(pid) !== 'T' && processState(fencelock) !== 'T' ? true : undefined,
    );
    cli.process.kill('SIGTERM');
    await lineStartingWith(log, 'SIGTERM');
    writeFileSync(go, '');
    expect(await cli.done).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
  });

  it('reports a command that cannot be found (127) or started (126), and releases the lock', async () => {
    const key = uniqueKey('no-command');
    const missing = join(scratch.dir, 'no-such-command');
    const notFound = await runCli(['run', key, '--store', store.url, '--', missing]);
    expect(notFound).toEqual({
      code: 127,
      signal: null,
      stdout: '',
      stderr: `fencelock: cannot run ${JSON.stringify(missing)}: command not found\n`,
    });
    const first = await inspect(store, key);
    expect(first.holder).toBeNull();
    const script = file('not-executable.sh');
    writeFileSync(script, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
    const notExecutable = await runCli(['run', key, '--store', store.url, '--', script]);
    expect(notExecutable).toEqual({
      code: 126,
      signal: null,
      stdout: '',
      stderr: `fencelock: cannot run ${JSON.stringify(script)}: spawn ${script} EACCES\n`,
    });
    // Granted and released twice: the second token is above the first where the store keeps the
    // last token of a free key (Redis); SQLite keeps nothing of a free key.
    const second = await inspect(store, key);
    expect(second.holder).toBeNull();
    if (store.lastTokenOutlivesHolder) {
      expect(BigInt(second.lastFencingToken)).toBeGreaterThan(BigInt(first.lastFencingToken));
    } else {
      expect([first.lastFencingToken, second.lastFencingToken]).toEqual(['0', '0']);
    }
  });
});

/** util-linux `script`, to run the CLI on a pseudo-terminal (Linux only). */
const hasScript = process.platform === 'linux' && spawnSync('script', ['--version']).status === 0;

describe.skipIf(!hasScript)('fencelock run on a terminal', () => {
  const store = redisStore();
  afterAll(() => store.close());

  it("Ctrl-C reaches the command once (fencelock forwards it; the command is not in the terminal's group)", async () => {
    const key = uniqueKey('ctrl-c');
    const log = file('ctrl-c.log');
    const go = file('go');
    const quote = (arg: string) => `'${arg.replaceAll("'", "'\\''")}'`;
    // `exec`: script runs the command with $SHELL -c (/bin/sh when unset). dash does not replace
    // itself with the command, stays in the terminal's foreground group, and so dies of Ctrl-C
    // itself (exit 130) whatever fencelock does.
    const command = ['exec']
      .concat(
        [process.execPath, cliPath(), 'run', key, '--store', store.url, '--']
          .concat([process.execPath, CHILD, 'trap', log, go, '42'])
          .map(quote),
      )
      .join(' ');
    // script runs the command on a new pseudo-terminal, as its foreground job; what it reads on
    // stdin is typed on that terminal.
    const terminal = spawn('script', ['-qec', command, '/dev/null'], {
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => terminal.once('close', resolve));
    try {
      await lineStartingWith(log, 'ready');
      terminal.stdin.write('\u0003'); // Ctrl-C
      await lineStartingWith(log, 'SIGINT');
      // Give a second SIGINT (from the terminal itself) every chance to arrive: it must not.
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(linesOf(log).slice(1)).toEqual(['SIGINT']);
      writeFileSync(go, '');
      expect(await exited).toBe(42);
    } finally {
      terminal.kill('SIGKILL');
    }
    expect(await store.rawLease(key)).toBeNull();
  });
});

describe('fencelock run without --store', () => {
  it('uses the embedded store ./.fencelock/locks.db of the working directory', async () => {
    const cwd = join(scratch.dir, `default-store-${randomTag()}`);
    mkdirSync(cwd);
    const key = uniqueKey('default-store');
    const envFile = file('default.json');
    const result = await runCli(['run', key, ...childCommand('env', envFile)], { cwd });
    expect(result).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    expect(JSON.parse(linesOf(envFile)[0]!)).toEqual({ key, token: '1', extra: null });
    expect(existsSync(join(cwd, '.fencelock', 'locks.db'))).toBe(true);
    const inspected = await runCli(['inspect', key, '--json'], { cwd });
    // The first grant in a new file has token 1; the file keeps nothing of a free key.
    expect(JSON.parse(inspected.stdout)).toEqual({ key, holder: null, lastFencingToken: '0' });
  });
});

describe('fencelock run on an unreachable store with --wait', () => {
  it('says the store did not answer, not that the lock is busy (PostgreSQL retries refused connections)', async () => {
    // A loopback port nothing listens on: PostgreSQL's statements retry the refused connection
    // within commandTimeoutMs (5 s), so --wait runs out before any attempt is answered.
    const port = await closedPort();
    const key = uniqueKey('unreachable');
    const envFile = file('unreachable.json');
    const result = await runCli([
      'run',
      key,
      '--store',
      `postgres://fencelock@127.0.0.1:${port}/fencelock`,
      '--wait',
      '1000',
      ...childCommand('env', envFile),
    ]);
    expect(result).toEqual({
      code: 124,
      signal: null,
      stdout: '',
      stderr: `fencelock: lock "${key}": the store answered no attempt within 1000 ms (--wait); is it reachable?\n`,
    });
    expect(linesOf(envFile)).toEqual([]);
  });
});

describe('fencelock run interrupted while waiting (Redis)', () => {
  const store = redisStore();
  afterAll(() => store.close());

  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
  ] as const)('stops waiting on %s, exits %i and never runs the command', async (signal, code) => {
    const key = uniqueKey(`interrupt-${signal}`);
    const log = file('holder.log');
    const go = file('go');
    const envFile = file('never.json');
    const holder = startCli([
      'run',
      key,
      '--store',
      store.url,
      ...childCommand('hold', log, 'A', go),
    ]);
    await lineStartingWith(log, 'start A');
    const heldToken = (await store.rawLease(key))!.token;
    // Watch the engine to know when the second run is waiting (its signal handlers are set by
    // then): only an acquire names the fencing counter, and the holder's came before.
    const monitor = await monitorRedis(store.keysOf(key).fence);
    try {
      const waiter = startCli(['run', key, '--store', store.url, ...childCommand('env', envFile)]);
      await waitFor('the waiter to try the key', () =>
        monitor.commands.length > 0 ? true : undefined,
      );
      waiter.process.kill(signal);
      expect(await waiter.done).toEqual({
        code,
        signal: null,
        stdout: '',
        stderr: `fencelock: interrupted by ${signal} before the command started (lock "${key}")\n`,
      });
    } finally {
      monitor.close();
    }
    expect(linesOf(envFile)).toEqual([]);
    expect((await store.rawLease(key))?.token).toBe(heldToken);
    writeFileSync(go, '');
    expect((await holder.done).code).toBe(0);
  });
});
