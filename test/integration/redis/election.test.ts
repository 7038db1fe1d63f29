/**
 * Leader elections on the Redis backend (election.ts), what the contract cannot see: the layout
 * (`<prefix>:{<key>}:election:*`, one hash slot, apart from the lock and the semaphore of the key,
 * not listed), a term counter without expiry that keeps terms rising past a counter ahead of the
 * clock and past a lost counter, safe repeats of a lost reply, the compare-and-set of proclaim,
 * the watch on the backend's one subscriber (armed, what it notifies, nothing after stop() or
 * close(), no subscription left) and a Cluster. A watch across a Sentinel failover is in
 * failover.test.ts, which rebuilds the Sentinel topology around its tests.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { hashSlot } from '../../../packages/fencelock/src/backends/redis/hash-slot.js';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  electionKeys,
  semaphoreKeys,
} from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import { BackendError, createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { CLUSTER_PORT_BASE, REDIS_URL } from '../../helpers/engines.js';

const prefix = `fencelock-it-election-${randomBytes(4).toString('hex')}`;
const admin = new Redis(REDIS_URL, { lazyConnect: true });
const cleanups: (() => Promise<unknown>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length > 0) await admin.del(...keys);
  admin.disconnect();
});

function backendOf(options: Partial<Parameters<typeof createRedisBackend>[0]> = {}): RedisBackend {
  const backend = createRedisBackend({ url: REDIS_URL, prefix, ...options } as never);
  cleanups.push(() => backend.close());
  return backend;
}

function lockerOf(backend: RedisBackend): Locker {
  const locker = createLocker(backend);
  cleanups.push(() => locker.close());
  return locker;
}

function owner(): string {
  return randomBytes(16).toString('hex');
}

function candidate(key: string, value: string, willWait = true): AttemptRequest {
  return {
    key,
    owner: owner(),
    ttlMs: 30_000,
    mode: 'write',
    autoRenew: false,
    willWait,
    election: { value },
  };
}

/** Counts `onChange` calls. */
function counter(): {
  calls: number;
  onChange: () => void;
  until(n: number, ms?: number): Promise<void>;
} {
  const c = {
    calls: 0,
    onChange: () => {
      c.calls += 1;
    },
    async until(n: number, ms = 3_000) {
      const deadline = Date.now() + ms;
      while (c.calls < n) {
        if (Date.now() > deadline) throw new Error(`${c.calls} calls, expected ${n}`);
        await delay(10);
      }
    },
  };
  return c;
}

async function subscribers(on: Redis, channel: string): Promise<number> {
  const reply = (await on.call('PUBSUB', 'NUMSUB', channel)) as [string, number];
  return Number(reply[1]);
}

/** Until `test()` holds, or fails after `ms`. */
async function eventually(test: () => Promise<boolean>, ms = 3_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await delay(20);
  }
}

describe('Redis election: layout', () => {
  it('keeps the election apart from the lock and semaphore of its key; not listed', async () => {
    const backend = backendOf();
    const locker = lockerOf(backend);
    const key = `layout:${randomBytes(3).toString('hex')}`;
    const lock = await locker.acquire(key, { ttlMs: 30_000 });
    const permit = await locker.semaphore(key, { permits: 2 }).acquire({ ttlMs: 30_000 });
    const lockKey = backend.keysOf(key).lock;
    const sem = semaphoreKeys(prefix, key);
    const before = [await admin.get(lockKey), await admin.zrange(sem.holders, '0', '-1')];

    const value = 'host:8080 — ünïcode: yes';
    const leading = await locker.election(key).campaign(value, { ttlMs: 30_000 });
    const e = electionKeys(prefix, key);
    expect(await admin.get(e.leader)).toBe(`${leading.owner}:${leading.term}:${value}`);
    expect(await admin.pttl(e.leader)).toBeGreaterThan(25_000);
    // The term counter has no expiry (a lock's fence counter has one).
    expect(await admin.get(e.term)).toBe(String(leading.term));
    expect(await admin.pttl(e.term)).toBe(-1);
    expect(await admin.pttl(backend.keysOf(key).fence)).toBeGreaterThan(0);
    // Every key of the election sits in the lock's hash slot.
    const slots = new Set([...Object.values(e), lockKey].map((name) => hashSlot(name)));
    expect(slots.size).toBe(1);
    expect(await backend.leader(key)).toEqual({
      owner: leading.owner,
      term: leading.term,
      value,
      ttlMs: expect.any(Number),
      candidates: 1,
    });
    // The lock and the semaphore are untouched; `list` reports them, not the election.
    expect([await admin.get(lockKey), await admin.zrange(sem.holders, '0', '-1')]).toEqual(before);
    const page = await backend.list({ prefix: key, cursor: null, pageSize: 100 });
    const all = [...page.entries];
    for (let cursor = page.cursor; cursor !== null; ) {
      const next = await backend.list({ prefix: key, cursor, pageSize: 100 });
      all.push(...next.entries);
      cursor = next.cursor;
    }
    expect(all.map((l) => l.mode).sort()).toEqual(['permits', 'write']);
    expect(all.flatMap((l) => l.holders.map((h) => h.owner))).not.toContain(leading.owner);

    expect(await leading.resign()).toBe('released');
    // The value went with the grant; the term stays.
    expect(await admin.exists(e.leader)).toBe(0);
    expect(await admin.get(e.term)).toBe(String(leading.term));
    expect(await admin.get(lockKey)).toBe(before[0]);
    await Promise.all([lock.release(), permit.release()]);
  });
});

describe('Redis election: candidates', () => {
  it('counts the leader and the live entries of the line, not one whose time ran out', async () => {
    const backend = backendOf();
    const locker = lockerOf(backend);
    const key = `candidates:${randomBytes(3).toString('hex')}`;
    const leading = await locker.election(key).campaign('leader', { ttlMs: 30_000 });
    const e = electionKeys(prefix, key);
    const [seconds, micros] = await admin.time();
    const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    // Two candidates in line: one live, one whose owner vanished (its entry's time ran out).
    const [live, gone] = ['a'.repeat(32), 'b'.repeat(32)];
    await admin.rpush(e.queue, gone, live);
    await admin.hset(e.waiters, gone, nowMs - 1_000, live, nowMs + 60_000);
    expect((await backend.leader(key))?.candidates).toBe(2);
    // The read is read-only: the expired entry is skipped, not dropped.
    expect(await admin.lrange(e.queue, 0, -1)).toEqual([gone, live]);
    await admin.hset(e.waiters, gone, nowMs + 60_000);
    expect((await backend.leader(key))?.candidates).toBe(3);
    await admin.del(e.queue, e.waiters);
    expect((await backend.leader(key))?.candidates).toBe(1);
    await leading.resign();
  });
});

describe('Redis election: terms', () => {
  it('rise past a counter ahead of the clock, and past a lost counter', async () => {
    const backend = backendOf();
    const key = `terms:${randomBytes(3).toString('hex')}`;
    const e = electionKeys(prefix, key);
    const first = candidate(key, 'a');
    const granted = await backend.attempt(first);
    if (!granted.granted) throw new Error('not granted');
    await backend.release({ key, owner: first.owner, fencingToken: granted.token, election: true });
    // A counter far ahead of the server's clock (a clock set back since): the counter leads.
    const ahead = granted.token + 10_000_000_000n;
    await admin.set(e.term, String(ahead));
    const second = candidate(key, 'b');
    const next = await backend.attempt(second);
    expect(next).toMatchObject({ granted: true, token: ahead + 1n });
    await backend.abandon(second);
    // A counter lost (a restart without persistence): the clock in µs is past the terms it
    // seeded before.
    await admin.del(e.term);
    const third = candidate(key, 'c');
    const after = await backend.attempt(third);
    if (!after.granted) throw new Error('not granted');
    expect(after.token).toBeGreaterThan(granted.token);
    expect(await admin.pttl(e.term)).toBe(-1);
    await backend.abandon(third);
  });
});

describe('Redis election: lost replies, proclaim, hand-over', () => {
  it('repeats safely; proclaim is a compare-and-set of owner and term', async () => {
    const backend = backendOf();
    const key = `cas:${randomBytes(3).toString('hex')}`;
    const a = candidate(key, 'a');
    const granted = await backend.attempt(a);
    const again = await backend.attempt(a);
    expect(again).toMatchObject({ granted: true, token: (granted as { token: bigint }).token });
    const term = (granted as { token: bigint }).token;
    const lease = { key, owner: a.owner, fencingToken: term, election: true };
    // Another candidate waits in line and is not a leader.
    const b = candidate(key, 'b');
    expect(await backend.attempt(b)).toMatchObject({ granted: false, queued: true });
    expect((await backend.leader(key))?.owner).toBe(a.owner);
    // Wrong term or owner: nothing stored.
    expect(await backend.proclaim({ ...lease, fencingToken: term - 1n }, 'x')).toBe('not-owner');
    expect(await backend.proclaim({ ...lease, owner: owner() }, 'x')).toBe('not-owner');
    expect(await backend.proclaim(lease, 'a:2')).toBe('proclaimed');
    expect((await backend.leader(key))?.value).toBe('a:2');
    expect(await backend.renew({ ...lease, fencingToken: term + 1n }, 30_000)).toEqual({
      ok: false,
      reason: 'not-owner',
    });
    expect(await backend.renew(lease, 30_000)).toEqual({ ok: true, ttlMs: 30_000 });
    // A lock's renew of the same owner and token does not reach the election.
    expect(await backend.renew({ ...lease, election: false }, 30_000)).toMatchObject({ ok: false });
    // Resign hands over to b, with b's value and a greater term.
    expect(await backend.release(lease)).toBe('released');
    expect(await backend.release(lease)).toBe('not-owner');
    const next = await backend.leader(key);
    expect(next).toMatchObject({ owner: b.owner, value: 'b' });
    expect(next!.term).toBeGreaterThan(term);
    // The old leader's proclaim is refused; b's attempt (its message lost) is its grant.
    expect(await backend.proclaim(lease, 'stale')).toBe('not-owner');
    expect(await backend.attempt(b)).toMatchObject({ granted: true, token: next!.term });
    await backend.abandon(b);
    expect(await backend.leader(key)).toBeNull();
    expect(await backend.proclaim(lease, 'stale')).toBe('not-held');
    expect(await backend.release(lease)).toBe('not-held');
  });
});

describe('Redis election: watch', () => {
  it('is armed on resolve; notifies grants, proclaims, resigns; nothing after stop or close', async () => {
    const client = new Redis(REDIS_URL);
    cleanups.push(async () => client.quit());
    let duplicates = 0;
    const duplicate = client.duplicate.bind(client);
    client.duplicate = ((...args: Parameters<Redis['duplicate']>) => {
      duplicates += 1;
      return duplicate(...args);
    }) as Redis['duplicate'];
    const backend = createRedisBackend({ client, prefix });
    const other = backendOf();
    const key = `watch:${randomBytes(3).toString('hex')}`;
    const { channel } = electionKeys(prefix, key);

    const seen = counter();
    const watch = await backend.watchElection(key, seen.onChange);
    expect(watch.recheckAfterMs).toBe(1_000);
    // Armed: the server has the subscription when the promise resolves.
    expect(await subscribers(admin, channel)).toBe(1);
    const more = await Promise.all(
      ['x', 'y', 'z'].map((s) => backend.watchElection(`${key}:${s}`, () => undefined)),
    );
    // One subscriber connection for every watch.
    expect(duplicates).toBe(1);
    seen.calls = 0;

    const a = candidate(key, 'a');
    const granted = (await other.attempt(a)) as { token: bigint };
    await seen.until(1);
    const lease = { key, owner: a.owner, fencingToken: granted.token, election: true };
    await other.proclaim(lease, 'a2');
    await seen.until(2);
    await other.release(lease);
    await seen.until(3);
    // A refused proclaim and a renewal change nothing that observers see: no message.
    await other.proclaim(lease, 'gone');
    await delay(200);
    expect(seen.calls).toBe(3);

    watch.stop();
    watch.stop();
    await eventually(async () => (await subscribers(admin, channel)) === 0);
    await other.attempt(candidate(key, 'b'));
    await admin.publish(channel, '*');
    await delay(200);
    expect(seen.calls).toBe(3);

    // close(): the other watches call nothing, and the subscriber is gone.
    const late = counter();
    const watching = await backend.watchElection(key, late.onChange);
    await backend.close();
    await admin.publish(channel, '*');
    await delay(200);
    expect(late.calls).toBe(0);
    expect(await subscribers(admin, channel)).toBe(0);
    watching.stop();
    for (const w of more) w.stop();
    await expect(backend.watchElection(key, () => undefined)).rejects.toBeInstanceOf(BackendError);
  });

  it('with notifications off, subscribes nothing and asks for polling', async () => {
    const backend = backendOf({ notifications: false });
    const key = `quiet:${randomBytes(3).toString('hex')}`;
    const watch = await backend.watchElection(key, () => undefined);
    expect(watch.recheckAfterMs).toBe(500);
    expect(await subscribers(admin, electionKeys(prefix, key).channel)).toBe(0);
    watch.stop();
  });
});

describe('Redis election: Cluster', () => {
  it('grants, hands over and notifies on a Cluster (keys in one slot)', async () => {
    const seed = [{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }];
    const clusters = [new Cluster(seed), new Cluster(seed)];
    cleanups.push(async () => Promise.all(clusters.map((c) => c.quit())));
    const [watching, granting] = clusters.map((c) => createRedisBackend({ client: c, prefix }));
    const key = `cluster:${randomBytes(3).toString('hex')}`;
    const seen = counter();
    const watch = await watching!.watchElection(key, seen.onChange);
    seen.calls = 0; // the subscriber's first connection is told too
    const a = candidate(key, 'a');
    const b = candidate(key, 'b');
    const granted = (await granting!.attempt(a)) as { token: bigint };
    await seen.until(1);
    type Waiting = { waitForChange: (s: AbortSignal, ms: number) => Promise<unknown> };
    const signal = new AbortController().signal;
    const waiting = await granting!.attempt(b);
    expect(waiting).toMatchObject({ granted: false, queued: true });
    // The first wait on a channel ends once its subscription is confirmed; b attempts again.
    expect(await (waiting as Waiting).waitForChange(signal, 5_000)).toBeUndefined();
    const again = (await granting!.attempt(b)) as Waiting;
    const handed = again.waitForChange(signal, 5_000);
    await delay(100);
    await granting!.release({ key, owner: a.owner, fencingToken: granted.token, election: true });
    expect(await handed).toMatchObject({ granted: true });
    await seen.until(2);
    const leader = await watching!.leader(key);
    expect(leader).toMatchObject({ owner: b.owner, value: 'b' });
    expect(leader!.term).toBeGreaterThan(granted.token);
    await granting!.abandon(b);
    await seen.until(3);
    watch.stop();
    await Promise.all([watching!.close(), granting!.close()]);
  });
});
