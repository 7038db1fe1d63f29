/**
 * The first round of a multi-key acquire as one engine operation (`Backend.attemptAll`): a single
 * attempt at every key, granted all together or not at all, so a busy key costs one round trip
 * and leaves nothing to release. Used where `capabilities.attemptAll` is true; the leases it makes
 * are the leases `tryAcquire` would make (watchdog, `signal`, events).
 */
import type { AttemptResult, Backend, Granted } from '../core/backend.js';
import { driftMs, monotonicNow } from '../core/clock.js';
import { isObserved, publish } from '../core/events.js';
import type { Lease } from '../core/lease.js';
import type { Lock, SingleAttempt } from '../core/lock.js';
import { BackendError, FencelockError } from '../errors.js';

/**
 * One engine operation for a single attempt at each of `locks` (their keys distinct and sorted).
 * @returns every lease, in the order of `locks`; null when a key is taken (nothing is held);
 *   undefined when the engine cannot make the attempts as one (no `attemptAll`, a reentrant
 *   handle, Redis Cluster keys in different hash slots): the caller then attempts key by key.
 * @throws BackendError (or the backend's typed error) when the engine did not answer; every
 *   request is then abandoned in the background, in case the operation was applied.
 */
export async function attemptAll(locks: readonly Lock[]): Promise<Lease[] | null | undefined> {
  const backend = await locks[0]!.backend();
  if (!backend.capabilities.attemptAll || backend.attemptAll === undefined) return undefined;
  const attempts: SingleAttempt[] = [];
  for (const lock of locks) {
    const attempt = lock.singleAttempt(backend);
    if (attempt === undefined) return undefined;
    attempts.push(attempt);
  }
  const startedAt = monotonicNow();
  let results: AttemptResult[] | null;
  try {
    results = await backend.attemptAll(attempts.map((a) => a.request));
  } catch (error) {
    abandonAll(backend, attempts);
    if (error instanceof FencelockError) throw error;
    throw new BackendError(backend.name, `acquire of ${attempts.length} keys`, error);
  }
  if (results === null) return undefined;
  if (!results.every((result) => result.granted)) {
    for (const a of attempts) acquireEvent(backend, a, startedAt, 'busy');
    return null;
  }
  const grants = results as Granted[];
  // Grants the caller no longer waits for, or that came too late to be believed valid, are no
  // use: the whole round then failed.
  const validUntil = (g: Granted, a: SingleAttempt) =>
    startedAt + g.ttlMs - driftMs(g.ttlMs, a.driftFactor);
  const now = monotonicNow();
  if (attempts[0]!.stopped() || grants.some((g, i) => now >= validUntil(g, attempts[i]!))) {
    abandonAll(backend, attempts);
    return null;
  }
  return grants.map((granted, i) => {
    const attempt = attempts[i]!;
    const lease = attempt.lease(granted, startedAt);
    acquireEvent(backend, attempt, startedAt, 'granted', granted);
    return lease;
  });
}

/** Withdraw every request (best effort): nothing of a lost or useless answer stays held. */
function abandonAll(backend: Backend, attempts: readonly SingleAttempt[]): void {
  for (const a of attempts) a.track(backend.abandon(a.request).catch(() => undefined));
}

/** The `acquire` event of one key of the round, as the acquire loop publishes it. */
function acquireEvent(
  backend: Backend,
  attempt: SingleAttempt,
  startedAt: number,
  outcome: 'granted' | 'busy',
  granted?: Granted,
): void {
  if (!isObserved('acquire')) return;
  publish('acquire', () => ({
    backend: backend.name,
    store: attempt.store,
    key: attempt.request.key,
    owner: attempt.request.owner,
    outcome,
    waitMs: monotonicNow() - startedAt,
    attempts: 1,
    ...(granted ? { fencingToken: granted.token, ttlMs: granted.ttlMs } : {}),
  }));
}
