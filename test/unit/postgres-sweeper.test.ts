/**
 * The PostgreSQL backends' sweep schedule (packages/fencelock/src/backends/postgres/sweeper.ts):
 * a sweep at `start()`, then one per interval; a full batch is followed at once by another; one
 * sweep at a time; a failed statement waits for the next interval; `stop()` ends the timer and
 * waits for the statement under way. The statement is a counter here: its SQL is tested on the
 * real server (test/integration/postgres/lease-table.test.ts, test/integration/idle/).
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Sweeper } from '../../packages/fencelock/src/backends/postgres/sweeper.js';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Sweeper', () => {
  it('sweeps at start, then once per interval; a second start changes nothing', async () => {
    let runs = 0;
    const sweeper = new Sweeper(async () => {
      runs += 1;
      return false;
    }, 60_000);
    expect(runs).toBe(0);
    sweeper.start();
    sweeper.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(runs).toBe(1);
    await vi.advanceTimersByTimeAsync(59_999);
    expect(runs).toBe(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(runs).toBe(2);
    await vi.advanceTimersByTimeAsync(120_000);
    expect(runs).toBe(4);
    await sweeper.stop();
    await vi.advanceTimersByTimeAsync(600_000);
    expect(runs).toBe(4);
  });

  it('repeats the statement while it reports a full batch, within one sweep', async () => {
    const left = [true, true, false];
    let runs = 0;
    const sweeper = new Sweeper(async () => {
      runs += 1;
      return left.shift() ?? false;
    }, 60_000);
    sweeper.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(runs).toBe(3);
    await sweeper.stop();
  });

  it('runs one sweep at a time: an interval that falls during a slow sweep is skipped', async () => {
    let runs = 0;
    let finish: (() => void) | undefined;
    const sweeper = new Sweeper(() => {
      runs += 1;
      return new Promise<boolean>((resolve) => {
        finish = () => resolve(false);
      });
    }, 1_000);
    sweeper.start();
    await vi.advanceTimersByTimeAsync(3_500);
    expect(runs).toBe(1);
    finish!();
    await vi.advanceTimersByTimeAsync(500);
    expect(runs).toBe(2);
    finish!();
    await sweeper.stop();
  });

  it('a failed statement is dropped and the next interval tries again', async () => {
    let runs = 0;
    const sweeper = new Sweeper(async () => {
      runs += 1;
      if (runs === 1) throw new Error('server gone');
      return false;
    }, 1_000);
    sweeper.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(runs).toBe(1);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(runs).toBe(2);
    await sweeper.stop();
  });

  it('stop() waits for the statement under way and starts no other', async () => {
    let runs = 0;
    let finish: (() => void) | undefined;
    const sweeper = new Sweeper(() => {
      runs += 1;
      return new Promise<boolean>((resolve) => {
        finish = () => resolve(true);
      });
    }, 1_000);
    sweeper.start();
    await vi.advanceTimersByTimeAsync(0);
    let stopped = false;
    const stopping = sweeper.stop().then(() => {
      stopped = true;
    });
    await vi.advanceTimersByTimeAsync(0);
    expect(stopped).toBe(false);
    // A full batch would go on, but the sweeper is stopping.
    finish!();
    await stopping;
    expect(stopped).toBe(true);
    expect(runs).toBe(1);
    sweeper.start();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(runs).toBe(1);
  });
});
