import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CommandDeadlines } from '../../packages/fencelock/src/backends/redis/command-deadlines.js';

/** A command's answer the test settles by hand. */
function pendingAnswer<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** The outcome of `promise` once it settled, or 'pending'. */
function outcomeOf<T>(promise: Promise<T>) {
  const state: { value: T | 'pending' | Error } = { value: 'pending' };
  promise.then(
    (value) => {
      state.value = value;
    },
    (error: Error) => {
      state.value = error;
    },
  );
  return state;
}

describe('CommandDeadlines', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('fails a command with no answer once its timeout passed, and only then', async () => {
    const deadlines = new CommandDeadlines(1000);
    const silent = pendingAnswer<string>();
    const outcome = outcomeOf(deadlines.bound(silent.promise, (e) => e));
    await vi.advanceTimersByTimeAsync(999);
    expect(outcome.value).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(outcome.value).toBeInstanceOf(Error);
    expect((outcome.value as Error).message).toBe('Command timed out');
    // The late answer changes nothing.
    silent.resolve('late');
    await vi.advanceTimersByTimeAsync(0);
    expect((outcome.value as Error).message).toBe('Command timed out');
  });

  it('passes answers through and maps errors, the timeout error too', async () => {
    const deadlines = new CommandDeadlines(1000);
    const mapError = (error: unknown) => new Error(`wrapped: ${(error as Error).message}`);
    const answered = pendingAnswer<number>();
    const failed = pendingAnswer<number>();
    const silent = pendingAnswer<number>();
    const a = outcomeOf(deadlines.bound(answered.promise, mapError));
    const b = outcomeOf(deadlines.bound(failed.promise, mapError));
    const c = outcomeOf(deadlines.bound(silent.promise, mapError));
    answered.resolve(7);
    failed.reject(new Error('NOSCRIPT'));
    await vi.advanceTimersByTimeAsync(0);
    expect(a.value).toBe(7);
    expect((b.value as Error).message).toBe('wrapped: NOSCRIPT');
    await vi.advanceTimersByTimeAsync(1000);
    expect((c.value as Error).message).toBe('wrapped: Command timed out');
  });

  it('gives every command its whole timeout behind one timer, whatever came before', async () => {
    const deadlines = new CommandDeadlines(1000);
    const first = pendingAnswer<string>();
    const a = outcomeOf(deadlines.bound(first.promise, (e) => e));
    await vi.advanceTimersByTimeAsync(600);
    const second = pendingAnswer<string>();
    const b = outcomeOf(deadlines.bound(second.promise, (e) => e));
    expect(vi.getTimerCount()).toBe(1);
    await vi.advanceTimersByTimeAsync(400);
    expect((a.value as Error).message).toBe('Command timed out');
    expect(b.value).toBe('pending');
    await vi.advanceTimersByTimeAsync(599);
    expect(b.value).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect((b.value as Error).message).toBe('Command timed out');
    // Nothing left in flight: no timer is re-armed.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('keeps commands answered out of order apart (only the overdue one fails)', async () => {
    const deadlines = new CommandDeadlines(1000);
    const answers = Array.from({ length: 3 }, () => pendingAnswer<number>());
    const outcomes = answers.map((answer) => outcomeOf(deadlines.bound(answer.promise, (e) => e)));
    answers[1]!.resolve(1);
    await vi.advanceTimersByTimeAsync(500);
    answers[2]!.resolve(2);
    await vi.advanceTimersByTimeAsync(500);
    expect(outcomes.map((o) => (o.value instanceof Error ? o.value.message : o.value))).toEqual([
      'Command timed out',
      1,
      2,
    ]);
  });

  it('clears its timer on clear() (the connection closed)', async () => {
    const deadlines = new CommandDeadlines(1000);
    const silent = pendingAnswer<string>();
    const outcome = outcomeOf(deadlines.bound(silent.promise, (e) => e));
    expect(vi.getTimerCount()).toBe(1);
    deadlines.clear();
    expect(vi.getTimerCount()).toBe(0);
    // The client's own close fails what was in flight; the deadline no longer does.
    silent.reject(new Error('Connection is closed.'));
    await vi.advanceTimersByTimeAsync(2000);
    expect((outcome.value as Error).message).toBe('Connection is closed.');
  });
});
