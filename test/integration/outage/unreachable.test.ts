/**
 * Engines that do not answer (docs/semantics.md, "Engines that do not answer"), on every backend
 * with a network: a closed port (nothing listens: the connection is refused) and a silent server
 * (it accepts connections and never sends a byte). Real clients, real sockets.
 *
 * Each operation rejects within its backend's bound with a `BackendError` in the one form
 * (`<host:port> unreachable: connection refused` / `no answer within N ms`), or with Redlock's
 * `QuorumError` listing every node so; `close()` returns within `commandTimeoutMs` and the
 * process exits at once after it (in a child process).
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BackendError,
  createLocker,
  LockTimeoutError,
  QuorumError,
} from '../../../packages/fencelock/src/index.js';
import { closedPort } from '../../helpers/ports.js';
import { privateBuild } from '../../helpers/private-build.js';
import { type SilentServer, startSilentServer } from '../../helpers/silent-server.js';

/**
 * The bound every store below is given (`commandTimeoutMs`, `dialTimeoutMs`, `nodeTimeoutMs`,
 * `connectTimeoutMs`).
 */
const T = 500;
/** Scheduling noise on a shared two-core machine, ms. */
const SLACK_MS = 400;

type Reason = 'connection-refused' | 'connection-closed' | 'no-answer';

interface Store {
  readonly name: string;
  /** The store URL for servers at `ports` (three of them: Redlock's nodes; others use the first). */
  readonly url: (ports: readonly number[]) => string;
  /** Longest an operation may take, ms (connect bound + command bound, per the engine page). */
  readonly boundMs: number;
  /** Reasons a closed port may be reported with (ioredis hides a Sentinel's or a seed's refusal). */
  readonly closedReasons: readonly Reason[];
  /** Redlock answers a failed vote with `QuorumError` (every node's outcome). */
  readonly quorum?: boolean;
  /**
   * The engine client keeps timers of its own for a while after close() (see the engine page):
   * then only the exit bound is checked, not the resources left right after close().
   */
  readonly lingers?: { readonly closed?: boolean; readonly silent?: boolean };
  /** Longest the process may live on after close() returned, ms. @default 1500 */
  readonly exitMs?: number;
}

const STORES: readonly Store[] = [
  {
    name: 'redis',
    url: ([p]) => `redis://127.0.0.1:${p}?commandTimeoutMs=${T}`,
    boundMs: 2 * T,
    closedReasons: ['connection-refused'],
  },
  {
    name: 'redis cluster',
    url: ([p]) => `redis+cluster://127.0.0.1:${p}?commandTimeoutMs=${T}`,
    boundMs: 2 * T,
    closedReasons: ['connection-closed', 'no-answer'],
    lingers: { silent: true },
  },
  {
    name: 'redis sentinel',
    url: ([p]) => `redis+sentinel://127.0.0.1:${p}/mymaster?commandTimeoutMs=${T}`,
    boundMs: 2 * T,
    closedReasons: ['connection-closed', 'no-answer'],
    lingers: { closed: true, silent: true },
    // ioredis 6 disconnects the Sentinel clients it resolves through with a fixed 2 s timer.
    exitMs: 2_500,
  },
  {
    name: 'redlock',
    url: (ports) => `redlock://${ports.map((p) => `127.0.0.1:${p}`).join(',')}?nodeTimeoutMs=${T}`,
    // inspect and release wait up to 2 s per node (SLOW_VOTE_TIMEOUT_MS).
    boundMs: 2_000 + T,
    closedReasons: ['connection-refused'],
    quorum: true,
  },
  {
    name: 'etcd',
    url: ([p]) => `etcd://127.0.0.1:${p}?dialTimeoutMs=${T}`,
    // etcd3 tries a request that got no answer again, each try with its own deadline.
    boundMs: 4 * T,
    closedReasons: ['connection-refused'],
    lingers: { silent: true },
  },
  {
    name: 'postgres lease',
    url: ([p]) => `postgres://user:secretpw@127.0.0.1:${p}/db?commandTimeoutMs=${T}`,
    // A connection within commandTimeoutMs, a statement within commandTimeoutMs + 1 s.
    boundMs: 2 * T + 1_000,
    closedReasons: ['connection-refused'],
    lingers: { closed: true },
  },
  {
    name: 'postgres advisory',
    url: ([p]) => `postgres://user:secretpw@127.0.0.1:${p}/db?mode=advisory&commandTimeoutMs=${T}`,
    boundMs: 2 * T + 1_000,
    closedReasons: ['connection-refused'],
    lingers: { closed: true },
  },
  {
    name: 'zookeeper',
    // Every member of the ensemble down (three closed ports), or one silent server.
    url: (ports) =>
      `zk://${[...new Set(ports)].map((p) => `127.0.0.1:${p}`).join(',')}?connectTimeoutMs=${T}`,
    // No session is ever made: only the connect bound runs (the members are asked whether they
    // refuse within its last fifth).
    boundMs: T,
    closedReasons: ['connection-refused'],
  },
];

let silent: SilentServer;
let closed: number[];

beforeAll(async () => {
  silent = await startSilentServer();
  closed = [await closedPort(), await closedPort(), await closedPort()];
});
afterAll(() => silent.close());

/** How an operation ended, and how long it took. */
async function timed(op: () => Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const startedAt = performance.now();
  const error = await op().then(
    () => undefined,
    (e: unknown) => e,
  );
  return { error, ms: performance.now() - startedAt };
}

/** A failure in the one form: the store's address and the reason, no password. */
function expectUnreachable(error: unknown, ports: readonly number[], reasons: readonly Reason[]) {
  expect(error).toBeInstanceOf(BackendError);
  const e = error as BackendError;
  expect(reasons).toContain(e.unreachable);
  expect(e.address).toContain(`127.0.0.1:${ports[0]}`);
  const why =
    e.unreachable === 'no-answer'
      ? `no answer within ${T} ms`
      : e.unreachable === 'connection-refused'
        ? 'connection refused'
        : 'connection closed';
  expect(e.message).toContain(`127.0.0.1:${ports[0]}`);
  expect(e.message).toContain(`unreachable: ${why}`);
  expect(e.message).not.toContain('secretpw');
  expect(e.cause).toBeDefined();
}

/** Redlock: a QuorumError whose every node failed in the one form. */
function expectNoQuorum(error: unknown, ports: readonly number[], reasons: readonly Reason[]) {
  expect(error).toBeInstanceOf(QuorumError);
  const nodes = (error as QuorumError).nodes;
  expect(nodes).toHaveLength(ports.length);
  for (const node of nodes) {
    if (node.outcome === 'timeout') {
      // A vote's own per-node timeout: the node did not answer within nodeTimeoutMs.
      expect(reasons).toContain('no-answer');
      continue;
    }
    expect(node.outcome).toBe('error');
    expect(node.error).toBeInstanceOf(BackendError);
    expect(reasons).toContain((node.error as BackendError).unreachable);
    expect((node.error as BackendError).address).toBe(node.node);
  }
}

describe.each(STORES)('$name with the engine down', (store) => {
  const cases = [
    { kind: 'closed', ports: () => closed, reasons: () => store.closedReasons },
    {
      kind: 'silent',
      ports: () => [silent.port, silent.port, silent.port],
      reasons: () => ['no-answer'] as const,
    },
  ];
  describe.each(cases)('$kind', ({ kind, ports, reasons }) => {
    it('tryAcquire, withLock({ waitMs: 0 }), inspect and acquire reject within the bound', async () => {
      const locker = createLocker(store.url(ports()));
      // Load the engine client first: its import is not the engine's silence.
      await locker.backend();
      const expectFailure = store.quorum ? expectNoQuorum : expectUnreachable;
      const ops: Record<string, () => Promise<unknown>> = {
        tryAcquire: () => locker.tryAcquire('outage-a'),
        'withLock waitMs 0': () => locker.withLock('outage-b', async () => 1, { waitMs: 0 }),
        inspect: () => locker.inspect('outage-c'),
      };
      for (const [name, op] of Object.entries(ops)) {
        const { error, ms } = await timed(op);
        expect(ms, name).toBeLessThan(store.boundMs + SLACK_MS);
        expectFailure(error, ports(), reasons());
      }
      // acquire with a long wait: the first failure ends it (BackendError), except Redlock's,
      // whose votes are retried until the deadline (then the last QuorumError).
      const waitMs = store.quorum ? 1_500 : 60_000;
      const { error, ms } = await timed(() => locker.acquire('outage-d', { waitMs }));
      expect(ms).toBeLessThan((store.quorum ? waitMs : 0) + store.boundMs + SLACK_MS);
      expectFailure(error, ports(), reasons());
      const close = await timed(() => locker.close());
      expect(close.error).toBeUndefined();
      expect(close.ms).toBeLessThan(T + SLACK_MS);
    });

    if (kind === 'silent') {
      it('acquire with a deadline shorter than the bound ends at it, engineAnswered false', async () => {
        const locker = createLocker(store.url(ports()));
        await locker.backend();
        const { error, ms } = await timed(() => locker.acquire('outage-e', { waitMs: 150 }));
        expect(error).toBeInstanceOf(LockTimeoutError);
        expect((error as LockTimeoutError).engineAnswered).toBe(false);
        expect(ms).toBeGreaterThanOrEqual(145);
        expect(ms).toBeLessThan(150 + SLACK_MS);
        await locker.close();
      });
    }
  });
});

describe('close() leaves nothing behind (child processes)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = (await privateBuild('outage')).dir;
  }, 180_000);

  /** Run the scenario in a child; its report, and how long it lived after close() returned. */
  async function runChild(url: string) {
    const script = `
      import { createLocker } from ${JSON.stringify(join(dir, 'index.js'))};
      const locker = createLocker(${JSON.stringify(url)});
      await locker.backend();
      for (const op of [() => locker.tryAcquire('k1'), () => locker.inspect('k2')]) {
        await op().catch(() => undefined);
      }
      const startedAt = performance.now();
      await locker.close();
      const closeMs = performance.now() - startedAt;
      const resources = process.getActiveResourcesInfo();
      process.stdout.write(JSON.stringify({ closeMs, resources, closedAt: Date.now() }) + '\\n');
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    const exitedAt = Date.now();
    clearTimeout(killer);
    expect(err).toBe('');
    expect(code).toBe(0);
    const report = JSON.parse(out) as { closeMs: number; resources: string[]; closedAt: number };
    return { ...report, livedMs: exitedAt - report.closedAt };
  }

  const rows = STORES.flatMap((store) =>
    (['closed', 'silent'] as const).map((kind) => ({ name: store.name, kind, store })),
  );
  it.each(rows)(
    '$name, $kind: close() within commandTimeoutMs, exit at once',
    async ({ kind, store }) => {
      const ports = kind === 'closed' ? closed : [silent.port, silent.port, silent.port];
      const { closeMs, resources, livedMs } = await runChild(store.url(ports));
      expect(closeMs).toBeLessThan(T + SLACK_MS);
      expect(livedMs).toBeLessThan(store.exitMs ?? 1_500);
      if (!store.lingers?.[kind]) {
        expect(resources.filter((r) => r === 'Timeout' || r === 'TCPSocketWrap')).toEqual([]);
      }
    },
  );
});
