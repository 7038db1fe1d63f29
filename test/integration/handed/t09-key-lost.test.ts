/**
 * Scenario T09 step 1–2 (Redis): the engine loses the lock key (a failover that lost the write,
 * simulated by deleting it). B acquires; A must find out: its signal aborts no later than its
 * next renewal + 1000 ms, its fenced write is rejected by the resource guard, and its release
 * answers `not-owner` without touching B's key. (Step 3, Redlock, is in
 * test/integration/redlock/quorum.test.ts; a real Sentinel failover in
 * test/integration/redis/failover.test.ts.)
 */
import { Redis } from 'ioredis';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { RedisFence } from '../../../packages/fencelock/src/fencing/index.js';
import { LockLostError, StaleTokenError } from '../../../packages/fencelock/src/index.js';
import { REDIS_PORT } from '../../helpers/engines.js';
import { redisHarness, uniqueKey } from './stores.js';

let store: ReturnType<typeof redisHarness>;
beforeEach(() => {
  store = redisHarness();
});
afterEach(async () => {
  await store.close();
});

describe('T09 lock key lost by the engine (redis)', () => {
  it('the old holder learns it at its next renewal, its fenced write is rejected, its release is not-owner', async () => {
    const k = uniqueKey('t09');
    const fenceClient = new Redis(REDIS_PORT, '127.0.0.1');
    const fence = new RedisFence(fenceClient, `fencelock-it-t09:${k}`);
    try {
      const a = store.locker({ ttlMs: 1500 });
      const b = store.locker({ ttlMs: 1500 });
      const leaseA = await a.acquire(k);
      await fence.write('resource', leaseA.fencingToken, 'A before the loss');
      const deletedAt = performance.now();
      await store.deleteLease(k);
      const leaseB = await b.acquire(k, { waitMs: 0 });
      expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);
      await fence.write('resource', leaseB.fencingToken, 'B');

      await new Promise<void>((resolve) => {
        if (leaseA.signal.aborted) resolve();
        else leaseA.signal.addEventListener('abort', () => resolve(), { once: true });
      });
      // The watchdog renews every ttlMs / 3 = 500 ms: the loss is known by then + 1000 ms.
      expect(performance.now() - deletedAt).toBeLessThan(500 + 1000);
      expect(leaseA.signal.reason).toBeInstanceOf(LockLostError);
      expect((leaseA.signal.reason as LockLostError).reason).toBe('not-owner');

      const stale = await fence.write('resource', leaseA.fencingToken, 'A late').catch((e) => e);
      expect(stale).toBeInstanceOf(StaleTokenError);
      expect(await leaseA.release()).toBe('not-owner');
      expect((await store.rawLease(k))?.owner).toBe(leaseB.owner);
      expect(await leaseB.release()).toBe('released');
    } finally {
      const keys = await fenceClient.keys(`fencelock-it-t09:${k}:*`);
      if (keys.length > 0) await fenceClient.del(...keys);
      fenceClient.disconnect();
    }
  });
});
