/**
 * The poll bound of the backends that report the holder's remaining time (`holderTtlMs` on a
 * not-granted attempt): the core never waits past it, so a waiter gets a key whose holder
 * vanished without releasing it soon after the holder's TTL, however long its retry backoff.
 *
 * The holder here takes its keys through the backend's own `attempt` (what a locker sends on
 * acquire) and then neither renews nor releases them: a process that crashed right after its
 * grant. A holder taken with a locker would not do: when its lease runs out in the client, the
 * core sends a release (compare-and-delete), which on PostgreSQL also NOTIFYs the waiters. Here
 * the lease ends on the engine's clock only, and nothing tells the waiters.
 *
 * The waiters' retry options make the backoff far longer than their wait (10 s), so only the
 * bound can get them the key in time:
 * - event-driven waiters (PostgreSQL LISTEN/NOTIFY) re-attempt after `backoff + 4 × maxDelayMs`
 *   (≥ 60 s here) unless woken, so without the bound they wait for the whole 10 s, deterministically;
 * - polling waiters (no `waitForChange`) sleep a full-jitter backoff: ≤ 10 ms, ≤ 1 s, then
 *   uniform in [0, 100 s] from the third attempt on, which falls before the 1.5 s TTL. Without
 *   the bound one waiter still lands in the test's 3.5 s window with probability ~4 %, so
 *   several waiters (on keys of their own) must all be granted in it: ~4 %^n for n of them.
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import type { Backend, Locker, RetryOptions } from '../../packages/fencelock/src/index.js';

/** The crashed holder's TTL, ms. */
export const HOLDER_TTL_MS = 1_500;
/** How long each waiter waits, ms. */
export const WAIT_MS = 10_000;
/**
 * A waiter must be granted this soon after the holder's grant, ms: the TTL plus 3.5 s of slack
 * for a loaded machine; without the bound it would wait its whole `WAIT_MS`.
 */
export const GRANTED_BY_MS = HOLDER_TTL_MS + 3_500;

/** For event-driven waiters: every re-attempt not caused by a notification is ≥ 60 s away. */
export const NOTIFIED_RETRY: Required<RetryOptions> = {
  initialDelayMs: 20,
  maxDelayMs: 15_000,
  factor: 2,
};

/**
 * For polling waiters: backoff ceilings 10 ms, 1 s, 100 s, then 600 s. The bound's jitter is at
 * most `initialDelayMs` (10 ms).
 */
export const POLLING_RETRY: Required<RetryOptions> = {
  initialDelayMs: 10,
  maxDelayMs: 600_000,
  factor: 100,
};

/** How one waiter fared. */
export interface WaiterOutcome {
  readonly key: string;
  /** The crashed holder's token. */
  readonly holderToken: bigint;
  /** 'granted', or the name of the error `acquire` rejected with. */
  readonly outcome: string;
  /** From the holder's grant to the waiter's, ms (or to its failure). */
  readonly afterMs: number;
  readonly token?: bigint;
}

/**
 * Take every key of `keys` through `holder.attempt` with `HOLDER_TTL_MS` (never renewed nor
 * released), then have `waiter` acquire each of them at once with `retry` and `WAIT_MS`.
 * Granted leases are released.
 */
export async function waitOutCrashedHolder(
  holder: Backend,
  waiter: Locker,
  keys: readonly string[],
  retry: Required<RetryOptions>,
): Promise<WaiterOutcome[]> {
  // Connect first: a Redlock vote on nodes not yet connected can time out (a QuorumError).
  await holder.inspect(keys[0]!);
  return Promise.all(
    keys.map(async (key) => {
      const grant = await holder.attempt({
        key,
        owner: randomBytes(16).toString('hex'),
        ttlMs: HOLDER_TTL_MS,
        mode: 'write',
        autoRenew: false,
        willWait: false,
      });
      if (!grant.granted) throw new Error(`the holder was not granted ${key}`);
      const grantedAt = performance.now();
      try {
        const lease = await waiter.acquire(key, { waitMs: WAIT_MS, ttlMs: 10_000, retry });
        const afterMs = performance.now() - grantedAt;
        await lease.release();
        return {
          key,
          holderToken: grant.token,
          outcome: 'granted',
          afterMs,
          token: lease.fencingToken,
        };
      } catch (error) {
        const afterMs = performance.now() - grantedAt;
        return { key, holderToken: grant.token, outcome: (error as Error).name, afterMs };
      }
    }),
  );
}

/** Every waiter was granted a newer token, after the holder's TTL and before `GRANTED_BY_MS`. */
export function expectGrantedSoonAfterTtl(outcomes: readonly WaiterOutcome[]): void {
  const summary = (o: WaiterOutcome) => `${o.outcome} after ${Math.round(o.afterMs)} ms`;
  for (const o of outcomes) {
    expect(o.outcome, summary(o)).toBe('granted');
    expect(o.token, summary(o)).toBeGreaterThan(o.holderToken);
    // Not before the crashed holder's lease ran out on the engine (a little slack for the time
    // between the engine's grant and the holder's reading of its clock).
    expect(o.afterMs, summary(o)).toBeGreaterThanOrEqual(HOLDER_TTL_MS - 250);
    expect(o.afterMs, summary(o)).toBeLessThan(GRANTED_BY_MS);
  }
}
