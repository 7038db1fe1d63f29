/**
 * The torture harness (`npm run torture`): K client processes contend for
 * one key on a real engine (its lock, the permits of its semaphore, or its election) while a fault of
 * `faults.ts` hits a holder; the fenced register and the clients' reports are then judged by the
 * checker. One call of `runCell` is one run of one backend × fault cell; `runMatrix` runs the
 * cells and the self-test.
 *
 * Everything a run creates (processes, proxies, register schema, engine-side namespace) is
 * removed in a `finally`, also when the run fails.
 */
import { type ChildProcess, execFile, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { findInRepository } from '@fencelock/cli/tooling';
import pg from 'pg';
import { type ClientEvent, checkRun, type FaultMark, type RunVerdict } from './checker.js';
import type { ClientConfig, ClientMessage } from './client.js';
import type { FaultContext, FaultSpec } from './faults.js';
import { startTcpProxy, type TcpProxy } from './proxy.js';
import { FencedRegister } from './register.js';
import { type BackendName, PORTS, REGISTER_URL, type Topology, topologyOf } from './topologies.js';

const execFileAsync = promisify(execFile);
const CLIENT_PATH = fileURLToPath(new URL('./client.js', import.meta.url));
/** `scripts/services.sh` of the repository the harness runs from: the nearest one above it. */
const SERVICES =
  findInRepository(fileURLToPath(new URL('.', import.meta.url)), 'scripts/services.sh') ??
  'scripts/services.sh';

/** Settings of one run. */
export interface CellOptions {
  readonly backend: BackendName;
  readonly fault: FaultSpec;
  /** Lease TTL of every client, ms. */
  readonly ttlMs: number;
  /** Contending client processes. @default 5 */
  readonly clients: number;
  /** Length of the run, ms (the fault comes after a warm-up). */
  readonly durationMs: number;
  /** The register checks tokens; false only for the self-test. @default true */
  readonly fenced: boolean;
  /**
   * A semaphore cell: clients take permits of the key's semaphore of this many permits, and the
   * register and the checker allow this many holders at once. Absent: a lock cell.
   */
  readonly permits?: number;
  /**
   * Self-test only: the permit count the clients ask for instead of `permits` (a semaphore that
   * lets more holders in than the register is told).
   */
  readonly clientPermits?: number;
  /** An election cell: clients campaign in the key's election; judged as a lock cell. */
  readonly election?: boolean;
  /**
   * A lock-delay cell (a lock's or an election's, never a semaphore's): every client's grants
   * carry this `lockDelayMs`, and the checker counts grants inside the delay of a killed or
   * paused holder. Absent or 0: none.
   */
  readonly lockDelayMs?: number;
  /**
   * Self-test only: the lock-delay the clients ask for instead of `lockDelayMs` (a store that
   * ignores the delay the checker expects).
   */
  readonly clientLockDelayMs?: number;
  /**
   * Self-test only: client i reaches only these endpoint indexes (a split Redlock whose clients
   * each need 2 nodes out of the 5).
   */
  readonly endpointsOf?: (client: number) => readonly number[];
  /** Progress lines. */
  readonly log?: (line: string) => void;
}

/** The outcome of one run. */
export interface CellRun {
  readonly backend: BackendName;
  readonly fault: string;
  readonly fenced: boolean;
  /** The semaphore's permit count (`CellOptions.permits`); absent for a lock cell. */
  readonly permits?: number;
  /** An election cell's run. */
  readonly election?: boolean;
  /** The lock-delay of a lock-delay cell's run (`CellOptions.lockDelayMs`); absent for none. */
  readonly lockDelayMs?: number;
  readonly verdict: RunVerdict;
  readonly faults: readonly FaultMark[];
  readonly clientErrors: readonly string[];
  readonly durationMs: number;
  /** Why the fault could not be caused on this machine (the run was skipped), if it could not. */
  readonly skipped?: string;
}

interface Client {
  readonly id: string;
  readonly process: ChildProcess;
  readonly proxies: TcpProxy[];
  ready: boolean;
  exited: boolean;
}

/** Run one cell once. */
export async function runCell(options: CellOptions): Promise<CellRun> {
  const tag = randomBytes(4).toString('hex');
  const namespace = `torture_${options.backend.replace('-', '_')}_${tag}`;
  const topology =
    options.fault.topology?.(options.backend, namespace) ?? topologyOf(options.backend, namespace);
  const key = `cell-${options.fault.id}-${tag}`;
  const register = new FencedRegister(REGISTER_URL, `reg_${tag}`, options.permits);
  const clients: Client[] = [];
  const events: ClientEvent[] = [];
  const errors: string[] = [];
  const faults: FaultMark[] = [];
  const grantWaiters = new Set<(client: string) => void>();
  const holders = new Map<string, boolean>();
  const t0 = performance.now();
  const t0Ns = process.hrtime.bigint();
  const now = () => performance.now() - t0;
  /** A client's reading of the monotonic clock (`atNs`) on the harness's timeline. */
  const clientTime = (atNs: string) => Number(BigInt(atNs) - t0Ns) / 1e6;
  const log = options.log ?? (() => undefined);
  const unavailable = await options.fault.unavailable?.(options.backend);
  if (unavailable !== undefined) {
    log(`${options.backend} ${options.fault.id}: skipped (${unavailable})`);
    await register.close().catch(() => undefined);
    return skippedRun(options, unavailable);
  }
  // Files of the fault's own (e.g. the libfaketime timestamp file), removed with the run.
  const runDir = mkdtempSync(join(tmpdir(), 'fencelock-torture-run-'));
  const clientEnv = options.fault.clientEnv?.(runDir);

  try {
    await register.create();
    await topology.setUp?.();
    for (let i = 0; i < options.clients; i++) {
      const id = `c${i + 1}`;
      const indexes = options.endpointsOf?.(i) ?? topology.endpoints.map((_, n) => n);
      const proxies: TcpProxy[] = [];
      if (options.fault.proxies === true) {
        for (const n of indexes) {
          proxies.push(await startTcpProxy({ targetPort: topology.endpoints[n]! }));
        }
      }
      const ports =
        proxies.length > 0
          ? proxies.map((p) => p.port)
          : indexes.map((n) => topology.endpoints[n]!);
      const permits = options.clientPermits ?? options.permits;
      const lockDelayMs = options.clientLockDelayMs ?? options.lockDelayMs ?? 0;
      const config: ClientConfig = {
        client: id,
        store: topology.storeUrl(ports),
        key,
        ...(permits === undefined ? {} : { permits }),
        ...(options.election === true ? { election: true } : {}),
        ...(lockDelayMs > 0 ? { lockDelayMs } : {}),
        ttlMs: options.ttlMs,
        holdMs:
          options.fault.longHold === true
            ? 2 * options.ttlMs
            : Math.max(20, Math.round(options.ttlMs / 20)),
        // A semaphore's holders write twice, so that the register sees them inside together.
        writes: options.fault.longHold === true ? 8 : options.permits === undefined ? 1 : 2,
        idleMs: Math.max(10, Math.round(options.ttlMs / 10)),
        registerUrl: REGISTER_URL,
        registerSchema: `reg_${tag}`,
        fenced: options.fenced,
      };
      const child = fork(CLIENT_PATH, [JSON.stringify(config)], {
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
        ...(clientEnv === undefined ? {} : { env: { ...process.env, ...clientEnv } }),
      });
      const client: Client = { id, process: child, proxies, ready: false, exited: false };
      clients.push(client);
      child.stderr?.on('data', () => undefined);
      child.on('exit', () => {
        client.exited = true;
      });
      child.on('message', (message: ClientMessage) => {
        const at = now();
        switch (message.type) {
          case 'ready':
            client.ready = true;
            break;
          case 'acquiring':
            events.push({ at: clientTime(message.atNs), client: id, type: 'acquiring' });
            break;
          case 'acquired':
            holders.set(id, true);
            events.push({
              at: clientTime(message.atNs),
              client: id,
              type: 'acquired',
              token: BigInt(message.token),
              remainingMs: message.remainingMs,
              grantedAt: clientTime(message.atNs),
            });
            for (const wake of [...grantWaiters]) wake(id);
            break;
          case 'validity':
            events.push({
              at: clientTime(message.atNs),
              client: id,
              type: 'validity',
              remainingMs: message.remainingMs,
            });
            break;
          case 'written':
            events.push({
              at,
              client: id,
              type: 'written',
              accepted: message.accepted,
              knewLost: message.knewLost,
            });
            break;
          case 'releasing':
            holders.delete(id);
            events.push({ at: clientTime(message.atNs), client: id, type: 'releasing' });
            break;
          case 'released':
            break;
          case 'lost':
            events.push({
              at: clientTime(message.atNs),
              client: id,
              type: 'lost',
              reason: message.reason,
            });
            break;
          case 'error':
            if (errors.length < 20) errors.push(`${id}: ${message.message}`);
            break;
        }
      });
    }
    await until(() => clients.every((c) => c.ready || c.exited), 30_000);

    const context: FaultContext = {
      ttlMs: options.ttlMs,
      topology,
      key,
      clients: clients.map((c) => c.id),
      runDir,
      now,
      sleep,
      holder: ({ current = false, timeoutMs = 10 * options.ttlMs + 10_000 } = {}) => {
        if (current) {
          const held = [...holders.keys()][0];
          if (held !== undefined) return Promise.resolve(held);
        }
        return new Promise((resolve) => {
          const timer = setTimeout(() => {
            grantWaiters.delete(wake);
            resolve(undefined);
          }, timeoutMs);
          const wake = (client: string) => {
            clearTimeout(timer);
            grantWaiters.delete(wake);
            resolve(client);
          };
          grantWaiters.add(wake);
        });
      },
      signal: (client, signal) => {
        const target = clients.find((c) => c.id === client);
        if (target !== undefined && !target.exited) target.process.kill(signal);
      },
      proxiesOf: (client) => clients.find((c) => c.id === client)?.proxies ?? [],
      services: async (...args) => {
        await execFileAsync('bash', [SERVICES, ...args]);
      },
    };

    // Warm up: grants before the fault (one when each holds for 2 × TTL, three otherwise).
    const warmGrants = options.fault.longHold === true ? 1 : 3;
    await until(() => events.filter((e) => e.type === 'acquired').length >= warmGrants, 20_000);
    log(`${options.backend} ${options.fault.id}: warm, injecting`);
    // A fault that fails half-way has undone what it did (its finally); the run is still judged.
    const mark = await options.fault.inject(context).catch((error: unknown) => {
      errors.unshift(`fault ${options.fault.id}: ${(error as Error)?.message ?? String(error)}`);
      return undefined;
    });
    if (mark !== undefined) faults.push(mark);
    // Let the run go on long enough to see the recovery (after the lock-delay, if any).
    const settleUntil = Math.max(
      options.durationMs,
      now() + 3 * options.ttlMs + (options.lockDelayMs ?? 0),
    );
    await sleep(Math.max(0, settleUntil - now()));
  } finally {
    await stopClients(clients, options.ttlMs);
    await Promise.allSettled(clients.flatMap((c) => c.proxies.map((p) => p.close())));
    await topology.tearDown?.().catch(() => undefined);
    rmSync(runDir, { recursive: true, force: true });
  }
  try {
    const { writes, value } = await register.read();
    const verdict = checkRun(
      events,
      writes,
      value,
      faults,
      options.permits,
      options.lockDelayMs ?? 0,
    );
    return {
      backend: options.backend,
      fault: options.fault.id,
      fenced: options.fenced,
      ...(options.permits === undefined ? {} : { permits: options.permits }),
      ...(options.election === true ? { election: true } : {}),
      ...(lockDelayOf(options) > 0 ? { lockDelayMs: lockDelayOf(options) } : {}),
      verdict,
      faults,
      clientErrors: errors,
      durationMs: Math.round(now()),
    };
  } finally {
    await register.drop().catch(() => undefined);
    await register.close().catch(() => undefined);
    await dropNamespace(topology).catch(() => undefined);
    topology.dispose?.();
  }
}

/** The outcome of a run whose fault cannot be caused here: nothing ran, the reason is kept. */
export function skippedRun(options: CellOptions, reason: string): CellRun {
  return {
    backend: options.backend,
    fault: options.fault.id,
    fenced: options.fenced,
    ...(options.permits === undefined ? {} : { permits: options.permits }),
    ...(options.election === true ? { election: true } : {}),
    ...(lockDelayOf(options) > 0 ? { lockDelayMs: lockDelayOf(options) } : {}),
    verdict: checkRun([], [], 0n, []),
    faults: [],
    clientErrors: [`skipped: ${reason}`],
    durationMs: 0,
    skipped: reason,
  };
}

/** The lock-delay a cell's checker expects, ms (0: none). */
function lockDelayOf(options: CellOptions): number {
  return options.lockDelayMs ?? 0;
}

/** Ask every client to stop, wait a while, then kill what is left (resumed first if paused). */
async function stopClients(clients: readonly Client[], ttlMs: number): Promise<void> {
  for (const client of clients) {
    if (client.exited) continue;
    client.process.kill('SIGCONT');
    if (client.process.connected) client.process.send({ type: 'stop' }, () => undefined);
  }
  await until(() => clients.every((c) => c.exited), 5_000 + 2 * ttlMs);
  for (const client of clients) {
    if (!client.exited) client.process.kill('SIGKILL');
  }
  await until(() => clients.every((c) => c.exited), 5_000);
}

/**
 * Remove what a run left on the engine where it does not expire by itself: PostgreSQL schemas,
 * Redis fencing counters. (etcd keys live on leases and ZooKeeper lock nodes are ephemeral under
 * container nodes: both go by themselves.)
 */
export async function dropNamespace(topology: Topology): Promise<void> {
  if (topology.backend === 'redis' || topology.backend === 'redlock') {
    await Promise.all(
      topology.endpoints.map((port) =>
        execFileAsync('bash', [
          '-c',
          `redis-cli -p ${port} --scan --pattern '${topology.namespace}:*' | xargs -r redis-cli -p ${port} del >/dev/null`,
        ]),
      ),
    );
  }
  if (topology.backend === 'postgres' || topology.backend === 'postgres-advisory') {
    const client = new pg.Client({
      connectionString: `postgres://fencelock@127.0.0.1:${PORTS.postgres}/fencelock`,
    });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.query(`DROP SCHEMA IF EXISTS "${topology.namespace}" CASCADE`);
    } finally {
      await client.end();
    }
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function until(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  while (!condition()) {
    if (performance.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}
