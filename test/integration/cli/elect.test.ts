/**
 * `fencelock elect` end to end on the embedded store: the built CLI campaigns and runs the child
 * fixture as a real process while leading; the tests read what the children wrote, the CLI's
 * exit code and output, and the election's rows in the SQLite file itself. Also `--observe`,
 * `--leader`, and bad command lines (exit code 2 before the store is touched).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  buildCli,
  childCommand,
  lineStartingWith,
  linesOf,
  type RunningCli,
  runCli,
  sqliteStore,
  startCli,
  stopLeftovers,
  uniqueKey,
  waitFor,
} from './support.js';

const store = sqliteStore();

let removeBuild: (() => void) | undefined;

beforeAll(async () => {
  removeBuild = await buildCli();
}, 120_000);
afterEach(() => stopLeftovers());
afterAll(async () => {
  removeBuild?.();
  await store.close();
});

function file(name: string): string {
  return join(store.dir, `${Math.random().toString(36).slice(2, 10)}-${name}`);
}

/** The fencing token (term) a child logged as the last field of `line`. */
function termOf(line: string): bigint {
  return BigInt(line.split(' ').at(-1)!);
}

/** `fencelock elect <name> --store <file> [options] -- node child.mjs <mode> …`, started. */
function elect(name: string, options: readonly string[], ...child: string[]): RunningCli {
  return startCli(['elect', name, '--store', store.url, ...options, ...childCommand(...child)]);
}

/** The election's leader row and the number of candidates waiting in its line, read from the file behind fencelock's back. */
function rawElection(name: string): {
  leader: { owner: string; term: bigint } | null;
  line: number;
} {
  const db = new Database(join(store.dir, 'locks.db'));
  try {
    db.defaultSafeIntegers(true);
    db.pragma('busy_timeout = 5000');
    const leader = db
      .prepare<[string], { owner: string; token: bigint }>(
        'SELECT owner, token FROM fencelock_leaders WHERE key = ?',
      )
      .get(name);
    const { n } = db
      .prepare<[string], { n: bigint }>(
        'SELECT count(*) AS n FROM fencelock_candidates WHERE key = ?',
      )
      .get(name)!;
    return { leader: leader ? { owner: leader.owner, term: leader.token } : null, line: Number(n) };
  } finally {
    db.close();
  }
}

/** Delete the election's leader row (and line) behind the leader's back. */
function deleteLeadership(name: string): void {
  const db = new Database(join(store.dir, 'locks.db'));
  try {
    db.pragma('busy_timeout = 5000');
    const { changes } = db.prepare('DELETE FROM fencelock_leaders WHERE key = ?').run(name);
    if (changes !== 1) throw new Error(`no leader row of ${name} to delete`);
    db.prepare('DELETE FROM fencelock_candidates WHERE key = ?').run(name);
  } finally {
    db.close();
  }
}

describe('fencelock elect <name> -- <command>', () => {
  it('runs one candidate’s command at a time, terms strictly increasing, handing over at once when it exits', async () => {
    const name = uniqueKey('elect-queue');
    const log = file('queue.log');
    const go = { A: file('go-a'), B: file('go-b'), C: file('go-c') };
    // A TTL far longer than the test: a hand-over that waited for the TTL would time out below.
    const ttl = ['--ttl', '60000'];
    const a = elect(name, ttl, 'hold', log, 'A', go.A);
    await lineStartingWith(log, 'start A');
    const b = elect(name, ttl, 'hold', log, 'B', go.B);
    const c = elect(name, ttl, 'hold', log, 'C', go.C);
    await waitFor('B and C in line', () => (rawElection(name).line >= 2 ? true : undefined));
    // Give B and C every chance to start their commands while A leads (they must not).
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(linesOf(log)).toHaveLength(1);

    const order: string[] = [];
    for (let i = 0; i < 3; i++) {
      const start = await waitFor('the next start', () => linesOf(log)[2 * i], 10_000);
      const who = start.split(' ')[1] as 'A' | 'B' | 'C';
      order.push(who);
      // The one that started is the election's leader, under the term it was given.
      expect(rawElection(name).leader?.term).toBe(termOf(start));
      writeFileSync(go[who], '');
      await waitFor(`end ${who}`, () => linesOf(log)[2 * i + 1]);
    }
    const results = await Promise.all([a.done, b.done, c.done]);
    expect(results.map((r) => [r.code, r.stderr])).toEqual([
      [0, ''],
      [0, ''],
      [0, ''],
    ]);
    const lines = linesOf(log);
    // Never two commands at once: each start is followed by its own end.
    expect(lines).toEqual(
      order.flatMap((who, i) => [
        `start ${who} ${termOf(lines[2 * i]!)}`,
        `end ${who} ${termOf(lines[2 * i]!)}`,
      ]),
    );
    const terms = lines.filter((l) => l.startsWith('start')).map(termOf);
    expect(terms[1]! > terms[0]! && terms[2]! > terms[1]!).toBe(true);
    expect(order[0]).toBe('A');
    // The last one resigned too: nobody leads, nobody waits.
    expect(rawElection(name)).toEqual({ leader: null, line: 0 });
  });

  it('gives the command FENCELOCK_ELECTION, FENCELOCK_TERM (= FENCELOCK_TOKEN) and FENCELOCK_LEADER_VALUE', async () => {
    const name = uniqueKey('elect-env');
    const given = file('env-given.json');
    const value = 'http://10.0.0.7:8080 "primary"';
    const first = await elect(name, ['--value', value], 'election', given).done;
    expect([first.code, first.stderr]).toEqual([0, '']);
    const env = JSON.parse(linesOf(given)[0]!);
    expect(env).toEqual({
      election: name,
      term: expect.stringMatching(/^[1-9][0-9]*$/),
      token: env.term,
      value,
      key: null,
    });

    // Without --value: <host name>:<pid of fencelock>.
    const byDefault = file('env-default.json');
    const second = elect(name, [], 'election', byDefault);
    expect((await second.done).code).toBe(0);
    const env2 = JSON.parse(linesOf(byDefault)[0]!);
    expect(env2.value).toBe(`${hostname()}:${second.process.pid}`);
    expect(BigInt(env2.term)).toBeGreaterThan(BigInt(env.term));
  });

  it('ends with the command’s own exit code, and resigns', async () => {
    const name = uniqueKey('elect-exit');
    const result = await elect(name, ['--ttl', '60000'], 'exit', '42').done;
    expect(result).toEqual({ code: 42, signal: null, stdout: '', stderr: '' });
    expect(rawElection(name)).toEqual({ leader: null, line: 0 });
  });

  it('on SIGTERM stops the command, resigns at once, and ends with the command’s code', async () => {
    const name = uniqueKey('elect-sigterm');
    const log = file('sigterm.log');
    const cli = elect(name, ['--ttl', '60000'], 'trap', log, '-', '7');
    const ready = await lineStartingWith(log, 'ready');
    expect(rawElection(name).leader?.term).toBe(termOf(ready));
    cli.process.kill('SIGTERM');
    const result = await cli.done;
    expect(result).toEqual({ code: 7, signal: null, stdout: '', stderr: '' });
    expect(linesOf(log).slice(1)).toEqual(['SIGTERM']);
    // Resigned, not left to expire (60 s): nobody leads.
    expect(rawElection(name)).toEqual({ leader: null, line: 0 });
    const leader = await runCli(['elect', name, '--store', store.url, '--leader']);
    expect([leader.code, leader.stdout]).toEqual([3, 'null\n']);
  });

  it('sends SIGTERM to the command when the leadership is lost, and ends with 125', async () => {
    const name = uniqueKey('elect-lost');
    const log = file('lost.log');
    const cli = elect(name, ['--ttl', '900'], 'trap', log, '-', '0');
    const term = termOf(await lineStartingWith(log, 'ready'));
    // Its next renewal (every 300 ms) finds no leadership.
    deleteLeadership(name);
    const result = await cli.done;
    expect(result.code).toBe(125);
    expect(result.stderr).toMatch(
      new RegExp(
        `^fencelock: .*"${name}" \\(token ${term}\\) lost: .*; sending SIGTERM to the command \\(SIGKILL after 5000 ms\\)\\n$`,
      ),
    );
    expect(linesOf(log).slice(1)).toEqual(['SIGTERM']);
  });

  it('gives up after --wait with 124 while another candidate leads, without running the command', async () => {
    const name = uniqueKey('elect-wait');
    const log = file('wait.log');
    const go = file('go');
    const never = file('never.json');
    const leader = elect(name, [], 'hold', log, 'A', go);
    await lineStartingWith(log, 'start A');
    const late = await elect(name, ['--wait', '300'], 'election', never).done;
    expect(late).toEqual({
      code: 124,
      signal: null,
      stdout: '',
      stderr: `fencelock: leadership of election "${name}" is held by another owner: gave up after waiting 300 ms (--wait)\n`,
    });
    expect(linesOf(never)).toEqual([]);
    writeFileSync(go, '');
    expect((await leader.done).code).toBe(0);
  });

  it('--lock-delay: after a leader killed with SIGKILL, nobody leads until the delay has passed', async () => {
    const name = uniqueKey('elect-delay');
    const log = file('delay.log');
    const go = file('go');
    const lockDelayMs = 3_000;
    const leader = elect(
      name,
      ['--ttl', '1000', '--lock-delay', String(lockDelayMs)],
      'hold',
      log,
      'A',
      go,
    );
    await lineStartingWith(log, 'start A');
    leader.process.kill('SIGKILL');
    const killedAt = performance.now();
    writeFileSync(go, '');
    await leader.done;
    await new Promise((resolve) => setTimeout(resolve, 1_300));
    const early = await elect(name, ['--wait', '0'], 'election', file('early.json')).done;
    expect(early.code).toBe(124);
    const next = await elect(name, ['--wait', '20000'], 'election', file('next.json')).done;
    expect([next.code, next.stderr]).toEqual([0, '']);
    expect(performance.now() - killedAt).toBeGreaterThanOrEqual(lockDelayMs);
  });
});

describe('fencelock elect <name> --observe / --leader', () => {
  it('--observe --json prints the leader, then each change in order, until SIGTERM (exit 0)', async () => {
    const name = uniqueKey('elect-observe');
    const observer = startCli(['elect', name, '--store', store.url, '--observe', '--json']);
    let stdout = '';
    observer.process.stdout?.on('data', (chunk: string) => {
      stdout += chunk;
    });
    const lines = () => stdout.split('\n').filter(Boolean);
    await waitFor('the first line', () => (lines().length > 0 ? true : undefined));
    expect(lines()).toEqual(['null']);

    const log = file('observed.log');
    const goA = file('go-a');
    const goB = file('go-b');
    const a = elect(name, ['--value', 'a'], 'hold', log, 'A', goA);
    const termA = termOf(await lineStartingWith(log, 'start A'));
    const b = elect(name, ['--value', 'b'], 'hold', log, 'B', goB);
    await waitFor('B in line', () => (rawElection(name).line >= 1 ? true : undefined));
    writeFileSync(goA, '');
    const termB = termOf(await lineStartingWith(log, 'start B'));
    writeFileSync(goB, '');
    await Promise.all([a.done, b.done]);
    await waitFor('the last change', () =>
      lines().at(-1) === 'null' && lines().length > 2 ? true : undefined,
    );
    observer.process.kill('SIGTERM');
    const result = await observer.done;
    expect([result.code, result.stderr]).toEqual([0, '']);

    const seen = result.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line));
    // A null between A and B (A resigned, B not yet granted) may or may not be seen.
    const leaders = seen.filter((entry) => entry !== null);
    expect(seen[0]).toBeNull();
    expect(seen.at(-1)).toBeNull();
    const owner = expect.stringMatching(/^\S{16,}$/);
    expect(leaders).toEqual([
      { term: String(termA), value: 'a', owner, candidates: expect.any(Number) },
      { term: String(termB), value: 'b', owner, candidates: 1 },
    ]);
    expect(leaders[0].owner).not.toBe(leaders[1].owner);
    // A's grant was read before or after B lined up.
    expect([1, 2]).toContain(leaders[0].candidates);
  });

  it('--observe prints "<term> <value>" lines', async () => {
    const name = uniqueKey('elect-observe-text');
    const log = file('text.log');
    const go = file('go');
    const leader = elect(name, ['--value', 'node 1'], 'hold', log, 'A', go);
    const term = termOf(await lineStartingWith(log, 'start A'));
    const observer = startCli(['elect', name, '--store', store.url, '--observe']);
    let stdout = '';
    observer.process.stdout?.on('data', (chunk: string) => {
      stdout += chunk;
    });
    await waitFor('the leader', () => (stdout.includes('\n') ? true : undefined));
    writeFileSync(go, '');
    await leader.done;
    await waitFor('nobody leads', () => (stdout.endsWith('null\n') ? true : undefined));
    observer.process.kill('SIGINT');
    const result = await observer.done;
    expect(result).toEqual({ code: 0, signal: null, stdout: `${term} node 1\nnull\n`, stderr: '' });
  });

  it('--leader prints the current leader (exit 0), or null with exit 3 when nobody leads', async () => {
    const name = uniqueKey('elect-leader');
    const nobody = await runCli(['elect', name, '--store', store.url, '--leader']);
    expect(nobody).toEqual({ code: 3, signal: null, stdout: 'null\n', stderr: '' });
    const nobodyJson = await runCli(['elect', name, '--store', store.url, '--leader', '--json']);
    expect(nobodyJson).toEqual({ code: 3, signal: null, stdout: 'null\n', stderr: '' });

    const log = file('leader.log');
    const go = file('go');
    const cli = elect(name, ['--value', ''], 'hold', log, 'A', go);
    const term = termOf(await lineStartingWith(log, 'start A'));
    const text = await runCli(['elect', name, '--store', store.url, '--leader']);
    // An empty value is shown JSON-quoted, so the line still has two fields.
    expect(text).toEqual({ code: 0, signal: null, stdout: `${term} ""\n`, stderr: '' });
    const json = await runCli(['elect', name, '--store', store.url, '--leader', '--json']);
    expect([json.code, json.stderr]).toEqual([0, '']);
    expect(JSON.parse(json.stdout)).toEqual({
      term: String(term),
      value: '',
      owner: rawElection(name).leader?.owner,
      candidates: 1,
    });
    writeFileSync(go, '');
    expect((await cli.done).code).toBe(0);
  });
});

describe('fencelock elect with bad usage', () => {
  const tooLong = 'v'.repeat(65_537);
  it.each([
    [
      'a --value over 64 KiB',
      ['--value', tooLong, '--', 'CMD'],
      `invalid --value: expected a well-formed string without U+0000 of at most 65536 UTF-8 bytes, received "${'v'.repeat(60)}…"`,
    ],
    [
      'no command',
      [],
      'invalid <command>: expected a command after --, or --observe or --leader, received ""',
    ],
    ['--observe with --leader', ['--observe', '--leader'], 'invalid --observe: not with --leader'],
    [
      '--observe with a command',
      ['--observe', '--', 'CMD'],
      `invalid --observe: it runs no command (received ${JSON.stringify(process.execPath)})`,
    ],
    [
      '--value with --leader',
      ['--leader', '--value', 'x'],
      'invalid --value: it is for a campaign, not with --leader',
    ],
    [
      '--wait with --observe',
      ['--observe', '--wait', '10'],
      'invalid --wait: it is for a campaign, not with --observe',
    ],
    [
      '--lock-delay with --observe',
      ['--observe', '--lock-delay', '1000'],
      'invalid --lock-delay: it is for a campaign, not with --observe',
    ],
    [
      'a bad --lock-delay',
      ['--lock-delay', '60001', '--', 'CMD'],
      'invalid --lock-delay: expected an integer in [0, 60000], received "60001"',
    ],
    [
      '--json with a command',
      ['--json', '--', 'CMD'],
      'invalid --json: only with --observe or --leader',
    ],
    [
      'a bad --ttl',
      ['--ttl', '99', '--', 'CMD'],
      'invalid --ttl: expected an integer in [100, 2147483647], received "99"',
    ],
  ])('refuses %s with exit code 2 before touching the store', async (_, options, message) => {
    const storeDir = join(store.dir, `never-${Math.random().toString(36).slice(2)}`);
    const envFile = file('never.json');
    const args = options.flatMap((arg) =>
      arg === 'CMD' ? childCommand('election', envFile).slice(1) : [arg],
    );
    const result = await runCli([
      'elect',
      uniqueKey('bad'),
      '--store',
      `sqlite:${join(storeDir, 'locks.db')}`,
      ...args,
    ]);
    expect(result).toEqual({
      code: 2,
      signal: null,
      stdout: '',
      stderr: `fencelock: ${message}\n`,
    });
    expect(linesOf(envFile)).toEqual([]);
    expect(existsSync(storeDir)).toBe(false);
  });

  it.each([
    ['an empty name', ''],
    ['a name over 1024 bytes', 'n'.repeat(1025)],
  ])('refuses %s with exit code 2 before touching the store', async (_, name) => {
    const storeDir = join(store.dir, `never-${Math.random().toString(36).slice(2)}`);
    for (const mode of [['--leader'], childCommand('exit', '0')]) {
      const result = await runCli([
        'elect',
        name,
        '--store',
        `sqlite:${join(storeDir, 'locks.db')}`,
        ...mode,
      ]);
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(
        /^fencelock: invalid <name>: expected a well-formed string of 1 to 1024 UTF-8 bytes without NUL, received "/,
      );
    }
    expect(existsSync(storeDir)).toBe(false);
  });

  it('documents its forms and exit codes in --help, and is listed among the commands', async () => {
    const help = await runCli(['elect', '--help']);
    expect([help.code, help.stderr]).toEqual([0, '']);
    const lines = help.stdout.split('\n');
    expect(lines[0]).toBe('Usage: fencelock elect [options] <name> [-- [command] [args...]]');
    for (const line of [
      '  fencelock elect [options] <name> --observe [--json]',
      '  fencelock elect [options] <name> --leader [--json]',
      '  3                   --leader: nobody leads ("null" was printed)',
      '  124                 --wait ran out before this candidate led; the command did not run',
      '  125                 the leadership was lost while the command ran; it was sent SIGTERM',
    ]) {
      expect(lines).toContain(line);
    }
    const { stdout } = await runCli(['--help']);
    expect(stdout).toMatch(
      /^ {2}elect \[options\] <name> \[-- \[command\] \[args\.\.\.\]\] +campaign/m,
    );
  });
});
