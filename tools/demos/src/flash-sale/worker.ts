/**
 * One flash-sale buyer process, forked by `run.ts`. It makes its share of purchase attempts on
 * the shared inventory: lock `flash-sale:stock` with `locker.withLock`, read the stock, work for
 * 1–5 ms, write stock − 1 through the inventory's fencing guard with the lease's fencing token.
 * With `lock: false` it does the same read → work → write with no lock and no fencing, which
 * loses updates and oversells.
 *
 * It uses only the public Locker API; all lock logic is the library's.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { createLocker, type Lease, type Locker, LockLostError } from 'fencelock';
import { type Inventory, openInventory } from './inventory.js';
import {
  LOCK_KEY,
  type ParentMessage,
  type WorkerConfig,
  type WorkerFigures,
  type WorkerMessage,
} from './protocol.js';

/** Shortest and longest simulated work between read and write, ms (inclusive). */
const WORK_MIN_MS = 1;
const WORK_MAX_MS = 5;
/** Least time between two progress messages, ms. */
const PROGRESS_EVERY_MS = 25;

const config = JSON.parse(process.argv[2] ?? '{}') as WorkerConfig;
let finished = false;

// The parent went away (killed, crashed): stop at once, leave no orphan behind.
process.on('disconnect', () => {
  if (!finished) process.exit(1);
});
// Ctrl-C reaches the whole process group: leave the shutdown to the parent, which stops every
// worker and reports the interruption once.
process.on('SIGINT', () => undefined);

function send(message: WorkerMessage): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!process.send || !process.connected) {
      reject(new Error('flash-sale worker: no IPC channel to the parent'));
      return;
    }
    process.send(message, undefined, {}, (error) => (error ? reject(error) : resolve()));
  });
}

function waitForGo(): Promise<void> {
  return new Promise((resolve) => {
    const onMessage = (message: ParentMessage) => {
      if (message.type !== 'go') return;
      process.off('message', onMessage);
      resolve();
    };
    process.on('message', onMessage);
  });
}

/** Simulated work of `ms`; ends early (without throwing) when `signal` aborts. */
function work(ms: number, signal?: AbortSignal): Promise<void> {
  return delay(ms, undefined, signal ? { signal } : {}).catch(() => undefined);
}

function workMs(): number {
  return WORK_MIN_MS + Math.floor(Math.random() * (WORK_MAX_MS - WORK_MIN_MS + 1));
}

async function main(): Promise<void> {
  const { workerId } = config;
  let inventory: Inventory | undefined;
  let locker: Locker | undefined;
  const figures = {
    workerId,
    attempts: 0,
    sold: 0,
    staleRejected: 0,
    skippedLost: 0,
    leasesLost: 0,
    waitsMs: [] as number[],
  };
  try {
    if (config.lock) {
      locker = createLocker(config.store);
      // Load the backend and reach the engine now, so a bad store fails before the sale starts.
      await locker.inspect(LOCK_KEY);
    }
    const go = waitForGo();
    await send({ type: 'ready' });
    await go;
    // The parent seeds the stock between the workers' `ready` and its `go`.
    const opened = await openInventory(config.inventory);
    inventory = opened;

    /** The critical section: read → work → fenced write. */
    const buy = async (lease: Lease, calledAt: number): Promise<void> => {
      figures.waitsMs.push(performance.now() - calledAt);
      const { stock } = await opened.read();
      if (stock <= 0) return;
      await work(workMs(), lease.signal);
      if (lease.signal.aborted) {
        figures.skippedLost += 1;
        return;
      }
      if (await opened.writeFenced(stock - 1, lease.fencingToken, workerId)) figures.sold += 1;
      else figures.staleRejected += 1;
    };

    /**
     * Purchases `withLock` stopped waiting for when their lease was lost mid-write: the write
     * still lands (or is refused) and counts, so they are awaited before the figures go out.
     * Their attempt is already counted as a lost lease, so a failure of theirs is not rethrown.
     */
    const inFlight = new Set<Promise<void>>();
    const tracked = (purchase: Promise<void>): Promise<void> => {
      inFlight.add(purchase);
      const settle = () => inFlight.delete(purchase);
      purchase.then(settle, settle);
      return purchase;
    };

    let lastProgressAt = 0;
    for (let i = 0; i < config.attempts; i++) {
      if (locker) {
        const calledAt = performance.now();
        try {
          await locker.withLock(LOCK_KEY, (lease) => tracked(buy(lease, calledAt)), {
            ttlMs: config.ttlMs,
          });
        } catch (error) {
          if (!(error instanceof LockLostError)) throw error;
          figures.leasesLost += 1;
        }
      } else {
        const { stock } = await opened.read();
        if (stock > 0) {
          await work(workMs());
          await opened.writeUnfenced(stock - 1, workerId);
          figures.sold += 1;
        }
      }
      figures.attempts += 1;
      const now = performance.now();
      if (now - lastProgressAt >= PROGRESS_EVERY_MS || i === config.attempts - 1) {
        lastProgressAt = now;
        await send({ type: 'progress', attempts: figures.attempts });
      }
    }
    await Promise.allSettled(inFlight);
  } finally {
    await locker?.close();
    await inventory?.close();
  }
  const done: WorkerFigures = figures;
  await send({ type: 'done', figures: done });
  finished = true;
  process.disconnect();
}

main().catch(async (error: unknown) => {
  const message = error instanceof Error ? error.message : String(error);
  const stack = error instanceof Error ? error.stack : undefined;
  try {
    await send(
      stack === undefined ? { type: 'error', message } : { type: 'error', message, stack },
    );
  } catch {
    // The parent is gone; the exit code still tells.
  }
  finished = true;
  process.exit(1);
});
