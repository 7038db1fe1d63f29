/**
 * `startWait`: ends on the first of an event, a deadline or an abort, once, and leaves no timer
 * or listener behind. Fake timers.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { startWait, type WaitEnd } from '../../packages/fencelock/src/core/wait.js';

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

/** The end of `wait` if it ended by now (after flushing microtasks), else 'pending'. */
async function state(ended: Promise<WaitEnd>): Promise<WaitEnd | 'pending'> {
  return Promise.race([ended, Promise.resolve().then(() => 'pending' as const)]);
}

describe('startWait', () => {
  it('ends as event on wake, clears its timer and runs onEnd once', async () => {
    const onEnd = vi.fn();
    const controller = new AbortController();
    const wait = startWait(controller.signal, 1000, onEnd);
    expect(vi.getTimerCount()).toBe(1);
    expect(wait.isDone()).toBe(false);
    wait.wake();
    wait.wake();
    controller.abort();
    expect(await wait.ended).toBe('event');
    expect(wait.isDone()).toBe(true);
    expect(onEnd).toHaveBeenCalledTimes(1);
    expect(onEnd).toHaveBeenCalledWith('event');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('ends as deadline at maxMs, not before', async () => {
    const onEnd = vi.fn();
    const wait = startWait(undefined, 500, onEnd);
    await vi.advanceTimersByTimeAsync(499);
    expect(await state(wait.ended)).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(await wait.ended).toBe('deadline');
    expect(onEnd).toHaveBeenCalledWith('deadline');
  });

  it('ends as abort when the signal aborts, and removes its timer', async () => {
    const controller = new AbortController();
    const wait = startWait(controller.signal, 10_000);
    controller.abort();
    expect(await wait.ended).toBe('abort');
    expect(vi.getTimerCount()).toBe(0);
    wait.wake();
    expect(await wait.ended).toBe('abort');
  });

  it('ends at once, during the call, on a signal aborted already', async () => {
    const onEnd = vi.fn();
    const wait = startWait(AbortSignal.abort(), 1000, onEnd);
    expect(onEnd).toHaveBeenCalledWith('abort');
    expect(wait.isDone()).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    expect(await wait.ended).toBe('abort');
  });

  it('makes no timer for an infinite wait, and counts a negative maxMs as 0', async () => {
    const forever = startWait(undefined, Number.POSITIVE_INFINITY);
    expect(vi.getTimerCount()).toBe(0);
    await vi.advanceTimersByTimeAsync(1_000_000);
    expect(await state(forever.ended)).toBe('pending');
    forever.wake();
    expect(await forever.ended).toBe('event');
    const now = startWait(undefined, -5);
    await vi.advanceTimersByTimeAsync(0);
    expect(await now.ended).toBe('deadline');
  });

  it('removes its abort listener when it ends otherwise', async () => {
    const controller = new AbortController();
    const add = vi.spyOn(controller.signal, 'addEventListener');
    const remove = vi.spyOn(controller.signal, 'removeEventListener');
    const wait = startWait(controller.signal, 100);
    await vi.advanceTimersByTimeAsync(100);
    expect(await wait.ended).toBe('deadline');
    expect(add).toHaveBeenCalledTimes(1);
    expect(remove).toHaveBeenCalledWith('abort', add.mock.calls[0]?.[1]);
  });

  it('waits at most MAX_TIMER_MS for a longer maxMs, not 1 ms (Node runs longer delays at once)', async () => {
    vi.useRealTimers();
    const wait = startWait(undefined, 2 ** 31);
    const early = await Promise.race([
      wait.ended,
      new Promise((resolve) => setTimeout(() => resolve('pending'), 50)),
    ]);
    wait.wake();
    expect(early).toBe('pending');
    expect(await wait.ended).toBe('event');
  });
});
