/**
 * The five-versions demo end to end: spawn the CLI compiled from the sources (`node <build>/packages/cli/dist/cli/main.js
 * demo versions … --json`) against the Redis started by `scripts/services.sh`, parse the JSON on
 * the last stdout line, and check that each version showed its failure (v1–v4) or its protection
 * (v5), that every key of the run is gone and that every client process has exited. No engine is
 * mocked; the crash and the pause are real signals to real processes.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL } from '../helpers/engines.js';
import {
  type CliRun,
  type PrivateBuild,
  privateBuild,
  runBuiltCli,
} from '../helpers/private-build.js';

interface VersionFigures {
  version: 'v1' | 'v2' | 'v3' | 'v4' | 'v5';
  steps: { atMs: number; text: string }[];
  broke: string;
  grants: number;
  refusedAttempts: number;
  overlaps: number;
  wrongDeletions: number;
  writesAccepted: number;
  staleAccepted: number;
  staleRejected: number;
  deadlock: boolean;
  finalWriter: string | null;
  pids: number[];
  reproduced: boolean;
}

interface Figures {
  store: string;
  ttlMs: number;
  namespace: string;
  versions: VersionFigures[];
  keysLeft: number;
  elapsedMs: number;
  ok: boolean;
}

let build: PrivateBuild | undefined;

beforeAll(async () => {
  build = await privateBuild('versions');
}, 120_000);

afterAll(() => {
  build?.remove();
});

function runDemo(args: readonly string[], timeoutMs = 50_000): Promise<CliRun> {
  return runBuiltCli(build!, ['demo', 'versions', ...args], timeoutMs);
}

function lastJson(run: CliRun): Figures {
  const last = run.stdout.trimEnd().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(last) as Figures;
  } catch {
    throw new Error(`last stdout line is not JSON: ${JSON.stringify(last)}\nstderr: ${run.stderr}`);
  }
}

/** Whether a process with this id still exists. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Keys under `namespace` on the Redis of REDIS_URL. */
async function keysUnder(namespace: string): Promise<string[]> {
  const client = new Redis(REDIS_URL);
  try {
    const found: string[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${namespace}:*`, 'COUNT', 1000);
      cursor = next;
      found.push(...keys);
    } while (cursor !== '0');
    return found;
  } finally {
    client.disconnect();
  }
}

describe('demo versions', () => {
  it('shows each naive design failing under its fault, and only v5 rejecting the stale write', async () => {
    const run = await runDemo(['--store', REDIS_URL, '--ttl', '500', '--json']);
    expect(run.code, run.stderr).toBe(0);
    const r = lastJson(run);
    expect(r.store).toBe(REDIS_URL);
    expect(r.ttlMs).toBe(500);
    expect(r.namespace).toMatch(/^fencelock:demo-versions:[0-9a-f]{8}$/);
    expect(r.versions.map((v) => v.version)).toEqual(['v1', 'v2', 'v3', 'v4', 'v5']);
    const [v1, v2, v3, v4, v5] = r.versions as [
      VersionFigures,
      VersionFigures,
      VersionFigures,
      VersionFigures,
      VersionFigures,
    ];

    // v1: the killed holder's key has no TTL; B is refused for the whole window.
    expect(v1.deadlock).toBe(true);
    expect(v1.grants).toBe(1);
    expect(v1.refusedAttempts).toBeGreaterThan(1);
    expect(v1.writesAccepted).toBe(0);
    expect(v1.steps.some((s) => /killed with SIGKILL/.test(s.text))).toBe(true);
    expect(v1.steps.some((s) => /PTTL -1/.test(s.text))).toBe(true);

    // v2: A's late plain DEL removes B's lock, and C gets in while B works.
    expect(v2.wrongDeletions).toBeGreaterThanOrEqual(1);
    expect(v2.overlaps).toBeGreaterThanOrEqual(2);
    expect(v2.grants).toBe(3);
    expect(v2.staleAccepted).toBeGreaterThanOrEqual(1);

    // v3: the owner check stops the wrong deletion, not the second holder.
    expect(v3.overlaps).toBe(1);
    expect(v3.staleAccepted).toBe(1);
    expect(v3.wrongDeletions).toBe(0);

    // v4: the paused holder's stale write lands on the unfenced resource, over B's.
    expect(v4.overlaps).toBe(1);
    expect(v4.staleAccepted).toBe(1);
    expect(v4.staleRejected).toBe(0);
    expect(v4.finalWriter).toBe('A');

    // v5: the same pause lets B in, but the resource refuses A's older fencing token.
    expect(v5.overlaps).toBe(1);
    expect(v5.staleRejected).toBe(1);
    expect(v5.staleAccepted).toBe(0);
    expect(v5.writesAccepted).toBe(1);
    expect(v5.finalWriter).toBe('B');
    expect(v5.steps.some((s) => /REJECTED by the resource \(StaleTokenError/.test(s.text))).toBe(
      true,
    );

    for (const v of r.versions) expect(v.reproduced, v.version).toBe(true);
    // Only v5 made progress without letting a stale write through.
    expect(
      r.versions.filter((v) => v.grants > 1 && v.staleAccepted === 0).map((v) => v.version),
    ).toEqual(['v5']);
    expect(r.ok).toBe(true);
    expect(r.elapsedMs).toBeLessThan(30_000);
    expect(run.stderr).toMatch(/^Only v5 made progress with 0 stale writes accepted/m);

    // Nothing left behind: no key of the run, no client process.
    expect(r.keysLeft).toBe(0);
    expect(await keysUnder(r.namespace)).toEqual([]);
    const pids = r.versions.flatMap((v) => v.pids);
    expect(pids).toHaveLength(11);
    expect(pids.filter(alive)).toEqual([]);
  });

  it('prints each version, a table and the verdict without --json', async () => {
    const run = await runDemo(['--store', REDIS_URL, '--ttl', '300']);
    expect(run.code, run.stderr).toBe(0);
    const out = run.stdout;
    expect(out).toContain(`five lock designs on ${REDIS_URL}, ttl 300 ms`);
    for (const v of ['v1', 'v2', 'v3', 'v4', 'v5']) expect(out).toMatch(new RegExp(`^${v}  `, 'm'));
    expect(out).toMatch(/│ v1\s+│ SETNX, no TTL\s+│\s+1 │\s+\d+ │\s+0 │\s+0 │\s+0 │\s+0 │ yes\s+│/);
    expect(out).toMatch(
      /│ v5\s+│ fencelock \+ fencing token\s+│\s+2 │\s+\d+ │\s+1 │\s+0 │\s+0 │\s+1 │ no\s+│/,
    );
    expect(out.trimEnd().split('\n').at(-1)).toMatch(/^Only v5 made progress/);
  });

  it.each([
    [['--ttl', '50'], '--ttl'],
    [['--ttl', 'soon'], '--ttl'],
    [['--store', 'etcd://127.0.0.1:23791'], '--store'],
    [['--store', 'redis+sentinel://127.0.0.1:26411/fencelock'], '--store'],
    [['--store', 'ftp://x'], '--store'],
  ])('rejects %j with exit code 2 and a message naming %s', async (args, option) => {
    const run = await runDemo([...args, '--json']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(option);
  });

  it('exits 1 with the connection error when Redis is unreachable', async () => {
    const run = await runDemo(['--store', 'redis://127.0.0.1:1', '--json']);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr.trim()).toBe(
      'fencelock: cannot reach Redis at redis://127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1',
    );
  });
});
