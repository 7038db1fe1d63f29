/**
 * Fair waiting on Redis: a release that names a waiter while its first attempt is still in
 * flight (this process already listening on the key's channel) is kept for the wait that
 * follows. Before, the owner was only known as queued from its first wait on, the message was
 * dropped, and the head of the line slept its 0.5 s poll while the key stood free.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { queuedAcquireScript } from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';

const prefix = `fencelock-it-queue-${randomBytes(4).toString('hex')}`;
const admin = new Redis(REDIS_URL);
afterAll(async () => {
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

it("a release right after a waiter's first attempt wakes it (channel already subscribed here)", async () => {
  const key = `first-${randomBytes(4).toString('hex')}`;
  const other = createLocker(createRedisBackend({ url: REDIS_URL, prefix }));
  const client = new Redis(REDIS_URL);
  const mine = createLocker(createRedisBackend({ client, prefix }));
  try {
    // Warm up: a wait on this key in this process, so its channel is subscribed (and lingers 5 s).
    let held = await other.acquire(key, { ttlMs: 10_000 });
    const warm = mine.acquire(key, { waitMs: 5_000 });
    await delay(100);
    await held.release();
    await (await warm).release();

    held = await other.acquire(key, { ttlMs: 10_000 });
    // The reply of the next acquire script reaches this process 100 ms after Redis ran it
    // (network asymmetry, a busy event loop); the pub/sub connection is not slowed.
    const evalsha = client.evalsha.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { evalsha: unknown }).evalsha = (...a: unknown[]) => {
      const p = evalsha(...a);
      return a[0] === queuedAcquireScript.sha1
        ? p.then(async (v) => {
            await delay(100);
            return v;
          })
        : p;
    };
    let grantedAt = 0;
    const waiting = mine.acquire(key, { waitMs: 10_000 }).then((l) => {
      grantedAt = performance.now();
      return l;
    });
    await delay(30); // the script has run: this waiter is the head of the line
    expect(await admin.lindex(`${prefix}:{${key}}:queue`, 0)).not.toBeNull();
    const releasedAt = performance.now();
    await held.release(); // publishes the head's owner id
    const lease = await waiting;
    const took = grantedAt - releasedAt;
    await lease.release();
    expect(took).toBeLessThan(250);
  } finally {
    await mine.close();
    await other.close();
    client.disconnect();
  }
});
