/**
 * The semaphore contract's multi-process case: contenders in several processes (permit-worker.mjs)
 * take permits of one key on the store under test and write through the torture harness's
 * fenced register (tools/torture/src/register.ts, on the register server of
 * `scripts/services.sh`), and the torture checker (`checkRun` of tools/torture/src/checker.ts)
 * judges what they did: how many held a permit at once, by the grants' intervals on the
 * machine's monotonic clock and by the register's order of writes, the tokens' order, and the
 * writes the register accepted.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { type ClientEvent, checkRun, type RunVerdict } from '../../tools/torture/src/checker.js';
import { FencedRegister } from '../../tools/torture/src/register.js';
import { REGISTER_URL } from '../helpers/engines.js';
import { privateBuild } from '../helpers/private-build.js';

/** What a worker process is told (its one JSON argument). */
interface PermitWorkerConfig {
  readonly name: string;
  readonly libraryDir: string;
  readonly registerModule: string;
  readonly registerUrl: string;
  /** The register's schema; absent: no writes (a holder there only to be killed). */
  readonly registerSchema?: string;
  readonly store: string;
  readonly key: string;
  readonly permits: number;
  readonly contenders: number;
  readonly rounds: number;
  readonly ttlMs: number;
  readonly waitMs: number;
  /** Keep the first permit until the process is killed. */
  readonly holdForever?: boolean;
}

/** A run: every process's contenders, `rounds` permits each. */
export interface PermitRunOptions {
  /** Store URL the processes open (`createLocker(url)`), the store under test. */
  readonly store: string;
  readonly key: string;
  readonly permits: number;
  readonly processes: number;
  readonly contendersPerProcess: number;
  readonly rounds: number;
  /** Each permit's TTL and each acquire's longest wait, ms. */
  readonly ttlMs: number;
  readonly waitMs: number;
}

export interface PermitRun {
  readonly verdict: RunVerdict;
  /** Every `release()`'s outcome, from every process. */
  readonly outcomes: readonly string[];
}

/** A worker's IPC message: a checker event (token as decimal text) or its last word. */
type WorkerMessage =
  | (Omit<ClientEvent, 'token'> & { token?: string })
  | { type: 'done'; outcomes: string[] }
  | { type: 'error'; message: string };

interface Worker {
  readonly child: ChildProcess;
  /** Resolves to the worker's release outcomes once it exits after its last word. */
  readonly finished: Promise<string[]>;
}

const WORKER = fileURLToPath(new URL('./permit-worker.mjs', import.meta.url));

/** Fork one worker; `onEvent` gets its checker events as they come. */
async function startWorker(
  settings: Omit<PermitWorkerConfig, 'libraryDir' | 'registerModule' | 'registerUrl'>,
  onEvent: (event: ClientEvent) => void,
): Promise<Worker> {
  const build = await privateBuild('semaphore-processes');
  const config: PermitWorkerConfig = {
    ...settings,
    libraryDir: build.dir,
    registerModule: `${build.root}/tools/torture/dist/register.js`,
    registerUrl: REGISTER_URL,
  };
  const child = fork(WORKER, [JSON.stringify(config)], { stdio: 'pipe' });
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const finished = new Promise<string[]>((resolve, reject) => {
    let outcomes: string[] | undefined;
    child.on('message', (message: WorkerMessage) => {
      if (message.type === 'done') outcomes = message.outcomes;
      else if (message.type === 'error') reject(new Error(`${config.name}: ${message.message}`));
      else if (message.type === 'acquired') {
        onEvent({ ...message, token: BigInt(message.token!) } as ClientEvent);
      } else onEvent(message as ClientEvent);
    });
    child.on('exit', (code, signal) => {
      if (outcomes !== undefined && code === 0) resolve(outcomes);
      else reject(new Error(`${config.name} exited (${code ?? signal}): ${stderr}`));
    });
  });
  // Whoever stops waiting first (a failed sibling, a kill) must not leave a rejection unheard.
  finished.catch(() => undefined);
  return { child, finished };
}

/**
 * Run the contenders and judge them. Rejects when a process fails (its error) or exits without
 * its last word; every process is killed and the register's schema dropped either way.
 */
export async function runPermitProcesses(options: PermitRunOptions): Promise<PermitRun> {
  const registerSchema = `permits_${randomBytes(6).toString('hex')}`;
  const register = new FencedRegister(REGISTER_URL, registerSchema, options.permits);
  await register.create();
  const events: ClientEvent[] = [];
  const workers: Worker[] = [];
  try {
    for (let p = 0; p < options.processes; p++) {
      const settings = {
        name: `p${p}`,
        registerSchema,
        store: options.store,
        key: options.key,
        permits: options.permits,
        contenders: options.contendersPerProcess,
        rounds: options.rounds,
        ttlMs: options.ttlMs,
        waitMs: options.waitMs,
      };
      workers.push(await startWorker(settings, (event) => events.push(event)));
    }
    const outcomes = (await Promise.all(workers.map((w) => w.finished))).flat();
    const { writes, value } = await register.read();
    return { verdict: checkRun(events, writes, value, [], options.permits), outcomes };
  } finally {
    for (const { child } of workers) if (child.exitCode === null) child.kill('SIGKILL');
    await register.drop().catch(() => undefined);
    await register.close();
  }
}

/** A permit held by another process, and the way to kill that process (SIGKILL). */
export interface HolderProcess {
  readonly fencingToken: bigint;
  /** SIGKILL the holder; resolves once it has exited. */
  kill(): Promise<void>;
}

/**
 * Start a process that takes one permit of `key`'s semaphore (watchdog on) and keeps it; resolves
 * once it holds it.
 */
export async function startPermitHolder(options: {
  readonly store: string;
  readonly key: string;
  readonly permits: number;
  readonly ttlMs: number;
}): Promise<HolderProcess> {
  let granted!: (token: bigint) => void;
  const token = new Promise<bigint>((resolve) => {
    granted = resolve;
  });
  const worker = await startWorker(
    {
      name: 'holder',
      ...options,
      contenders: 1,
      rounds: 1,
      waitMs: 30_000,
      holdForever: true,
    },
    (event) => {
      if (event.type === 'acquired') granted(event.token);
    },
  );
  const exited = new Promise<void>((resolve) => worker.child.once('exit', () => resolve()));
  const kill = async () => {
    worker.child.kill('SIGKILL');
    await exited;
  };
  try {
    const fencingToken = await Promise.race([token, worker.finished.then(() => 0n)]);
    if (fencingToken === 0n) throw new Error('the holder process ended without a permit');
    return { fencingToken, kill };
  } catch (error) {
    await kill();
    throw error;
  }
}
