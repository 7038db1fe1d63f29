/**
 * The flash-sale orchestrator: fork the worker processes, seed a fresh stock once they have all
 * reached the lock store (on the store's Redis or PostgreSQL, else in a SQLite file in a temp
 * folder; see `inventory.ts`), start them together, show progress, collect their figures over
 * IPC and summarise. If a worker fails, the others are killed and the run rejects with that
 * worker's error; no worker outlives the run, and the run's stock is removed afterwards.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import cliProgress from 'cli-progress';

import {
  createInventory,
  type Inventory,
  type InventoryLocation,
  inventoryLocation,
} from './inventory.js';
import type { ParentMessage, WorkerConfig, WorkerFigures, WorkerMessage } from './protocol.js';
import { type FlashSaleResult, summarize } from './report.js';

/** Options of one run; the CLI validates them. */
export interface FlashSaleOptions {
  /**
   * Store URL of the locker. Undefined: an embedded store (`sqlite:`) in the run's temp folder,
   * deleted afterwards, so every run starts clean.
   */
  readonly store?: string | undefined;
  /** Worker processes (>= 1). */
  readonly workers: number;
  /** Initial stock (>= 1). */
  readonly stock: number;
  /** Purchase attempts in all, split across the workers (>= 1). */
  readonly attempts: number;
  /** Lease length, ms. */
  readonly ttlMs: number;
  /** False: no locking and unfenced writes (shows overselling). */
  readonly lock: boolean;
  /** Draw a progress bar on this stream (normally stderr when it is a TTY). */
  readonly progressStream?: NodeJS.WritableStream | undefined;
}

/** The run was interrupted (SIGINT / SIGTERM); workers were stopped. */
export class FlashSaleInterrupted extends Error {
  readonly signal: NodeJS.Signals;
  constructor(signal: NodeJS.Signals) {
    super(`interrupted by ${signal}`);
    this.name = 'FlashSaleInterrupted';
    this.signal = signal;
  }
}

/** How long a worker may take to exit after its final report, ms. */
const EXIT_GRACE_MS = 10_000;
/** How much of a worker's stderr is kept for an error report, characters. */
const STDERR_TAIL = 4000;

interface Worker {
  readonly id: number;
  readonly process: ChildProcess;
  readonly closed: Promise<void>;
  figures: WorkerFigures | undefined;
  progress: number;
  ready: boolean;
  stderr: string;
}

/** Split `total` into `parts` near-equal shares (the first ones get the remainder). */
export function splitAttempts(total: number, parts: number): number[] {
  const base = Math.floor(total / parts);
  const extra = total % parts;
  return Array.from({ length: parts }, (_, i) => base + (i < extra ? 1 : 0));
}

/**
 * Run the flash sale and return its figures.
 * @throws Error when a worker fails (its message included) or the run is interrupted
 *   (`FlashSaleInterrupted`); every worker has exited by then.
 */
export async function runFlashSale(options: FlashSaleOptions): Promise<FlashSaleResult> {
  const dir = mkdtempSync(join(tmpdir(), 'fencelock-flash-sale-'));
  const store = options.store ?? `sqlite:${join(dir, 'locks.db')}`;
  let location: InventoryLocation;
  try {
    location = inventoryLocation(store, dir, randomBytes(4).toString('hex'));
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  let seeding: Promise<Inventory> | undefined;
  const workerPath = fileURLToPath(new URL('./worker.js', import.meta.url));
  const workers: Worker[] = [];
  let bar: cliProgress.SingleBar | undefined;

  const failure = deferred<never>();
  failure.promise.catch(() => undefined);
  const fail = (error: Error) => failure.reject(error);
  const failed = failure.promise;
  const allReady = deferred<void>();
  const allDone = deferred<void>();
  const onSignal = (signal: NodeJS.Signals) => fail(new FlashSaleInterrupted(signal));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    const shares = splitAttempts(options.attempts, options.workers);
    for (const [id, attempts] of shares.entries()) {
      const config: WorkerConfig = {
        workerId: id,
        store,
        inventory: location,
        attempts,
        ttlMs: options.ttlMs,
        lock: options.lock,
      };
      const child = fork(workerPath, [JSON.stringify(config)], {
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
        serialization: 'json',
      });
      const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
      const worker: Worker = {
        id,
        process: child,
        closed,
        figures: undefined,
        progress: 0,
        ready: false,
        stderr: '',
      };
      workers.push(worker);
      child.stderr?.setEncoding('utf8');
      child.stderr?.on('data', (chunk: string) => {
        worker.stderr = (worker.stderr + chunk).slice(-STDERR_TAIL);
      });
      child.on('error', (error) => fail(new Error(`worker ${id}: ${error.message}`)));
      child.on('message', (message: WorkerMessage) => {
        switch (message.type) {
          case 'ready':
            worker.ready = true;
            if (workers.length === shares.length && workers.every((w) => w.ready))
              allReady.resolve();
            break;
          case 'progress':
            worker.progress = message.attempts;
            bar?.update(workers.reduce((n, w) => n + w.progress, 0));
            break;
          case 'done':
            worker.figures = message.figures;
            worker.progress = message.figures.attempts;
            if (workers.every((w) => w.figures !== undefined)) allDone.resolve();
            break;
          case 'error':
            fail(new Error(`worker ${id} failed: ${message.message.replace(/^fencelock: /, '')}`));
            break;
        }
      });
      child.once('close', (code, signal) => {
        if (worker.figures !== undefined && code === 0) return;
        const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
        const tail = worker.stderr.trim();
        const when = worker.figures === undefined ? ' before reporting its figures' : '';
        fail(new Error(`worker ${id} ${how}${when}${tail ? `:\n${tail}` : ''}`));
      });
    }

    await Promise.race([allReady.promise, failed]);
    // Seeded only now: a store the workers cannot reach fails as their error, not as ours.
    seeding = createInventory(location, options.stock);
    seeding.catch(() => undefined);
    const inventory = await Promise.race([seeding, failed]);
    if (options.progressStream) {
      bar = new cliProgress.SingleBar(
        {
          stream: options.progressStream,
          format: `flash sale [{bar}] {percentage}% | {value}/{total} attempts | {duration_formatted}`,
          hideCursor: true,
          clearOnComplete: true,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(options.attempts, 0);
    }
    const startedAt = performance.now();
    const go: ParentMessage = { type: 'go' };
    for (const w of workers) w.process.send(go);
    await Promise.race([allDone.promise, failed]);
    const elapsedMs = performance.now() - startedAt;
    bar?.update(options.attempts);
    bar?.stop();
    bar = undefined;

    // Each worker closed its locker and inventory before reporting; it must now exit by itself.
    let grace: NodeJS.Timeout | undefined;
    const stuck = new Promise<never>((_, reject) => {
      grace = setTimeout(() => {
        const ids = workers.filter((w) => w.process.exitCode === null).map((w) => w.id);
        reject(new Error(`worker(s) ${ids.join(', ')} did not exit after reporting`));
      }, EXIT_GRACE_MS);
    });
    stuck.catch(() => undefined);
    try {
      await Promise.race([Promise.all(workers.map((w) => w.closed)), failed, stuck]);
    } finally {
      clearTimeout(grace);
    }

    const { stock: stockLeft } = await inventory.read();
    return summarize({
      store,
      inventory: location.kind,
      workers: options.workers,
      lock: options.lock,
      ttlMs: options.ttlMs,
      stock: options.stock,
      stockLeft,
      elapsedMs,
      perWorker: workers.map((w) => w.figures!),
      writeLog: await inventory.writeLog(),
    });
  } finally {
    bar?.stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await stopAll(workers);
    // Also when the run failed while the stock was being seeded: wait for it, then clean up.
    const inventory = await seeding?.catch(() => undefined);
    if (inventory !== undefined) {
      // Best effort: a failed clean-up must not hide the run's own outcome or error.
      await inventory.drop().catch(() => undefined);
      await inventory.close().catch(() => undefined);
    }
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Kill every worker still running (SIGTERM, then SIGKILL) and wait until all have exited. */
async function stopAll(workers: readonly Worker[]): Promise<void> {
  const running = workers.filter(
    (w) => w.process.exitCode === null && w.process.signalCode === null,
  );
  for (const w of running) w.process.kill('SIGTERM');
  const escalate = setTimeout(() => {
    for (const w of running) {
      if (w.process.exitCode === null && w.process.signalCode === null) w.process.kill('SIGKILL');
    }
  }, 2000);
  await Promise.all(running.map((w) => w.closed));
  clearTimeout(escalate);
}

interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: Error): void;
}

function deferred<T>(): Deferred<T> {
  let resolve: (value: T) => void = () => undefined;
  let reject: (error: Error) => void = () => undefined;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
