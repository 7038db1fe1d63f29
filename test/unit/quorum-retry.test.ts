/**
 * A vote without a majority (Redlock's answer `{ granted: false, reason: 'no-quorum', error:
 * QuorumError }`) fails one attempt, not the acquire: the core retries it with backoff until the
 * caller's deadline, then rejects with the last QuorumError (its per-node outcomes say more than
 * a timeout). Real timers, an in-memory backend.
 */
import { describe, expect, it } from 'vitest';
import type { AttemptRequest, AttemptResult } from '../../packages/fencelock/src/core/backend.js';
import { createLocker, QuorumError } from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

/** Answers the first `failures` attempts as undecided, with a QuorumError. */
class NoMajorityFirst extends MemoryBackend {
  failures: number;
  constructor(failures: number) {
    super();
    this.failures = failures;
  }
  override async attempt(request: AttemptRequest): Promise<AttemptResult> {
    if (this.failures > 0) {
      this.failures -= 1;
      const error = new QuorumError(request.key, 'acquire', [
        { node: 'a:1', outcome: 'ok' },
        { node: 'b:1', outcome: 'error', error: new Error('ECONNREFUSED') },
        { node: 'c:1', outcome: 'timeout' },
      ]);
      return { granted: false, reason: 'no-quorum', error };
    }
    return super.attempt(request);
  }
}

describe('QuorumError in acquire', () => {
  it('is retried while the caller waits, and the acquire then succeeds', async () => {
    const backend = new NoMajorityFirst(3);
    const locker = createLocker(backend, { retry: { initialDelayMs: 5, maxDelayMs: 10 } });
    const lease = await locker.acquire('k', { waitMs: 5000 });
    expect(backend.failures).toBe(0);
    expect(lease.fencingToken).toBeGreaterThan(0n);
    await locker.close();
  });

  it('rejects with the last QuorumError, not a timeout, when no vote succeeds in time', async () => {
    const backend = new NoMajorityFirst(Number.POSITIVE_INFINITY);
    const locker = createLocker(backend, { retry: { initialDelayMs: 5, maxDelayMs: 10 } });
    const error = await locker.acquire('k', { waitMs: 200 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumError);
    expect((error as QuorumError).nodes.map((n) => n.outcome)).toEqual(['ok', 'error', 'timeout']);
    await locker.close();
  });

  it('tryAcquire rejects with the QuorumError at once', async () => {
    const backend = new NoMajorityFirst(1);
    const locker = createLocker(backend);
    await expect(locker.tryAcquire('k')).rejects.toBeInstanceOf(QuorumError);
    expect(backend.failures).toBe(0);
    await locker.close();
  });
});
