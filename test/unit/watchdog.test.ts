import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Watchdog } from '../../packages/fencelock/src/core/watchdog.js';

describe('Watchdog', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('runs many tasks in due order behind a single timer', () => {
    const watchdog = new Watchdog();
    const ran: number[] = [];
    const base = performance.now();
    const order = Array.from({ length: 1000 }, (_, i) => (i * 7919) % 1000);
    for (const n of order) watchdog.schedule({ run: () => ran.push(n) }, base + 10 + n);
    expect(vi.getTimerCount()).toBe(1);
    expect(watchdog.size).toBe(1000);
    vi.advanceTimersByTime(500);
    expect(ran).toEqual(Array.from({ length: 491 }, (_, i) => i));
    vi.advanceTimersByTime(600);
    expect(ran).toHaveLength(1000);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('replaces a task schedule and forgets cancelled tasks', () => {
    const watchdog = new Watchdog();
    const task = { run: vi.fn() };
    const other = { run: vi.fn() };
    const now = performance.now();
    watchdog.schedule(task, now + 100);
    watchdog.schedule(task, now + 300);
    watchdog.schedule(other, now + 200);
    vi.advanceTimersByTime(150);
    expect(task.run).not.toHaveBeenCalled();
    watchdog.cancel(other);
    vi.advanceTimersByTime(100);
    expect(other.run).not.toHaveBeenCalled();
    vi.advanceTimersByTime(100);
    expect(task.run).toHaveBeenCalledTimes(1);
    expect(watchdog.size).toBe(0);
  });

  it('keeps due order when a flow of cancelled tasks compacts its heap', () => {
    const watchdog = new Watchdog();
    const ran: number[] = [];
    const base = performance.now();
    const kept = Array.from({ length: 10 }, (_, i) => ({ run: () => ran.push(i) }));
    for (const [i, task] of kept.entries()) watchdog.schedule(task, base + 1000 - i * 10);
    // Short leases: each scheduled far out and cancelled at once (the heap compacts many times).
    for (let i = 0; i < 5000; i++) {
      const task = { run: () => ran.push(-1) };
      watchdog.schedule(task, base + 500 + (i % 300));
      watchdog.cancel(task);
    }
    expect(watchdog.size).toBe(10);
    vi.advanceTimersByTime(2000);
    expect(ran).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
  });

  it('lets a running task reschedule itself and stops cleanly', () => {
    const watchdog = new Watchdog();
    let runs = 0;
    const task = {
      run: () => {
        runs += 1;
        watchdog.schedule(task, performance.now() + 100);
      },
    };
    watchdog.schedule(task, performance.now() + 100);
    vi.advanceTimersByTime(1000);
    expect(runs).toBe(10);
    watchdog.stop();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(1000);
    expect(runs).toBe(10);
  });

  it('runs tasks whose slack window has opened together with the one that is due', () => {
    const watchdog = new Watchdog();
    const ran: string[] = [];
    const base = performance.now();
    // Due at 100, 130, 160 and 300, each with 50 ms of slack: when the first fires at 100,
    // the one due at 130 may go too (its window opened at 80), 160 may not (opens at 110).
    watchdog.schedule({ run: () => ran.push('a') }, base + 100, 50);
    watchdog.schedule({ run: () => ran.push('b') }, base + 130, 50);
    watchdog.schedule({ run: () => ran.push('c') }, base + 160, 50);
    watchdog.schedule({ run: () => ran.push('d') }, base + 300, 50);
    vi.advanceTimersByTime(99);
    expect(ran).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(ran).toEqual(['a', 'b']);
    vi.advanceTimersByTime(60);
    expect(ran).toEqual(['a', 'b', 'c']);
    // Without slack a task never runs early.
    watchdog.schedule({ run: () => ran.push('e') }, base + 170);
    vi.advanceTimersByTime(9);
    expect(ran).toEqual(['a', 'b', 'c']);
    vi.advanceTimersByTime(1);
    expect(ran).toEqual(['a', 'b', 'c', 'e']);
    vi.advanceTimersByTime(200);
    expect(ran).toEqual(['a', 'b', 'c', 'e', 'd']);
  });
});
