/**
 * The bookkeeping of owner-addressed acquires (`startOwnerRun`) and how they withdraw after
 * giving up (`ownerWithdrawal`), decided by the backend's `capabilities` alone: `abandon` where
 * grants live in the locker's session, `leaveQueue` where the engine has a line of its own,
 * nothing elsewhere, and nothing once a newer acquire of the same key and owner started.
 */
import { describe, expect, it, vi } from 'vitest';
import type {
  AttemptRequest,
  BackendCapabilities,
} from '../../packages/fencelock/src/core/backend.js';
import { ownerWithdrawal, startOwnerRun } from '../../packages/fencelock/src/core/owner-grants.js';
import { MemoryBackend } from './memory-backend.js';

const request: AttemptRequest = {
  key: 'k',
  owner: 'a'.repeat(32),
  ttlMs: 5000,
  mode: 'write',
  autoRenew: false,
};

/** A memory backend with these capabilities and spies on its withdrawal methods. */
function backendWith(capabilities: Partial<BackendCapabilities>) {
  const backend = new MemoryBackend();
  backend.capabilities = { ...backend.capabilities, ...capabilities };
  const leaveQueue = vi.fn(async (_request: AttemptRequest) => undefined);
  Object.assign(backend, { leaveQueue });
  const abandon = vi.spyOn(backend, 'abandon');
  return { backend, abandon, leaveQueue };
}

describe('startOwnerRun', () => {
  it('is the latest until another run of the same key and owner starts on the same backend', () => {
    const backend = new MemoryBackend();
    const first = startOwnerRun(backend, 'k', 'o');
    const elsewhere = startOwnerRun(new MemoryBackend(), 'k', 'o');
    const otherKey = startOwnerRun(backend, 'k2', 'o');
    expect(first.isLatest()).toBe(true);
    const second = startOwnerRun(backend, 'k', 'o');
    expect(first.isLatest()).toBe(false);
    expect(second.isLatest()).toBe(true);
    expect(elsewhere.isLatest()).toBe(true);
    expect(otherKey.isLatest()).toBe(true);
  });

  it('forgets a key and owner once every run and kept withdrawal ended', () => {
    const backend = new MemoryBackend();
    const run = startOwnerRun(backend, 'k', 'o');
    run.keep();
    run.end();
    // Still known: a newer run is numbered after it.
    expect(startOwnerRun(backend, 'k', 'o').isLatest()).toBe(true);
    expect(run.isLatest()).toBe(false);
  });
});

describe('ownerWithdrawal', () => {
  it('abandons where grants live in the locker session', async () => {
    const { backend, abandon, leaveQueue } = backendWith({ sessions: true, queue: true });
    const withdrawal = ownerWithdrawal(backend, request);
    await withdrawal.now();
    expect(abandon).toHaveBeenCalledWith(request);
    expect(leaveQueue).not.toHaveBeenCalled();
    withdrawal.end();
  });

  it('only leaves the line where the engine has one outside a session', async () => {
    const { backend, abandon, leaveQueue } = backendWith({ sessions: false, queue: true });
    const withdrawal = ownerWithdrawal(backend, request);
    await withdrawal.now();
    expect(leaveQueue).toHaveBeenCalledWith(request);
    expect(abandon).not.toHaveBeenCalled();
    withdrawal.end();
  });

  it('touches nothing on an engine with neither: the grant runs out by its TTL', async () => {
    const { backend, abandon, leaveQueue } = backendWith({ sessions: false, queue: false });
    const withdrawal = ownerWithdrawal(backend, request);
    await withdrawal.now();
    expect(abandon).not.toHaveBeenCalled();
    expect(leaveQueue).not.toHaveBeenCalled();
    withdrawal.end();
  });

  it('touches nothing once a newer acquire of the same key and owner started', async () => {
    const { backend, abandon, leaveQueue } = backendWith({ sessions: true, queue: true });
    const stale = ownerWithdrawal(backend, request);
    const newer = ownerWithdrawal(backend, request);
    await stale.now();
    expect(abandon).not.toHaveBeenCalled();
    expect(leaveQueue).not.toHaveBeenCalled();
    await newer.now();
    expect(abandon).toHaveBeenCalledTimes(1);
    stale.end();
    newer.end();
  });

  it('withdraws an answer given up on when it lands, also when it failed', async () => {
    const { backend, abandon } = backendWith({ sessions: true });
    const withdrawal = ownerWithdrawal(backend, request);
    withdrawal.end();
    let fail!: (error: Error) => void;
    const pending = new Promise((_, reject) => {
      fail = reject;
    });
    const done = withdrawal.whenAnswered(pending);
    expect(abandon).not.toHaveBeenCalled();
    fail(new Error('reply lost'));
    await done;
    expect(abandon).toHaveBeenCalledTimes(1);
  });
});
