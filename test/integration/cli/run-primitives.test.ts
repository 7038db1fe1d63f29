/**
 * `fencelock run` with the other primitives: a semaphore permit (`--permits`), a read lock
 * (`--read`), several keys at once, and a lock-delay (`--lock-delay`), on the embedded store and on Redis, with the built CLI
 * and the child fixture as real processes.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  buildCli,
  childCommand,
  lineStartingWith,
  linesOf,
  runCli,
  STORES,
  type StoreUnderTest,
  sqliteStore,
  startCli,
  stopLeftovers,
  uniqueKey,
} from './support.js';

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
  return join(scratch.dir, `${Math.random().toString(36).slice(2, 10)}-${name}`);
}

/** Let a started run have every chance to begin its command (it must not, when it waits). */
const settle = () => new Promise((resolve) => setTimeout(resolve, 800));

describe.each(STORES)('fencelock run with other primitives on $name', ({ make }) => {
  let store: StoreUnderTest;

  beforeAll(() => {
    store = make();
  });
  afterAll(() => store.close());

  it('--permits 2: two commands run at once, a third waits for one of them', async () => {
    const key = uniqueKey('permits');
    const log = file('permits.log');
    const go = ['A', 'B', 'C'].map((name) => file(`go-${name}`));
    const start = (name: string, i: number) =>
      startCli([
        'run',
        '--permits',
        '2',
        key,
        '--store',
        store.url,
        ...childCommand('hold', log, name, go[i]!),
      ]);
    const a = start('A', 0);
    const b = start('B', 1);
    await lineStartingWith(log, 'start A');
    await lineStartingWith(log, 'start B');
    const c = start('C', 2);
    await settle();
    expect(linesOf(log).filter((l) => l.startsWith('start'))).toHaveLength(2);
    writeFileSync(go[0]!, '');
    await lineStartingWith(log, 'start C');
    writeFileSync(go[1]!, '');
    writeFileSync(go[2]!, '');
    const ends = await Promise.all([a.done, b.done, c.done]);
    expect(ends.map((e) => [e.code, e.stderr])).toEqual([
      [0, ''],
      [0, ''],
      [0, ''],
    ]);
    const tokens = linesOf(log)
      .filter((l) => l.startsWith('start'))
      .map((l) => BigInt(l.split(' ').at(-1)!));
    expect(new Set(tokens).size).toBe(3);
    // C was granted after A released: its token is the greatest.
    expect(tokens[2]).toBeGreaterThan(tokens[0]!);
    expect(tokens[2]).toBeGreaterThan(tokens[1]!);
  });

  it('--read: two read commands run together, a write command waits for both', async () => {
    const key = uniqueKey('read');
    const log = file('read.log');
    const go = ['R1', 'R2', 'W'].map((name) => file(`go-${name}`));
    const start = (name: string, i: number, read: boolean) =>
      startCli([
        'run',
        ...(read ? ['--read'] : []),
        key,
        '--store',
        store.url,
        ...childCommand('hold', log, name, go[i]!),
      ]);
    const r1 = start('R1', 0, true);
    const r2 = start('R2', 1, true);
    await lineStartingWith(log, 'start R1');
    await lineStartingWith(log, 'start R2');
    const w = start('W', 2, false);
    await settle();
    expect(linesOf(log).filter((l) => l.startsWith('start W'))).toEqual([]);
    writeFileSync(go[0]!, '');
    writeFileSync(go[1]!, '');
    await lineStartingWith(log, 'start W');
    writeFileSync(go[2]!, '');
    const ends = await Promise.all([r1.done, r2.done, w.done]);
    expect(ends.map((e) => [e.code, e.stderr])).toEqual([
      [0, ''],
      [0, ''],
      [0, ''],
    ]);
    const starts = linesOf(log).filter((l) => l.startsWith('start'));
    const tokens = starts.map((l) => BigInt(l.split(' ').at(-1)!));
    // The writer came after both readers, with a greater token than either.
    expect(starts[2]).toMatch(/^start W /);
    expect(tokens[2]).toBeGreaterThan(tokens[0]!);
    expect(tokens[2]).toBeGreaterThan(tokens[1]!);
  });

  it('several keys: all held at once, sorted in FENCELOCK_KEYS with their FENCELOCK_TOKENS', async () => {
    const [x, y] = [uniqueKey('multi-b'), uniqueKey('multi-a')];
    const out = file('locks.json');
    const result = await runCli([
      'run',
      x,
      y,
      x,
      '--store',
      store.url,
      ...childCommand('locks', out),
    ]);
    expect(result).toEqual({ code: 0, signal: null, stdout: '', stderr: '' });
    const seen = JSON.parse(linesOf(out)[0]!);
    expect(seen.key).toBeNull();
    expect(seen.token).toBeNull();
    expect(JSON.parse(seen.keys)).toEqual([x, y].sort());
    const tokens = JSON.parse(seen.tokens) as string[];
    expect(tokens).toHaveLength(2);
    for (const token of tokens) expect(token).toMatch(/^[1-9][0-9]*$/);
    expect(await store.rawLease(x)).toBeNull();
    expect(await store.rawLease(y)).toBeNull();
  });

  it('several keys: a run on one of them waits until the multi-key command has ended', async () => {
    const [x, y] = [uniqueKey('multi-x'), uniqueKey('multi-y')];
    const log = file('multi.log');
    const [goA, goB] = [file('go-a'), file('go-b')];
    const a = startCli(['run', x, y, '--store', store.url, ...childCommand('hold', log, 'A', goA)]);
    await lineStartingWith(log, 'start A');
    const b = startCli(['run', y, '--store', store.url, ...childCommand('hold', log, 'B', goB)]);
    await settle();
    expect(linesOf(log)).toHaveLength(1);
    writeFileSync(goA, '');
    await lineStartingWith(log, 'start B');
    writeFileSync(goB, '');
    const [endA, endB] = await Promise.all([a.done, b.done]);
    expect([endA.code, endA.stderr, endB.code, endB.stderr]).toEqual([0, '', 0, '']);
  });

  it('--lock-delay: after the run holding the key is killed, nobody gets the key until the delay has passed', async () => {
    const key = uniqueKey('lock-delay');
    const log = file('lock-delay.log');
    const goA = file('go-a');
    const ttlMs = 1_000;
    const lockDelayMs = 3_000;
    const a = startCli([
      'run',
      '--ttl',
      String(ttlMs),
      '--lock-delay',
      String(lockDelayMs),
      key,
      '--store',
      store.url,
      ...childCommand('hold', log, 'A', goA),
    ]);
    await lineStartingWith(log, 'start A');
    // The holder dies without releasing; its lease was renewed until now.
    a.process.kill('SIGKILL');
    const killedAt = performance.now();
    writeFileSync(goA, '');
    await a.done;
    // Past the TTL the key would be free without the delay; a single attempt finds it taken.
    await new Promise((resolve) => setTimeout(resolve, ttlMs + 300));
    const early = await runCli(['run', '--wait', '0', key, '--store', store.url, '--', 'true']);
    expect(early.code).toBe(124);
    const b = await runCli(['run', '--wait', '20000', key, '--store', store.url, '--', 'true']);
    expect([b.code, b.stderr]).toEqual([0, '']);
    expect(performance.now() - killedAt).toBeGreaterThanOrEqual(lockDelayMs);
  });
});

describe('fencelock run: usage of --permits, --read and --lock-delay', () => {
  it.each([
    [['--permits', '0', 'k'], '--permits'],
    [['--permits', '10001', 'k'], '--permits'],
    [['--permits', 'x', 'k'], '--permits'],
    [['--permits', '2', 'k', 'j'], '--permits'],
    [['--permits', '2', '--read', 'k'], '--permits'],
    [['--lock-delay', '60001', 'k'], '--lock-delay'],
    [['--lock-delay', '-1', 'k'], '--lock-delay'],
    [['--lock-delay', '100', '--read', 'k'], '--lock-delay'],
    [['--lock-delay', '100', '--permits', '2', 'k'], '--lock-delay'],
  ])('refuses %j with exit code 2, naming the option, before any lock', async (args, option) => {
    const result = await runCli([
      'run',
      ...args,
      '--store',
      `sqlite:${join(scratch.dir, 'usage.db')}`,
      '--',
      'true',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(option);
  });
});
