/** Drift math beside the monotonic clock (`core/clock.ts`). */
import { describe, expect, it } from 'vitest';
import { assertLongerThanDrift, driftMs } from '../../packages/fencelock/src/core/clock.js';
import { InvalidArgumentError } from '../../packages/fencelock/src/index.js';

describe('driftMs', () => {
  it('is ttlMs × driftFactor + 2 ms (Redlock)', () => {
    expect(driftMs(10_000, 0.01)).toBe(102);
    expect(driftMs(2_000, 0)).toBe(2);
  });
});

describe('assertLongerThanDrift', () => {
  it('rejects a TTL no longer than its drift allowance, naming the argument', () => {
    expect(() => assertLongerThanDrift(3, 0.01)).not.toThrow();
    expect(() => assertLongerThanDrift(2, 0.01)).toThrow(InvalidArgumentError);
    expect(() => assertLongerThanDrift(4, 0.5, 'maxHoldMs')).toThrow(/maxHoldMs/);
    expect(() => assertLongerThanDrift(5, 0.5, 'maxHoldMs')).not.toThrow();
  });
});
