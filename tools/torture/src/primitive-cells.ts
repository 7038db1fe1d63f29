/**
 * The cells of the matrix beside the lock's: clients take permits of one key's semaphore
 * (`locker.semaphore(key, { permits }).acquire()`), or campaign in one key's leader election
 * (`locker.election(key).campaign(value)`, the leadership's term as the token), instead of
 * taking its lock, under the faults that hit a client process (no engine is restarted, so the
 * cells run beside other users of the engines). For a semaphore the register accepts a write
 * only while its token is among the N highest written, and the checker allows N holders inside
 * at once (register.ts, checker.ts); an election is judged as a lock is, with one leader.
 *
 * The lock-delay cells (`torture --lock-delay`) are the lock's and the election's with every grant
 * carrying `lockDelayMs`; permits carry none, so there are no semaphore lock-delay cells.
 *
 * A backend whose capability is false gets those cells as skipped, with the reason:
 * `capabilityUnavailable` asks the backend itself, once per backend.
 */
import { randomBytes } from 'node:crypto';
import { createLocker } from 'fencelock';
import { dropNamespace } from './harness.js';
import { type BackendName, topologyOf } from './topologies.js';

/**
 * Faults of the semaphore and election cells, where the fault applies to the backend: none (F0:
 * no more than N holders, or one leader, believed at once without a fault), holder kill -9 (F1:
 * the grant comes back by its TTL or session), holder paused past its TTL (F2) and holder cut
 * off from the engine (F3): the last two let a lapsed holder write while newer holders are in.
 */
export const CLIENT_FAULTS: readonly string[] = ['F0', 'F1', 'F2', 'F3'];

/** Those faults on the short CI schedule (`--quick`): kill -9 and the pause. */
export const QUICK_CLIENT_FAULTS: readonly string[] = ['F1', 'F2'];

/** The capability a primitive's cells need from the backend. */
const CAPABILITY = {
  semaphore: { name: 'permits', what: 'grants no semaphore permits' },
  election: { name: 'election', what: 'runs no leader elections' },
  lockDelay: { name: 'lockDelay', what: 'keeps no lock-delay' },
} as const;

/**
 * Why `backend` cannot run the cells of `primitive` (its capability is false; `lockDelay`: the
 * lock-delay cells of `torture --lock-delay`), or undefined when
 * it can, or when the engine could not be asked (the cells then run and show the errors). Loads
 * the backend on the shared engines of `backend`'s topology and closes it; only for backends
 * whose topology needs no servers of the run's own.
 */
export async function capabilityUnavailable(
  backend: BackendName,
  primitive: keyof typeof CAPABILITY,
): Promise<string | undefined> {
  const topology = topologyOf(backend, `torture_probe_${randomBytes(4).toString('hex')}`);
  const locker = createLocker(topology.storeUrl(topology.endpoints));
  const { name, what } = CAPABILITY[primitive];
  try {
    const { capabilities } = await locker.backend();
    return capabilities[name]
      ? undefined
      : `the ${backend} store ${what} (capabilities.${name} is false)`;
  } catch {
    return undefined;
  } finally {
    await locker.close().catch(() => undefined);
    await dropNamespace(topology).catch(() => undefined);
    topology.dispose?.();
  }
}
