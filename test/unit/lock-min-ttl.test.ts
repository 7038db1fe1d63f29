/**
 * One TTL rule for every entry point: at least MIN_TTL_MS, at most the longest timer, stated in
 * the error with the value received. A TTL no longer than the drift allowance (ttlMs ×
 * driftFactor + 2 ms) could never give a lease any validity, so a large driftFactor still
 * rejects it up front instead of abandoning every grant forever.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  MAX_TIMER_MS,
  MIN_TTL_MS,
  ttlRule,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

let backend: MemoryBackend;
let locker: Locker;

beforeEach(() => {
  backend = new MemoryBackend();
  locker = createLocker(backend);
});

afterEach(async () => {
  await locker.close();
});

describe('the TTL rule (MIN_TTL_MS to the longest timer)', () => {
  it.each([1, 2, 3, 99, 99.5])(
    'rejects ttlMs %d before any engine call, stating the rule',
    async (ttlMs) => {
      const error = await locker.acquire('k', { ttlMs }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('ttlMs');
      expect((error as InvalidArgumentError).allowed).toBe(ttlRule());
      expect((error as Error).message).toBe(
        `fencelock: invalid ttlMs: expected a number of milliseconds from ${MIN_TTL_MS} to ${MAX_TIMER_MS} (fractions round up), received ${ttlMs}`,
      );
      expect(backend.totalCalls).toBe(0);
    },
  );

  it('names maxHoldMs when the cap is what makes the lease too short', async () => {
    const error = await locker
      .tryAcquire('k', { ttlMs: 1000, maxHoldMs: 2 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('maxHoldMs');
    expect(backend.totalCalls).toBe(0);
  });

  it('accepts the shortest TTL, MIN_TTL_MS', async () => {
    const lease = await locker.tryAcquire('k', { ttlMs: MIN_TTL_MS, autoRenew: false });
    expect(lease?.ttlMs).toBe(MIN_TTL_MS);
    expect(backend.calls.attempt).toBe(1);
    await lease?.release();
  });

  it('leaves MIN_TTL_MS validity under the largest driftFactor (0.5), so drift never eats a TTL in range', async () => {
    const drifty = createLocker(backend, { driftFactor: 0.5 });
    const lease = await drifty.tryAcquire('k', { ttlMs: MIN_TTL_MS, autoRenew: false });
    // 100 − (100 × 0.5 + 2) = 48 ms of validity at most.
    expect(lease?.remainingMs).toBeGreaterThan(0);
    expect(lease?.remainingMs).toBeLessThanOrEqual(48);
    await drifty.close();
  });
});
