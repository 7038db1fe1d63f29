/**
 * The acquire loop alone, over a scripted backend that answers from a list: what it does with
 * each contract answer (granted, held, queued, undecided, too late, none), its withdrawals and its
 * counters. Fake timers.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  AcquireLoop,
  type AcquirePlan,
  type AttemptCount,
} from '../../packages/fencelock/src/core/acquire-loop.js';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  Granted,
} from '../../packages/fencelock/src/core/backend.js';
import { AcquireCancellation } from '../../packages/fencelock/src/core/cancellation.js';
import {
  BackendError,
  CHANNELS,
  createLocker,
  LockTimeoutError,
} from '../../packages/fencelock/src/index.js';
import { DEFAULTS } from '../../packages/fencelock/src/options.js';
import { MemoryBackend } from './memory-backend.js';

beforeEach(() => {
  vi.useFakeTimers();
});

afterEach(() => {
  vi.useRealTimers();
});

const request: AttemptRequest = {
  key: 'k',
  owner: 'a'.repeat(32),
  ttlMs: 10_000,
  mode: 'write',
  autoRenew: true,
};

/** A backend whose attempts answer from `answers` in turn (a function: a promise of its own). */
function scripted(answers: (AttemptResult | (() => Promise<AttemptResult>))[]): Backend {
  let i = 0;
  return {
    name: 'scripted',
    maxTtlMs: 2_147_483_647,
    capabilities: {
      modes: ['write'],
      sessions: false,
      queue: false,
      batchRenew: false,
      permits: false,
      attemptAll: false,
      list: false,
      election: false,
      lockDelay: false,
    },
    attempt: async () => {
      const next = answers[Math.min(i, answers.length - 1)];
      i += 1;
      if (next === undefined) throw new Error('no answer scripted');
      return typeof next === 'function' ? next() : next;
    },
    renew: async () => ({ ok: false, reason: 'not-held' }),
    release: async () => 'not-held',
    abandon: async () => undefined,
    inspect: async (key) => ({ key, holder: null, lastFencingToken: 0n }),
    close: async () => undefined,
  };
}

function plan(backend: Backend, attempts: AttemptCount, waitMs: number, signal?: AbortSignal) {
  const startedAt = performance.now();
  const closing = new AbortController();
  return {
    backend,
    store: 'test',
    request,
    attempts,
    startedAt,
    waitMs,
    retry: { ...DEFAULTS.retry },
    driftFactor: 0.01,
    cancellation: new AcquireCancellation(
      { signal, session: undefined },
      closing.signal,
      'k',
      startedAt,
    ),
    withdrawal: {
      now: vi.fn(async (): Promise<void> => undefined),
      whenAnswered: vi.fn(async (_pending: Promise<unknown>): Promise<void> => undefined),
      end: vi.fn((): void => undefined),
    },
    track: () => undefined,
    onClosing: () => () => undefined,
    grant: (result: Granted) => `token ${result.token}`,
    grantConfirmsHandoff: true,
  } satisfies AcquirePlan<string>;
}

/** A failed vote as a backend reports it (an engine's FencelockError, thrown as it is). */
function vote(message: string): BackendError {
  return new BackendError('scripted', 'vote', new Error(message));
}

const held: AttemptResult = { granted: false, holderTtlMs: 100 };
const granted: AttemptResult = { granted: true, token: 7n, ttlMs: 10_000 };

describe('AcquireLoop', () => {
  it('waits while the key is held, then answers with the grant', async () => {
    const p = plan(scripted([held, held, granted]), 'until-deadline', 60_000);
    const run = new AcquireLoop(p).run();
    await vi.advanceTimersByTimeAsync(2_000);
    expect(await run).toBe('token 7');
    expect(p.withdrawal.now).not.toHaveBeenCalled();
    expect(p.withdrawal.end).toHaveBeenCalledTimes(1);
  });

  it('one attempt: null when held, withdrawing a queue entry it left', async () => {
    const p = plan(scripted([{ granted: false, queued: true }]), 'one', 0);
    expect(await new AcquireLoop(p).run()).toBeNull();
    expect(p.withdrawal.now).toHaveBeenCalledTimes(1);
    const q = plan(scripted([held]), 'one', 0);
    expect(await new AcquireLoop(q).run()).toBeNull();
    expect(q.withdrawal.now).not.toHaveBeenCalled();
  });

  it('retries undecided answers until the deadline, then throws the last error', async () => {
    const errors = [vote('vote 1'), vote('vote 2')];
    let n = 0;
    const undecided = async (): Promise<AttemptResult> => ({
      granted: false,
      reason: 'no-quorum',
      error: errors[Math.min(n++, 1)] as BackendError,
    });
    const p = plan(scripted([undecided]), 'until-deadline', 300);
    const run = new AcquireLoop(p).run().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await run).toBe(errors[1]);
    expect(n).toBeGreaterThan(1);
  });

  it('one attempt answered as undecided throws its error at once', async () => {
    const error = vote('no majority');
    const p = plan(scripted([{ granted: false, reason: 'no-quorum', error }]), 'one', 0);
    await expect(new AcquireLoop(p).run()).rejects.toBe(error);
    expect(p.withdrawal.now).toHaveBeenCalledTimes(1);
  });

  it('a decided answer forgets the undecided ones: the deadline is then a timeout', async () => {
    const p = plan(
      scripted([{ granted: false, reason: 'no-quorum', error: new Error('vote') }, held]),
      'until-deadline',
      300,
    );
    const run = new AcquireLoop(p).run().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(1_000);
    const error = await run;
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).sawHolder).toBe(true);
  });

  it('withdraws a grant with no validity left and attempts again', async () => {
    const late = () =>
      new Promise<AttemptResult>((resolve) =>
        setTimeout(() => resolve({ granted: true, token: 1n, ttlMs: 100 }), 200),
      );
    const p = plan(scripted([late, granted]), 'until-deadline', 60_000);
    const run = new AcquireLoop(p).run();
    await vi.advanceTimersByTimeAsync(500);
    expect(await run).toBe('token 7');
    expect(p.withdrawal.now).toHaveBeenCalledTimes(1);
  });

  it('gives up on an answer that does not come by the deadline, and withdraws it when it lands', async () => {
    const p = plan(scripted([() => new Promise<AttemptResult>(() => {})]), 'until-deadline', 250);
    const run = new AcquireLoop(p).run().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(250);
    const error = await run;
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).engineAnswered).toBe(false);
    expect(p.withdrawal.whenAnswered).toHaveBeenCalledTimes(1);
  });

  it('stops on the caller abort with a LockTimeoutError carrying its reason', async () => {
    const controller = new AbortController();
    const p = plan(scripted([held]), 'until-deadline', 60_000, controller.signal);
    const run = new AcquireLoop(p).run().catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(10);
    const reason = new Error('user gave up');
    controller.abort(reason);
    await vi.advanceTimersByTimeAsync(1_000);
    const error = await run;
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect((error as LockTimeoutError).cause).toBe(reason);
    expect(p.withdrawal.now).toHaveBeenCalledTimes(1);
  });
});

describe('the acquire event', () => {
  it('counts an attempt the engine failed (attempts: 1 on the error event)', async () => {
    const seen: Record<string, unknown>[] = [];
    const listener = (message: unknown) => seen.push(message as Record<string, unknown>);
    diagnostics_channel.subscribe(CHANNELS.acquire, listener);
    try {
      const backend = new MemoryBackend();
      backend.attemptMode = 'apply-then-fail'; // the engine grants, the reply is lost
      const locker = createLocker(backend);
      await expect(locker.acquire('k', { waitMs: 1000 })).rejects.toThrow(/reply lost/);
      await locker.close();
      expect(backend.calls.attempt).toBe(1);
      expect(seen).toEqual([expect.objectContaining({ outcome: 'error', attempts: 1 })]);
    } finally {
      diagnostics_channel.unsubscribe(CHANNELS.acquire, listener);
    }
  });
});
