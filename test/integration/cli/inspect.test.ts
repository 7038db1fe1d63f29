/**
 * `fencelock inspect` end to end on the embedded store and on Redis: the key is held by a real
 * `fencelock run`, and the answer is compared with the lease record read from the engine.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  buildCli,
  childCommand,
  lineStartingWith,
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

describe.each(STORES)('fencelock inspect on $name', ({ make }) => {
  let store: StoreUnderTest;

  beforeAll(() => {
    store = make();
  });
  afterAll(() => store.close());

  it('shows holder, fencing token, TTL left and last token, as JSON and as text', async () => {
    const key = uniqueKey('inspect');
    const log = join(scratch.dir, `${key.replaceAll(':', '_')}.log`);
    const go = `${log}.go`;
    const ttlMs = 20_000;
    const holder = startCli([
      'run',
      key,
      '--store',
      store.url,
      '--ttl',
      String(ttlMs),
      ...childCommand('hold', log, 'A', go),
    ]);
    const token = (await lineStartingWith(log, 'start A')).split(' ')[2]!;
    const raw = await store.rawLease(key);
    expect(raw?.token).toBe(BigInt(token));

    const json = await runCli(['inspect', key, '--store', store.url, '--json']);
    expect([json.code, json.stderr]).toEqual([0, '']);
    // One object on one line.
    expect(json.stdout.split('\n')).toEqual([expect.any(String), '']);
    const answer = JSON.parse(json.stdout);
    expect(answer).toEqual({
      key,
      holder: { owner: raw!.owner, fencingToken: token, ttlMs: expect.any(Number) },
      lastFencingToken: token,
    });
    expect(answer.holder.ttlMs).toBeGreaterThan(0);
    expect(answer.holder.ttlMs).toBeLessThanOrEqual(ttlMs);

    const text = await runCli(['inspect', key, '--store', store.url]);
    expect(text.code).toBe(0);
    const lines = text.stdout.split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe(`key:                ${JSON.stringify(key)}`);
    expect(lines[1]).toMatch(
      new RegExp(`^holder: {13}owner ${raw!.owner}, fencing token ${token}, TTL left \\d+ ms$`),
    );
    expect(lines.slice(2)).toEqual([`last fencing token: ${token}`, '']);

    writeFileSync(go, '');
    expect((await holder.done).code).toBe(0);
    const after = await runCli(['inspect', key, '--store', store.url, '--json']);
    // Redis keeps the key's counter; SQLite keeps nothing of a free key.
    expect(JSON.parse(after.stdout)).toEqual({
      key,
      holder: null,
      lastFencingToken: store.lastTokenOutlivesHolder ? token : '0',
    });
  });

  it('answers holder null and last token "0" for a key never locked', async () => {
    const key = uniqueKey('never-locked');
    const json = await runCli(['inspect', key, '--store', store.url, '--json']);
    expect(json).toEqual({
      code: 0,
      signal: null,
      stdout: `${JSON.stringify({ key, holder: null, lastFencingToken: '0' })}\n`,
      stderr: '',
    });
    const text = await runCli(['inspect', key, '--store', store.url]);
    expect(text.stdout).toBe(
      `key:                ${JSON.stringify(key)}\nholder:             none\nlast fencing token: 0\n`,
    );
    // A read only: nothing was written for the key.
    expect(await store.hasAnyRecord(key)).toBe(false);
  });
});

describe('fencelock inspect on an unreachable store', () => {
  it('exits 1 with the engine error on one line', async () => {
    // Nothing listens on port 1 of the loopback: the connection is refused.
    const result = await runCli([
      'inspect',
      uniqueKey('unreachable'),
      '--store',
      'redis://127.0.0.1:1',
    ]);
    expect(result.code).toBe(1);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(
      /^fencelock: redis inspect failed: 127\.0\.0\.1:1 unreachable: connection refused\n$/,
    );
  });
});
