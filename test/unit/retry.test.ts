import { describe, expect, it } from 'vitest';
import { backoffDelayMs, sleep } from '../../packages/fencelock/src/core/retry.js';

const retry = { initialDelayMs: 20, maxDelayMs: 500, factor: 2 };

describe('backoffDelayMs (full jitter)', () => {
  it('stays within [0, min(max, initial × factor^n)]', () => {
    expect(backoffDelayMs(0, retry, () => 0)).toBe(0);
    expect(backoffDelayMs(0, retry, () => 0.999999)).toBeCloseTo(20, 3);
    expect(backoffDelayMs(3, retry, () => 0.999999)).toBeCloseTo(160, 3);
    expect(backoffDelayMs(10, retry, () => 0.999999)).toBeCloseTo(500, 3);
    expect(backoffDelayMs(1000, retry, () => 0.5)).toBe(250);
  });

  it('spreads 1,000 waiters so that no 10 ms window holds more than a quarter of them', () => {
    const delays = Array.from({ length: 1000 }, () => backoffDelayMs(5, retry));
    expect(Math.min(...delays)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...delays)).toBeLessThanOrEqual(500);
    const buckets = new Map<number, number>();
    for (const d of delays)
      buckets.set(Math.floor(d / 10), (buckets.get(Math.floor(d / 10)) ?? 0) + 1);
    expect(Math.max(...buckets.values())).toBeLessThan(250);
    // Uniform on [0, 500): the mean is near 250.
    const mean = delays.reduce((a, b) => a + b, 0) / delays.length;
    expect(mean).toBeGreaterThan(200);
    expect(mean).toBeLessThan(300);
  });
});

describe('sleep', () => {
  it('resolves early when the signal aborts and leaves no timer behind', async () => {
    const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const before = timers();
    const controller = new AbortController();
    const started = performance.now();
    const pending = sleep(10_000, controller.signal);
    controller.abort();
    await pending;
    expect(performance.now() - started).toBeLessThan(1000);
    expect(timers()).toBe(before);
  });

  it('resolves at once for an already aborted signal', async () => {
    const started = performance.now();
    await sleep(10_000, AbortSignal.abort());
    expect(performance.now() - started).toBeLessThan(1000);
  });
});
