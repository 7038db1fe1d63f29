/**
 * A grant that lands after its caller went away (a gRPC deadline or cancel, an HTTP client that
 * hung up), on a real SQLite store: with an owner name the sidecar made up, nobody could ever
 * release it, so the sidecar releases it at once; a named owner's grant stays for its TTL (the
 * caller may be retrying under that name, and the retry would be this very grant).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  acquire,
  type LockOperationsContext,
} from '../../../packages/cli/src/server/lock-operations.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';

const locker = createLocker(
  `sqlite:${join(mkdtempSync(join(tmpdir(), 'fencelock-late-')), 'locks.db')}`,
);
afterAll(() => locker.close());

/**
 * The locker, except that `gone` is aborted just as the engine's grant comes back: the caller
 * leaves at the worst moment, after the grant and before its answer.
 */
function leavingAtGrant(gone: AbortController): Locker {
  return new Proxy(locker, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (property !== 'tryAcquireForOwner' && property !== 'acquireForOwner') {
        return typeof value === 'function' ? value.bind(target) : value;
      }
      return async (...args: unknown[]) => {
        const grant = await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        gone.abort();
        return grant;
      };
    },
  });
}

function context(lockerUsed: Locker): LockOperationsContext {
  return {
    locker: lockerUsed,
    storeName: 'lockstore',
    maxWaitMs: 60_000,
    shutdown: new AbortController().signal,
    allowed: () => 'any',
  };
}

describe('a grant whose caller went away', () => {
  it.each([0, 1_000])(
    'is released when the sidecar made up the owner (waitMs %i)',
    async (waitMs) => {
      const key = `late-${waitMs}-${Math.random().toString(36).slice(2)}`;
      const gone = new AbortController();
      await expect(
        acquire(context(leavingAtGrant(gone)), { key, ttlMs: 60_000, waitMs, signal: gone.signal }),
      ).rejects.toMatchObject({ body: { errorCode: 'ERR_LOCK_TIMEOUT' } });
      expect((await locker.inspect(key)).holder).toBeNull();
    },
  );

  it('stays for its TTL when the caller named the owner (a retry under that name is this grant)', async () => {
    const key = `late-named-${Math.random().toString(36).slice(2)}`;
    const gone = new AbortController();
    const answer = await acquire(context(leavingAtGrant(gone)), {
      key,
      owner: 'A',
      ttlMs: 60_000,
      signal: gone.signal,
    });
    expect((await locker.inspect(key)).holder?.fencingToken).toBe(BigInt(answer.fencingToken));
  });
});
