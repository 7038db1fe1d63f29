/**
 * A TTL no longer than the drift allowance (ttlMs × driftFactor + 2 ms) can never give a lease
 * any validity: acquire must reject it up front instead of abandoning every grant forever.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
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

describe('TTL within the drift allowance', () => {
  it.each([1, 2])('rejects ttlMs %i before any engine call', async (ttlMs) => {
    const error = await locker.acquire('k', { ttlMs }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('ttlMs');
    expect(backend.totalCalls).toBe(0);
  });

  it('names maxHoldMs when the cap is what makes the lease too short', async () => {
    const error = await locker
      .tryAcquire('k', { ttlMs: 1000, maxHoldMs: 2 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('maxHoldMs');
    expect(backend.totalCalls).toBe(0);
  });

  it('accepts the shortest TTL that leaves some validity (3 ms)', async () => {
    // 0.97 ms of validity: granted, or given up as too late under load, but never refused.
    const outcome = await locker
      .tryAcquire('k', { ttlMs: 3, autoRenew: false })
      .catch((e: unknown) => e);
    expect(outcome).not.toBeInstanceOf(InvalidArgumentError);
    expect(backend.calls.attempt).toBe(1);
  });
});
