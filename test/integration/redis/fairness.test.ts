/**
 * Fair waiting on single-node Redis: waiters are granted in arrival order (a FIFO line kept in
 * the acquire script), a releaser that asks again at once goes to the back of the line, a single
 * attempt never joins the line, and a waiter that gives up blocks the others only briefly (the
 * cases of `helpers/fair-line.ts`); one that vanished, for its entry's life at most; a waiter
 * polls without spinning where its subscription is refused. Also the queued scripts run directly.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/redis/backend.js';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import { readWriteLockKeys } from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import {
  queuedAbandonScript,
  queuedAcquireScript,
  queuedReleaseScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import {
  createLocker,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { countingAttempts, fairLineCases } from '../../helpers/fair-line.js';

const prefix = `fencelock-fair-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
let admin: Redis;
const lockers: Locker[] = [];
const backends: RedisBackend[] = [];

/** A locker on its own connections (as a separate process would have). */
function newLocker(): { locker: Locker; backend: RedisBackend } {
  const backend = createRedisBackend({ url: REDIS_URL, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  backends.push(backend);
  return { locker, backend };
}

/**
 * The attempts an acquire of `key` by a locker on `client` makes while another locker holds it
 * for 200 ms, then releases. The locker is closed and `client` disconnected after.
 */
async function attemptsOfWaiterOn(client: Redis, key: string): Promise<number | undefined> {
  const waiter = createLocker(createRedisBackend({ client, prefix }));
  let made: number | undefined;
  try {
    await countingAttempts(key, async (attempts) => {
      const held = await newLocker().locker.acquire(key);
      const waiting = waiter.acquire(key, { waitMs: 10_000 });
      await delay(200);
      await held.release();
      const lease = await waiting;
      made = attempts.get(lease.owner);
      await lease.release();
    });
  } finally {
    await waiter.close();
    client.disconnect();
  }
  return made;
}

beforeAll(() => {
  admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

describe('fair waiting (Redis, single node)', () => {
  fairLineCases({
    newLocker: () => newLocker().locker,
    lineLengths: async (key) => [await admin.llen(backends[0]!.keysOf(key).queue)],
    nodes: 1,
    holderKeepsEntry: false,
    // Its first attempt, one when the subscription is first confirmed; a release message hands
    // it the grant.
    maxAttempts: 2,
    entryTtlMs: QUEUE_ENTRY_TTL_MS,
    unique,
  });

  it("waits on release messages over a user's client that queues nothing offline", async () => {
    // The subscriber is duplicated from this client: it must send its SUBSCRIBE once connected,
    // or no release message arrives and the waiter attempts again and again.
    const client = new Redis(REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0 });
    await new Promise((resolve) => client.once('ready', resolve));
    // Its first attempt, one when the subscription is confirmed, none while the holder held
    // (before, 668).
    expect(await attemptsOfWaiterOn(client, unique('offline-queue'))).toBeLessThanOrEqual(2);
  });

  it('polls, without spinning, where the server refuses SUBSCRIBE (an ACL without it)', async () => {
    const user = unique('fencelock-no-subscribe');
    await admin.call('ACL', 'SETUSER', user, 'on', 'nopass', '~*', '&*', '+@all', '-subscribe');
    const client = new Redis(REDIS_URL, { username: user, password: 'unused' });
    try {
      // No release message can arrive: the waiter attempts again after LINE_RECHECK_MS (before,
      // the refused subscription ended every wait at once: 729 attempts).
      expect(await attemptsOfWaiterOn(client, unique('acl'))).toBe(2);
    } finally {
      await admin.call('ACL', 'DELUSER', user);
    }
  });

  it('a waiter that vanished blocks the line for about QUEUE_ENTRY_TTL_MS at most', async () => {
    const key = unique('vanished');
    const { locker: a, backend } = newLocker();
    const next = newLocker().locker;
    const k = backend.keysOf(key);
    const held = await a.acquire(key);
    // A waiter of a process that died: it queued once and never comes back.
    const ghost = randomBytes(16).toString('hex');
    const reply = await queuedAcquireScript.run(
      admin,
      [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
      [ghost, 30_000, QUEUE_ENTRY_TTL_MS, 35_000],
    );
    expect(reply[0]).toBe(0);
    const waiting = next.acquire(key, { waitMs: 10_000 });
    await delay(50);
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    const waited = performance.now() - releasedAt;
    expect(waited).toBeLessThan(QUEUE_ENTRY_TTL_MS + 1_500);
    expect(await admin.lrange(k.queue, 0, -1)).toEqual([]);
    await lease.release();
  });
});

describe('queued scripts, run directly', () => {
  const keys = () => readWriteLockKeys(prefix, `direct-${randomBytes(4).toString('hex')}`);
  const owner = () => randomBytes(16).toString('hex');
  /** The token of a granting reply (fails on a refusal). */
  const tokenOf = (reply: [1, string] | [0, number]): bigint => {
    expect(reply[0]).toBe(1);
    return BigInt(reply[1]);
  };

  it('queues waiters, grants the head only, and hands the key to the head on release', async () => {
    const k = keys();
    const acquireKeys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
    const handOffKeys = [
      k.lock,
      k.fence,
      k.channel,
      k.queue,
      k.waiters,
      k.readers,
      k.readerTokens,
    ] as const;
    const [a, b, c] = [owner(), owner(), owner()];
    const first = tokenOf(
      await queuedAcquireScript.run(admin, acquireKeys, [a, 10_000, 2_000, 15_000]),
    );
    const busy = await queuedAcquireScript.run(admin, acquireKeys, [b, 10_000, 2_000, 15_000]);
    expect(busy[0]).toBe(0);
    expect(busy[1]).toBeGreaterThan(9_000);
    await queuedAcquireScript.run(admin, acquireKeys, [c, 1_500, 2_000, 15_000]);
    // Attempting again keeps one's place.
    await queuedAcquireScript.run(admin, acquireKeys, [b, 10_000, 2_000, 15_000]);
    expect(await admin.lrange(k.queue, 0, -1)).toEqual([b, c]);
    expect(await admin.pttl(k.queue)).toBeLessThanOrEqual(2_000);
    // Each entry keeps the TTL its owner asked for.
    expect(await admin.hget(k.waiters, `${c}:ttl`)).toBe('1500');

    const subscriber = admin.duplicate();
    const messages: string[] = [];
    subscriber.on('message', (_channel: string, message: string) => messages.push(message));
    await subscriber.subscribe(k.channel);
    try {
      expect(
        await queuedReleaseScript.run(admin, handOffKeys, [a, String(first), 2_000, 5_000]),
      ).toBe(1);
      // Handed to b, the head: granted for the short first TTL (min(10 s, 2 s)) with a new token.
      const [value, pttl] = [await admin.get(k.lock), await admin.pttl(k.lock)];
      const second = BigInt(value?.split(':')[1] ?? '0');
      expect(value).toBe(`${b}:${second}`);
      expect(second).toBeGreaterThan(first);
      expect(pttl).toBeGreaterThan(1_500);
      expect(pttl).toBeLessThanOrEqual(2_000);
      expect(await admin.get(k.fence)).toBe(String(second));
      expect(await admin.pttl(k.fence)).toBeGreaterThan(14_000);
      expect(await admin.lrange(k.queue, 0, -1)).toEqual([c]);
      // c is not first; a single attempt (waiterTtlMs 0) does not get it either.
      const notYet = await queuedAcquireScript.run(admin, acquireKeys, [c, 1_500, 2_000, 15_000]);
      expect(notYet[0]).toBe(0);
      expect(notYet[1]).toBeGreaterThan(0);
      expect(notYet[1]).toBeLessThanOrEqual(2_000);
      expect(
        (await queuedAcquireScript.run(admin, acquireKeys, [owner(), 10_000, 0, 15_000]))[0],
      ).toBe(0);
      // b asks again (as after a lost message): its handed grant, at its full TTL.
      expect(
        tokenOf(await queuedAcquireScript.run(admin, acquireKeys, [b, 10_000, 2_000, 15_000])),
      ).toBe(second);
      expect(await admin.pttl(k.lock)).toBeGreaterThan(9_000);
      // b gives up while holding: the key is freed and handed to c, now the head.
      expect(await queuedAbandonScript.run(admin, handOffKeys, [b, '0', 2_000, 5_000])).toBe(1);
      for (let i = 0; i < 40 && messages.length < 2; i++) await delay(10);
      const third = BigInt((await admin.get(k.lock))?.split(':')[1] ?? '0');
      expect(third).toBeGreaterThan(second);
      // c asked for less than the cap: its first TTL is its own.
      expect(messages).toEqual([`${b}:${second}:2000`, `${c}:${third}:1500`]);
      expect(await admin.pttl(k.lock)).toBeLessThanOrEqual(1_500);
      expect(await admin.exists(k.queue, k.waiters)).toBe(0);
    } finally {
      await subscriber.quit();
    }
  });

  it('drops an expired head and grants the next in line (Redis clock only)', async () => {
    const k = keys();
    const acquireKeys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
    const [holder, ghost, live] = [owner(), owner(), owner()];
    const held = tokenOf(
      await queuedAcquireScript.run(admin, acquireKeys, [holder, 10_000, 2_000, 15_000]),
    );
    await queuedAcquireScript.run(admin, acquireKeys, [ghost, 10_000, 50, 15_000]);
    await queuedAcquireScript.run(admin, acquireKeys, [live, 10_000, 5_000, 15_000]);
    await admin.del(k.lock);
    await delay(80);
    const next = tokenOf(
      await queuedAcquireScript.run(admin, acquireKeys, [live, 10_000, 5_000, 15_000]),
    );
    expect(next).toBeGreaterThan(held);
    expect(await admin.hexists(k.waiters, ghost)).toBe(0);
  });
});

describe('owner-addressed waiting (the sidecar)', () => {
  it('a caller-chosen owner that times out leaves the line, and its grant rules are unchanged', async () => {
    const key = unique('owner');
    const { locker: a, backend } = newLocker();
    const sidecar = newLocker().locker;
    const held = await a.acquire(key);
    const owner = randomBytes(16).toString('hex');
    const error = await sidecar.acquireForOwner(key, owner, { ttlMs: 10_000, waitMs: 150 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockTimeoutError);
    // Without leaving the line, its entry would stay QUEUE_ENTRY_TTL_MS and block the others.
    let queued = await admin.llen(backend.keysOf(key).queue);
    for (let i = 0; i < 20 && queued > 0; i++) {
      await delay(25);
      queued = await admin.llen(backend.keysOf(key).queue);
    }
    expect(queued).toBe(0);
    expect((await a.inspect(key)).holder?.owner).toBe(held.owner);
    await held.release();
  });
});
