/**
 * The semaphore cells of the matrix: clients take permits of one key's semaphore
 * (`locker.semaphore(key, { permits }).acquire()`) instead of its lock, under the faults that hit
 * a client process (no engine is restarted, so the cells run beside other users of the engines).
 * The register accepts a write only while its token is among the N highest written, and the
 * checker allows N holders inside at once (register.ts, checker.ts).
 *
 * A backend whose `capabilities.permits` is false gets its semaphore cells as skipped, with the
 * reason: `permitsUnavailable` asks the backend itself, once per backend.
 */
import { randomBytes } from 'node:crypto';
import { createLocker } from 'fencelock';
import { dropNamespace } from './harness.js';
import { type BackendName, topologyOf } from './topologies.js';

/**
 * Faults of the semaphore cells, where the fault applies to the backend: none (F0: no more than
 * N holders believed at once without a fault), holder kill -9 (F1: the permit comes back by its
 * TTL or session), holder paused past its TTL (F2) and holder cut off from the engine (F3): the
 * last two let a lapsed holder write while N newer holders are in.
 */
export const SEMAPHORE_FAULTS: readonly string[] = ['F0', 'F1', 'F2', 'F3'];

/** The semaphore faults of the short CI schedule (`--quick`): kill -9 and the pause. */
export const QUICK_SEMAPHORE_FAULTS: readonly string[] = ['F1', 'F2'];

/**
 * Why `backend` cannot run semaphore cells (its `capabilities.permits` is false), or undefined
 * when it can, or when the engine could not be asked (the cells then run and show the errors).
 * Loads the backend on the shared engines of `backend`'s topology and closes it; only for
 * backends whose topology needs no servers of the run's own.
 */
export async function permitsUnavailable(backend: BackendName): Promise<string | undefined> {
  const topology = topologyOf(backend, `torture_probe_${randomBytes(4).toString('hex')}`);
  const locker = createLocker(topology.storeUrl(topology.endpoints));
  try {
    const { capabilities } = await locker.backend();
    return capabilities.permits
      ? undefined
      : `the ${backend} store grants no semaphore permits (capabilities.permits is false)`;
  } catch {
    return undefined;
  } finally {
    await locker.close().catch(() => undefined);
    await dropNamespace(topology).catch(() => undefined);
    topology.dispose?.();
  }
}
