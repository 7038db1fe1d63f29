/**
 * A connection reset that a request finds before the native binding does, and new sessions
 * opened meanwhile, in one process (a child: the failure this guards against aborts the process).
 *
 * The holder reaches the ensemble through a TCP proxy in the same process. The proxy cuts the
 * connection and, in the same turn, the holder's lease is extended: the C client's send fails
 * and it closes its socket behind the binding's back (see `socketDropped` in
 * src/backends/zookeeper/native.ts). Then a new locker opens its first session while the cut
 * lasts, the proxy is restored, and another new locker opens its session: that one's socket gets
 * the dropped socket's descriptor number. Before the fix, the binding's poll handle stayed
 * registered under that number and the process aborted in `uv_poll_start` ("Assertion
 * `!uv__is_closing(handle)' failed", exit 134) on the first round, every run.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ZK_CLIENT_PORT_BASE } from '../../helpers/engines.js';
import { privateBuild } from '../../helpers/private-build.js';
import { ROOT, useZookeeper } from './fault-support.js';

const zk = useZookeeper('reset');
const ROUNDS = 10;
let buildDir: string | undefined;

beforeAll(async () => {
  buildDir = (await privateBuild('zk-connection-reset')).dir;
}, 180_000);

/**
 * Each round: a holder through a fresh proxy; cut and extend in one turn; a locker's first
 * session during the cut; restore; another locker's first session. Prints one line per round.
 */
const SCENARIO = `
const { createLocker } = await import(process.env.FL_INDEX);
const { startTcpProxy } = await import(process.env.FL_PROXY);
const env = process.env;
const direct = \`zk://127.0.0.1:\${env.FL_PORT}/\${env.FL_NAMESPACE}\`;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
for (let round = 0; round < Number(env.FL_ROUNDS); round++) {
  const proxy = await startTcpProxy({ targetPort: Number(env.FL_PORT) });
  const holder = createLocker(\`zk://127.0.0.1:\${proxy.port}/\${env.FL_NAMESPACE}\`, { ttlMs: 4000 });
  const lease = await holder.acquire(\`held-\${round}\`);
  await sleep(50);
  proxy.cut();
  const extended = lease.extend(4000).then(() => 'extended', (error) => error.name);
  const during = createLocker(direct, { ttlMs: 4000 });
  const duringLease = await during.acquire(\`during-\${round}\`, { waitMs: 10000 });
  await proxy.restore();
  const after = createLocker(direct, { ttlMs: 4000 });
  const afterLease = await after.acquire(\`after-\${round}\`, { waitMs: 10000 });
  out({
    round,
    extend: await extended,
    during: String(duringLease.fencingToken),
    after: String(afterLease.fencingToken),
  });
  await Promise.all([holder.close(), during.close(), after.close()]);
  await proxy.close();
}
out({ done: true });
`;

/** Run the scenario in a child; resolves with its exit and output. */
function runScenario(): Promise<{
  code: number | null;
  signal: string | null;
  lines: string[];
  stderr: string;
}> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SCENARIO], {
    cwd: ROOT,
    env: {
      ...process.env,
      FL_INDEX: join(buildDir!, 'index.js'),
      FL_PROXY: join(buildDir!, '..', '..', '..', 'tools', 'torture', 'dist', 'proxy.js'),
      FL_PORT: String(ZK_CLIENT_PORT_BASE),
      FL_NAMESPACE: zk.namespace,
      FL_ROUNDS: String(ROUNDS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  return new Promise((resolve) => {
    child.on('close', (code, signal) =>
      resolve({ code, signal, lines: stdout.split('\n').filter(Boolean), stderr }),
    );
  });
}

describe('zookeeper: a connection reset found by a request, with new sessions opened meanwhile', () => {
  it(`${ROUNDS} rounds in one process: no abort, every new session granted, the holder's lease lost`, async () => {
    const run = await runScenario();
    expect({ code: run.code, signal: run.signal }, run.stderr).toEqual({ code: 0, signal: null });
    const rounds = run.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(rounds.at(-1)).toEqual({ done: true });
    expect(rounds.slice(0, -1).map((r) => r.round)).toEqual([...Array(ROUNDS).keys()]);
    for (const round of rounds.slice(0, -1)) {
      // The holder's connection is gone: its lease is lost (the default `suspended: 'lose'`).
      expect(round.extend).toBe('LockLostError');
      expect(BigInt(round.after as string)).toBeGreaterThan(BigInt(round.during as string));
    }
  }, 120_000);
});
