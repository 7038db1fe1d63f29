/**
 * Lock-delay on the Redis backend (single node), what the contract cannot see: the layout of the
 * delay's key (`<prefix>:{<key>}:delay` holding D with PX = the grant's TTL + D, moved by single
 * and batched renewals, deleted by a live release or abandon, gone by itself D after a grant that
 * ran out), the election's own delay key, that no hand-over (an abandon of the head, a reader's
 * release) jumps a delay, that the line keeps its order through a delay, that a handed grant
 * records its waiter's delay, that readers wait for it too, and `attemptAll`'s per-key delays;
 * and that the Sentinel path (tokens led by the failover epoch) carries the delay as well.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import { electionKeys } from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import type { AttemptRequest, Granted } from '../../../packages/fencelock/src/core/backend.js';
import { newOwnerId } from '../../../packages/fencelock/src/core/lock.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL, SENTINEL_URL } from '../../helpers/engines.js';

const prefix = `fencelock-delay-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
/** The lock-delay of every case, ms. */
const DELAY_MS = 1_500;
let admin: Redis;
let backend: RedisBackend;
const lockers: Locker[] = [];

/** A locker on its own backend and connection, as another process would have. */
function newLocker(): { locker: Locker; backend: RedisBackend } {
  const own = createRedisBackend({ url: REDIS_URL, prefix });
  const locker = createLocker(own);
  lockers.push(locker);
  return { locker, backend: own };
}

/** A writer's single attempt with the lock-delay of the cases. */
function request(key: string, ttlMs: number, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  return {
    key,
    owner: newOwnerId(),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    lockDelayMs: DELAY_MS,
    ...extra,
  };
}

/** An attempt as `request` makes it, without a lock-delay of its own. */
function plain(key: string, ttlMs: number, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  const { lockDelayMs: _, ...rest } = request(key, ttlMs, extra);
  return rest;
}

async function granted(r: AttemptRequest): Promise<Granted> {
  const result = await backend.attempt(r);
  expect(result.granted).toBe(true);
  return result as Granted;
}

/** Wait until `probe` is true (polled every 10 ms), failing after 5 s. */
async function until(probe: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await probe()) return;
    await delay(10);
  }
  throw new Error(`never: ${what}`);
}

beforeAll(() => {
  admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  backend = createRedisBackend({ url: REDIS_URL, prefix });
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  await backend.close();
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

describe('lock-delay (Redis)', () => {
  it('keeps D in one key beside the lock with PX = TTL + D, moved by renewals, gone D after the TTL', async () => {
    const key = unique('layout');
    const k = backend.keysOf(key);
    expect(k.delay).toBe(`${prefix}:{${key}}:delay`);
    const r = request(key, 400);
    const grant = await granted(r);
    expect(await admin.get(k.delay)).toBe(String(DELAY_MS));
    const [lockLeft, delayLeft] = await Promise.all([admin.pttl(k.lock), admin.pttl(k.delay)]);
    // One script set both on one clock: the delay key outlives the lock key by D.
    expect(delayLeft - lockLeft).toBeGreaterThanOrEqual(DELAY_MS - 5);
    expect(delayLeft - lockLeft).toBeLessThanOrEqual(DELAY_MS + 5);

    // A renewal (one lease: renew.lua) moves both ends.
    const lease = { key, owner: r.owner, fencingToken: grant.token };
    expect(await backend.renew(lease, 5_000)).toMatchObject({ ok: true });
    expect(await admin.pttl(k.delay)).toBeGreaterThan(5_000 + DELAY_MS - 50);
    expect(await backend.renew(lease, 400)).toMatchObject({ ok: true });
    const renewedLeft = await admin.pttl(k.delay);
    expect(renewedLeft).toBeLessThanOrEqual(400 + DELAY_MS);

    // The grant runs out: the lock key is gone, the delay key stays D longer, then goes by itself.
    await until(async () => (await admin.exists(k.lock)) === 0, 'the lock key expired');
    expect(await admin.pttl(k.delay)).toBeGreaterThan(DELAY_MS - 100);
    expect((await backend.inspect(key)).holder).toBeNull();
    const refused = await backend.attempt(plain(key, 10_000));
    expect(refused).toMatchObject({ granted: false });
    expect((refused as { holderTtlMs: number }).holderTtlMs).toBeLessThanOrEqual(DELAY_MS);
    await until(async () => (await admin.exists(k.delay)) === 0, 'the delay key expired');
    expect(await admin.keys(`${prefix}:{${key}}:*`)).toEqual([`${k.fence}`]);
  });

  it('batched renewals (renew-many.lua) move each lease’s delay', async () => {
    const keys = [unique('batch-a'), unique('batch-b')];
    const requests = keys.map((key) => request(key, 400));
    const grants = await Promise.all(requests.map((r) => granted(r)));
    // Renewals of one turn go as one script call on a single node.
    const renewed = await Promise.all(
      requests.map((r, i) =>
        backend.renew({ key: r.key, owner: r.owner, fencingToken: grants[i]!.token }, 8_000),
      ),
    );
    expect(renewed.map((x) => x.ok)).toEqual([true, true]);
    for (const key of keys) {
      expect(await admin.pttl(backend.keysOf(key).delay)).toBeGreaterThan(8_000 + DELAY_MS - 50);
    }
  });

  it('a live release or abandon deletes the delay key; a late one leaves it', async () => {
    const released = request(unique('release'), 10_000);
    const grant = await granted(released);
    expect(
      await backend.release({
        key: released.key,
        owner: released.owner,
        fencingToken: grant.token,
      }),
    ).toBe('released');
    expect(await admin.exists(backend.keysOf(released.key).delay)).toBe(0);

    const abandoned = request(unique('abandon'), 10_000);
    await granted(abandoned);
    await backend.abandon(abandoned);
    expect(await admin.exists(backend.keysOf(abandoned.key).delay)).toBe(0);
    expect((await backend.attempt(request(abandoned.key, 1_000))).granted).toBe(true);

    const late = request(unique('late-abandon'), 300);
    await granted(late);
    await until(async () => (await admin.exists(backend.keysOf(late.key).lock)) === 0, 'expired');
    await backend.abandon(late);
    expect(await admin.exists(backend.keysOf(late.key).delay)).toBe(1);
    expect((await backend.attempt(request(late.key, 1_000))).granted).toBe(false);
  });

  it('an abandon that leaves the line does not hand the key over inside a delay', async () => {
    const key = unique('no-jump');
    const k = backend.keysOf(key);
    const startedAt = performance.now();
    const killed = await granted(request(key, 300));
    // Two waiters line up behind the killed holder.
    const first = plain(key, 10_000, { willWait: true });
    const second = plain(key, 10_000, { willWait: true });
    expect((await backend.attempt(first)).granted).toBe(false);
    expect((await backend.attempt(second)).granted).toBe(false);
    await until(async () => (await admin.exists(k.lock)) === 0, 'the lock key expired');
    // The head gives up: without the delay this would hand the key to the second waiter.
    await backend.abandon(first);
    expect(await admin.get(k.lock)).toBeNull();
    expect(await admin.lrange(k.queue, 0, -1)).toEqual([second.owner]);
    const refused = await backend.attempt(second);
    expect(refused.granted).toBe(false);
    // Once the delay is over, the waiter that heads the line is granted.
    await until(async () => (await admin.exists(k.delay)) === 0, 'the delay key expired');
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + killed.ttlMs + DELAY_MS - 5);
    expect((await backend.attempt(second)).granted).toBe(true);
  });

  it('a reader’s release does not hand the key over inside its writer’s delay', async () => {
    const key = unique('reader-release');
    const k = backend.keysOf(key);
    const writer = request(key, 300);
    await granted(writer);
    // The writer's own read lock (a downgrade) outlives it.
    const reader = plain(key, 10_000, { mode: 'read', heldWriter: writer.owner });
    const read = await granted(reader);
    const waiting = plain(key, 10_000, { willWait: true });
    expect((await backend.attempt(waiting)).granted).toBe(false);
    await until(async () => (await admin.exists(k.lock)) === 0, 'the writer expired');
    expect(await backend.release({ key, owner: reader.owner, fencingToken: read.token })).toBe(
      'released',
    );
    // Nobody holds the key, and the waiter at the head was not handed it: the delay runs.
    expect(await admin.get(k.lock)).toBeNull();
    expect(await admin.pttl(k.delay)).toBeGreaterThan(0);
    expect((await backend.attempt(waiting)).granted).toBe(false);
  });

  it('readers wait for a writer’s delay too', async () => {
    const key = unique('readers');
    await granted(request(key, 300));
    await until(async () => (await admin.exists(backend.keysOf(key).lock)) === 0, 'expired');
    const { locker } = newLocker();
    expect(await locker.tryAcquire(key, { mode: 'read' })).toBeNull();
    const read = await locker.acquire(key, { mode: 'read', waitMs: DELAY_MS + 5_000 });
    expect(await admin.exists(backend.keysOf(key).delay)).toBe(0);
    await read.release();
  });

  it('the line keeps its order through a delay: its head is granted when it ends', async () => {
    const key = unique('line-order');
    const startedAt = performance.now();
    const killed = await granted(request(key, 300));
    const [a, b] = [newLocker(), newLocker()];
    const order: string[] = [];
    const first = a.locker.acquire(key, { ttlMs: 10_000, waitMs: DELAY_MS + 10_000 });
    await until(async () => (await admin.llen(backend.keysOf(key).queue)) === 1, 'a queued');
    const second = b.locker.acquire(key, { ttlMs: 10_000, waitMs: DELAY_MS + 10_000 });
    await until(async () => (await admin.llen(backend.keysOf(key).queue)) === 2, 'b queued');
    const [leaseA, leaseB] = [first, second].map((acquired, i) =>
      acquired.then((lease) => {
        order.push(i === 0 ? 'a' : 'b');
        return lease;
      }),
    );
    await Promise.race([leaseA, leaseB]);
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + killed.ttlMs + DELAY_MS - 5);
    await delay(100);
    expect(order).toEqual(['a']);
    await (await leaseA!).release();
    await (await leaseB!).release();
  });

  it('a hand-over records the waiter’s own delay with the grant it makes', async () => {
    const key = unique('handed');
    const k = backend.keysOf(key);
    const { locker: holder } = newLocker();
    const { locker: waiter } = newLocker();
    const held = await holder.acquire(key, { ttlMs: 10_000 });
    expect(await admin.exists(k.delay)).toBe(0);
    const waiting = waiter.acquire(key, {
      ttlMs: 8_000,
      waitMs: 10_000,
      lockDelayMs: DELAY_MS,
      autoRenew: false,
    });
    await until(async () => (await admin.llen(k.queue)) === 1, 'the waiter queued');
    expect(await admin.hget(k.waiters, `${(await admin.lindex(k.queue, 0))!}:delay`)).toBe(
      String(DELAY_MS),
    );
    await held.release();
    const lease = await waiting;
    expect(await admin.get(k.delay)).toBe(String(DELAY_MS));
    // Confirmed to its full TTL by the renewal that follows a hand-over: the delay moved with it.
    expect(await admin.pttl(k.delay)).toBeGreaterThan(8_000 + DELAY_MS - 500);
    await lease.release();
    expect(await admin.exists(k.delay)).toBe(0);
  });

  it('attemptAll records each key’s delay, and refuses a key in its delay', async () => {
    const keys = [unique('all-a'), unique('all-b')].sort();
    const requests = keys.map((key) => request(key, 300));
    const grants = await backend.attemptAll!(requests);
    expect(grants!.map((g) => g.granted)).toEqual([true, true]);
    for (const key of keys) expect(await admin.get(backend.keysOf(key).delay)).toBe('1500');
    await until(async () => (await admin.exists(backend.keysOf(keys[1]!).lock)) === 0, 'expired');
    const again = await backend.attemptAll!(keys.map((key) => plain(key, 1_000)));
    expect(again!.map((g) => g.granted)).toEqual([false, false]);
    expect((again![0] as { holderTtlMs: number }).holderTtlMs).toBeLessThanOrEqual(DELAY_MS);
  });

  it('an election keeps its delay in its own key, deleted by a resignation', async () => {
    const name = unique('election');
    const e = electionKeys(prefix, name);
    const killed = request(name, 300, { election: { value: 'killed' } });
    await granted(killed);
    expect(await admin.get(e.delay)).toBe(String(DELAY_MS));
    // The lock of the same key is another object: not delayed.
    expect(await admin.exists(backend.keysOf(name).delay)).toBe(0);
    await until(async () => (await admin.exists(e.leader)) === 0, 'the leader expired');
    expect(await backend.leader(name)).toBeNull();
    const next = plain(name, 1_000, { election: { value: 'next' } });
    expect((await backend.attempt(next)).granted).toBe(false);
    await until(async () => (await admin.exists(e.delay)) === 0, 'the delay expired');

    const resigning = request(name, 10_000, { election: { value: 'resigns' } });
    const grant = await granted(resigning);
    expect(await admin.pttl(e.delay)).toBeGreaterThan(10_000);
    expect(
      await backend.release({
        key: name,
        owner: resigning.owner,
        fencingToken: grant.token,
        election: true,
      }),
    ).toBe('released');
    expect(await admin.exists(e.delay)).toBe(0);
  });

  it('on Sentinel the grant carries its delay through the failover epoch’s path', async () => {
    const sentinel = createRedisBackend({ url: `${SENTINEL_URL}?prefix=${prefix}` });
    try {
      const key = unique('sentinel');
      const startedAt = performance.now();
      const r = request(key, 300);
      const result = await sentinel.attempt(r);
      expect(result.granted).toBe(true);
      await delay(400);
      const refused = await sentinel.attempt(plain(key, 1_000));
      expect(refused.granted).toBe(false);
      expect((refused as { holderTtlMs: number }).holderTtlMs).toBeGreaterThan(DELAY_MS - 300);
      const locker = createLocker(sentinel);
      const lease = await locker.acquire(key, { ttlMs: 1_000, waitMs: DELAY_MS + 5_000 });
      expect(performance.now()).toBeGreaterThanOrEqual(startedAt + 300 + DELAY_MS - 5);
      await lease.release();
      await locker.close();
    } finally {
      await sentinel.close();
    }
  });
});
