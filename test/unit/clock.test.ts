/** Drift math beside the monotonic clock (`core/clock.ts`). */
import { describe, expect, it } from 'vitest';
import { driftMs } from '../../packages/fencelock/src/core/clock.js';

describe('driftMs', () => {
  it('is ttlMs × driftFactor + 2 ms (Redlock)', () => {
    expect(driftMs(10_000, 0.01)).toBe(102);
    expect(driftMs(2_000, 0)).toBe(2);
  });
});
