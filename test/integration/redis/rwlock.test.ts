/**
 * Read-write locks on Redis (single node and Cluster, one backend): readers share the key; a
 * writer is alone; one FIFO line, so a reader that arrives after a queued writer waits for it (no
 * writer starvation) while readers ahead of a writer go together. Waiting is event-driven with no
 * herd: a writer's release wakes the readers at the head of the line (each by its owner id) and
 * nobody behind the first writer; the last reader's release hands the key to the writer at the
 * head; both well under the 0.5 s poll with a 30 s TTL. Every grant gets its own fencing token
 * from the key's one sequence, strictly increasing in grant order. A crashed reader's grant ends
 * by its TTL, and its keys expire. Through Sentinel the readers' tokens carry the failover epoch.
 *
 * Downgrade and upgrade: the rules of test/integration/rwlock-rules.ts.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Cluster, Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { counterOf } from '../../../packages/fencelock/src/backends/redis/failover-epoch.js';
import type { RedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import type { ReadWriteLockKeys } from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import { readAcquireScript } from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/waiting-line.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  type Lease,
  type Locker,
  type LockerOptions,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import {
  CLUSTER_PORT_BASE,
  CLUSTER_URL,
  REDIS_URL,
  SENTINEL_DATA_PORT_BASE,
  SENTINEL_URL,
} from '../../helpers/engines.js';
import { settledWithin } from '../../helpers/promises.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';

/** Longest handoff gap that counts as event-driven: well under the 0.5 s poll. */
const EVENT_GAP_MS = 250;
/** A TTL no grant here runs out of by itself (a handoff by expiry would take this long). */
const LONG_TTL_MS = 30_000;

const run = randomBytes(4).toString('hex');
const lockers: Locker[] = [];
const admins: (Redis | Cluster)[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  for (const admin of admins) admin.disconnect();
});

interface Topology {
  readonly name: string;
  readonly url: string;
  admin(): Redis | Cluster;
}

const topologies: Topology[] = [
  {
    name: 'single node',
    url: REDIS_URL,
    admin: () => new Redis(REDIS_URL, { maxRetriesPerRequest: 2 }),
  },
  {
    name: 'Cluster',
    url: CLUSTER_URL,
    admin: () => new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }]),
  },
];

describe.each(topologies)('Redis read-write lock ($name)', (topology) => {
  const prefix = `fencelock-rw-${run}-${topology.name === 'Cluster' ? 'c' : 's'}`;
  const admin = topology.admin();
  admins.push(admin);
  const unique = (label: string) => `rw-${label}-${randomBytes(4).toString('hex')}`;

  afterAll(async () => {
    const nodes = admin instanceof Cluster ? admin.nodes('master') : [admin];
    for (const node of nodes) {
      const keys = await node.keys(`${prefix}:*`);
      for (const key of keys) await admin.del(key);
    }
  });

  /** A locker on its own connections (as a separate process would have). */
  function newLocker(options?: LockerOptions): Locker {
    const separator = topology.url.includes('?') ? '&' : '?';
    const locker = createLocker(`${topology.url}${separator}prefix=${prefix}`, options);
    lockers.push(locker);
    return locker;
  }

  async function keysOf(locker: Locker, key: string): Promise<ReadWriteLockKeys> {
    return ((await locker.backend()) as RedisBackend).keysOf(key);
  }

  /** A contender on its own locker, recording the grant order. */
  function contender(
    key: string,
    mode: LockMode,
    name: string,
    grants: { name: string; token: bigint; at: number }[],
  ): Promise<Lease> {
    return newLocker({ ttlMs: LONG_TTL_MS })
      .acquire(key, { mode, waitMs: 30_000 })
      .then((lease) => {
        grants.push({ name, token: lease.fencingToken, at: performance.now() });
        return lease;
      });
  }

  /** Wait until the key's line holds `count` entries. */
  async function lineLength(k: ReadWriteLockKeys, count: number): Promise<void> {
    for (let i = 0; i < 500; i++) {
      if ((await admin.llen(k.queue)) === count) return;
      await delay(10);
    }
    throw new Error(`the line never held ${count} entries`);
  }

  /** Record the messages published on the key's release channel. */
  async function listen(k: ReadWriteLockKeys): Promise<{ messages: string[]; stop(): void }> {
    const subscriber = admin instanceof Cluster ? admin.duplicate() : admin.duplicate();
    const messages: string[] = [];
    subscriber.on('message', (_channel: string, message: string) => messages.push(message));
    await subscriber.subscribe(k.channel);
    return { messages, stop: () => subscriber.disconnect() };
  }

  /** The fixture of the downgrade and upgrade rules: a lock's holders, then its line. */
  const dirs = new Map<string, ReadWriteLockKeys>();
  const count = async (dir: string): Promise<number> => {
    const k = dirs.get(dir)!;
    return (
      (await admin.exists(k.lock)) + (await admin.zcard(k.readers)) + (await admin.llen(k.queue))
    );
  };
  downgradeAndUpgradeTests({
    engine: `redis (${topology.name})`,
    locker: (options) => newLocker(options),
    dirOf: (backend, key) => {
      const k = (backend as RedisBackend).keysOf(key);
      dirs.set(k.lock, k);
      return k.lock;
    },
    line: async (dir) => {
      const k = dirs.get(dir)!;
      const line: [string, 'read' | 'write', bigint][] = [];
      const writer = await admin.get(k.lock);
      if (writer !== null) {
        const [owner = '', token = '0'] = writer.split(':');
        line.push([owner, 'write', BigInt(token)]);
      }
      const tokens = await admin.hgetall(k.readerTokens);
      const readers = Object.entries(tokens).map(
        ([owner, token]) => [owner, 'read', BigInt(token)] as [string, 'read', bigint],
      );
      line.push(...readers.sort((a, b) => (a[2] < b[2] ? -1 : 1)));
      for (const owner of await admin.lrange(k.queue, 0, -1)) {
        const reads = (await admin.hget(k.waiters, `${owner}:read`)) === '1';
        line.push([owner, reads ? 'read' : 'write', 0n]);
      }
      return line;
    },
    count,
    waitForCount: async (dir, n) => {
      for (let i = 0; i < 500; i++) {
        if ((await count(dir)) === n) return;
        await delay(10);
      }
      throw new Error(`${dir} never had ${n} entries`);
    },
  });

  it('readers share the key, each with its own rising token; a writer is kept out', async () => {
    const key = unique('shared');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect([r1, r2, r3].every((r) => r.isHeld)).toBe(true);
    expect(r2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(r3.fencingToken).toBeGreaterThan(r2.fencingToken);
    // Nobody holds the writer's key; the readers are in the readers' set, which expires.
    expect(await admin.exists(k.lock)).toBe(0);
    expect(await admin.zcard(k.readers)).toBe(3);
    expect(await admin.pttl(k.readers)).toBeGreaterThan(LONG_TTL_MS - 5_000);
    expect(await admin.pttl(k.readerTokens)).toBeGreaterThan(LONG_TTL_MS - 5_000);
    // The earliest reader is reported as the holder; the last token is the newest reader's.
    const info = await probe.inspect(key);
    expect(info.holder?.owner).toBe(r1.owner);
    expect(info.holder?.fencingToken).toBe(r1.fencingToken);
    expect(info.holder?.ttlMs).toBeGreaterThan(LONG_TTL_MS - 5_000);
    expect(info.lastFencingToken).toBe(r3.fencingToken);
    // A writer's single attempt fails and leaves no entry.
    expect(await probe.tryAcquire(key)).toBeNull();
    expect(await admin.llen(k.queue)).toBe(0);
    // Another reader's single attempt is granted beside them.
    const r4 = await probe.tryAcquire(key, { mode: 'read' });
    expect(r4?.fencingToken).toBeGreaterThan(r3.fencingToken);
    for (const r of [r1, r2, r3, r4!]) expect(await r.release()).toBe('released');
    expect(await admin.exists(k.readers, k.readerTokens, k.queue, k.waiters)).toBe(0);
  });

  it('release and renew of a read grant compare owner and token (not-owner, not-held)', async () => {
    const key = unique('refusals');
    const locker = newLocker({ ttlMs: LONG_TTL_MS });
    const backend = await locker.backend();
    const other = await newLocker().backend();
    const reader = await locker.acquire(key, { mode: 'read' });
    const { owner, fencingToken: token } = reader;
    const stranger = randomBytes(16).toString('hex');
    for (const b of [backend, other]) {
      expect(await b.release({ key, owner, fencingToken: token + 1n })).toBe('not-owner');
      expect(await b.release({ key, owner: stranger, fencingToken: token })).toBe('not-owner');
      expect(await b.renew({ key, owner, fencingToken: token + 1n }, 10_000)).toEqual({
        ok: false,
        reason: 'not-owner',
      });
    }
    // Another backend instance renews the read grant by owner and token too.
    expect(await other.renew({ key, owner, fencingToken: token }, 20_000)).toEqual({
      ok: true,
      ttlMs: 20_000,
    });
    const info = await locker.inspect(key);
    expect(info.holder?.owner).toBe(owner);
    expect(info.holder?.ttlMs).toBeLessThanOrEqual(20_000);
    expect(await reader.release()).toBe('released');
    expect(await other.release({ key, owner, fencingToken: token })).toBe('not-held');
    expect(await other.renew({ key, owner, fencingToken: token }, 10_000)).toEqual({
      ok: false,
      reason: 'not-held',
    });
  });

  it('the watchdog renews a read grant past its TTL', async () => {
    const key = unique('renewed');
    const locker = newLocker();
    // The connections are up before the lease's clock starts.
    await locker.inspect(key);
    const reader = await locker.acquire(key, { mode: 'read', ttlMs: 1_000 });
    await delay(2_500);
    expect(reader.isHeld).toBe(true);
    const info = await newLocker().inspect(key);
    expect(info.holder?.owner).toBe(reader.owner);
    expect(info.holder?.ttlMs).toBeLessThanOrEqual(1_000);
    expect(await newLocker().tryAcquire(key)).toBeNull();
    expect(await reader.release()).toBe('released');
  });

  it('a reader arriving after a queued writer waits for it (FIFO); the handoffs are event-driven', async () => {
    const key = unique('fifo');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const w = contender(key, 'write', 'W', grants);
    await lineLength(k, 1);
    const r3 = contender(key, 'read', 'R3', grants);
    await lineLength(k, 2);
    // Only readers hold, yet R3 waits: a writer is ahead of it. A single read attempt too.
    expect(await settledWithin(Promise.race([w, r3]), 300)).toBe(false);
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    const channel = await listen(k);
    let writer: Lease;
    let reader3: Lease;
    try {
      // The writer waits for every earlier reader: that release tells nobody.
      expect(await r2.release()).toBe('released');
      expect(await settledWithin(w, 300)).toBe(false);
      expect(channel.messages).toEqual([]);
      // The last reader's release hands the key to the writer at once: granted in the script,
      // the grant published (owner, token, first TTL).
      const lastReaderAt = performance.now();
      expect(await r1.release()).toBe('released');
      writer = await w;
      expect(grants.at(-1)!.at - lastReaderAt).toBeLessThan(EVENT_GAP_MS);
      // On a Cluster the listener may sit on another node than the writer's subscription: the
      // message reaches it over the cluster bus, maybe after the writer's grant.
      for (let i = 0; i < 50 && channel.messages.length < 1; i++) await delay(10);
      expect(channel.messages).toEqual([
        `${writer.owner}:${writer.fencingToken}:${QUEUE_ENTRY_TTL_MS}`,
      ]);
      expect(await settledWithin(r3, 300)).toBe(false);
      // The writer's release wakes the reader behind it at once, by its owner id.
      const writerAt = performance.now();
      expect(await writer.release()).toBe('released');
      reader3 = await r3;
      expect(grants.at(-1)!.at - writerAt).toBeLessThan(EVENT_GAP_MS);
      for (let i = 0; i < 50 && channel.messages.length < 2; i++) await delay(10);
      expect(channel.messages.slice(1)).toEqual([reader3.owner]);
    } finally {
      channel.stop();
    }
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'W', 'R3']);
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!.token).toBeGreaterThan(grants[i - 1]!.token);
    }
    expect(await reader3.release()).toBe('released');
    expect(await admin.exists(k.lock, k.readers, k.readerTokens, k.queue, k.waiters)).toBe(0);
  });

  it("a writer's release wakes the readers at the head of the line, and nobody behind the next writer", async () => {
    const key = unique('wake');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const holder = await contender(key, 'write', 'W1', grants);
    const waiting: Promise<Lease>[] = [];
    for (const [i, [mode, name]] of (
      [
        ['read', 'R1'],
        ['read', 'R2'],
        ['read', 'R3'],
        ['write', 'W2'],
        ['read', 'R4'],
      ] as const
    ).entries()) {
      waiting.push(contender(key, mode, name, grants));
      await lineLength(k, i + 1);
    }
    const line = await admin.lrange(k.queue, 0, -1);
    // Every waiter has settled into its wait (its subscription confirmed).
    await delay(200);
    const channel = await listen(k);
    try {
      const releasedAt = performance.now();
      expect(await holder.release()).toBe('released');
      const readers = await Promise.all(waiting.slice(0, 3));
      for (const g of grants.slice(1)) expect(g.at - releasedAt).toBeLessThan(EVENT_GAP_MS);
      expect(new Set(grants.slice(1).map((g) => g.name))).toEqual(new Set(['R1', 'R2', 'R3']));
      // One message per reader at the head, by owner id; none for W2 or R4.
      for (let i = 0; i < 50 && channel.messages.length < 3; i++) await delay(10);
      expect(channel.messages).toEqual(line.slice(0, 3));
      expect(await settledWithin(Promise.race(waiting.slice(3)), 300)).toBe(false);
      // W2 goes once the three readers are gone; then R4.
      for (const r of readers) expect(await r.release()).toBe('released');
      const w2 = await waiting[3]!;
      expect(grants.at(-1)!.name).toBe('W2');
      expect(await w2.release()).toBe('released');
      expect(await (await waiting[4]!).release()).toBe('released');
    } finally {
      channel.stop();
    }
    const ordered = [grants[0]!, ...grants.slice(1, 4).sort(byToken), ...grants.slice(4)];
    for (let i = 1; i < ordered.length; i++) {
      expect(ordered[i]!.token).toBeGreaterThan(ordered[i - 1]!.token);
    }
    expect(grants.slice(4).map((g) => g.name)).toEqual(['W2', 'R4']);
  });

  it('a reader queued behind a writer goes in beside the earlier reader once the writer gives up', async () => {
    const key = unique('withdrawn');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const w = newLocker({ ttlMs: LONG_TTL_MS }).acquire(key, { waitMs: 1_000 });
    w.catch(() => undefined);
    await lineLength(k, 1);
    const r2 = contender(key, 'read', 'R2', grants);
    await lineLength(k, 2);
    expect(await settledWithin(r2, 300)).toBe(false);
    await expect(w).rejects.toBeInstanceOf(LockTimeoutError);
    const gaveUpAt = performance.now();
    const reader2 = await r2;
    expect(grants.at(-1)!.at - gaveUpAt).toBeLessThan(EVENT_GAP_MS);
    expect(r1.isHeld).toBe(true);
    expect(reader2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(await reader2.release()).toBe('released');
    expect(await r1.release()).toBe('released');
    expect(await admin.exists(k.lock, k.readers, k.readerTokens, k.queue, k.waiters)).toBe(0);
  });

  it("a downgrade passes readers waiting behind the caller's writer; they go when it is released", async () => {
    const key = unique('downgrade-readers');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const locker = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(locker, key);
    let waitingReader: Promise<Lease> | undefined;
    let mine: Lease | undefined;
    await locker.withLock(key, async () => {
      waitingReader = contender(key, 'read', 'R2', grants);
      await lineLength(k, 1);
      // The waiting reader is no writer: the downgrade is granted at once, past it.
      mine = await locker.acquire(key, { mode: 'read', waitMs: 3_000 });
      expect(await settledWithin(waitingReader, 200)).toBe(false);
    });
    // The write lock's release wakes the reader, which shares the key with the downgraded one.
    const releasedAt = performance.now();
    const reader2 = await waitingReader!;
    expect(performance.now() - releasedAt).toBeLessThan(EVENT_GAP_MS);
    expect(mine!.isHeld).toBe(true);
    expect(reader2.fencingToken).toBeGreaterThan(mine!.fencingToken);
    expect(await mine!.release()).toBe('released');
    expect(await reader2.release()).toBe('released');
    expect(await admin.exists(k.lock, k.readers, k.readerTokens, k.queue, k.waiters)).toBe(0);
  });

  it('a writer that gives up behind the head of the line wakes the readers it held back', async () => {
    const key = unique('withdrawn-behind');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const holder = await contender(key, 'write', 'H', grants);
    // A slow reader heads the line (its entry lives on; it never attempts again), then a writer
    // that gives up, then a reader that waits for that writer only.
    const slow = randomBytes(16).toString('hex');
    const keys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
    expect((await readAcquireScript.run(admin, keys, [slow, 10_000, 10_000, 15_000, '']))[0]).toBe(
      0,
    );
    const w = newLocker({ ttlMs: LONG_TTL_MS }).acquire(key, { waitMs: 1_500 });
    w.catch(() => undefined);
    await lineLength(k, 2);
    const r3 = contender(key, 'read', 'R3', grants);
    await lineLength(k, 3);
    expect(await holder.release()).toBe('released');
    expect(await settledWithin(r3, 300)).toBe(false);
    const channel = await listen(k);
    try {
      await expect(w).rejects.toBeInstanceOf(LockTimeoutError);
      const gaveUpAt = performance.now();
      const reader3 = await r3;
      expect(grants.at(-1)!.at - gaveUpAt).toBeLessThan(EVENT_GAP_MS);
      // The withdrawal woke the readers at the head, the slow one and R3, by owner id.
      for (let i = 0; i < 50 && channel.messages.length < 2; i++) await delay(10);
      expect(channel.messages).toEqual([slow, reader3.owner]);
      expect(await reader3.release()).toBe('released');
    } finally {
      channel.stop();
      await admin.del(k.queue, k.waiters);
    }
  });

  it('a read grant withdrawn with abandon hands the key to the waiting writer at once', async () => {
    const key = unique('abandoned-reader');
    const grants: { name: string; token: bigint; at: number }[] = [];
    const locker = newLocker({ ttlMs: LONG_TTL_MS });
    const backend = await locker.backend();
    const k = await keysOf(locker, key);
    const reader = await locker.acquire(key, { mode: 'read' });
    const w = contender(key, 'write', 'W', grants);
    await lineLength(k, 1);
    await delay(100);
    const abandonedAt = performance.now();
    await backend.abandon({
      key,
      owner: reader.owner,
      ttlMs: LONG_TTL_MS,
      mode: 'read',
      autoRenew: true,
    });
    const writer = await w;
    expect(grants[0]!.at - abandonedAt).toBeLessThan(EVENT_GAP_MS);
    expect(writer.fencingToken).toBeGreaterThan(reader.fencingToken);
    expect(await reader.release()).toBe('not-owner');
    expect(await writer.release()).toBe('released');
  });

  it('a reader whose reply was lost asks again and gets its own token, its grant refreshed', async () => {
    const key = unique('asks-again');
    const k = await keysOf(newLocker(), key);
    const keys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
    const me = randomBytes(16).toString('hex');
    const first = await readAcquireScript.run(admin, keys, [me, 1_000, 2_000, 6_000, '']);
    expect(first[0]).toBe(1);
    const again = await readAcquireScript.run(admin, keys, [me, 20_000, 2_000, 25_000, '']);
    expect(again).toEqual(first);
    expect(await admin.zcard(k.readers)).toBe(1);
    expect(await admin.pttl(k.readers)).toBeGreaterThan(19_000);
    await admin.del(k.readers, k.readerTokens);
  });

  it("a crashed reader's grant ends by its TTL, and its keys expire", async () => {
    const key = unique('crashed');
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    // A reader of a process that died: granted once, never renewed nor released.
    const ghost = randomBytes(16).toString('hex');
    const reply = await readAcquireScript.run(
      admin,
      [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
      [ghost, 400, 0, 5_400, ''],
    );
    expect(reply[0]).toBe(1);
    const ghostToken = BigInt(reply[1]!);
    for (const readerKey of [k.readers, k.readerTokens]) {
      const pttl = await admin.pttl(readerKey);
      expect(pttl).toBeGreaterThan(0);
      expect(pttl).toBeLessThanOrEqual(400);
    }
    expect(await probe.tryAcquire(key)).toBeNull();
    const startedAt = performance.now();
    const writer = await newLocker({ ttlMs: LONG_TTL_MS }).acquire(key, { waitMs: 5_000 });
    const waited = performance.now() - startedAt;
    expect(waited).toBeGreaterThan(200);
    expect(waited).toBeLessThan(1_500);
    expect(writer.fencingToken).toBeGreaterThan(ghostToken);
    expect(await admin.exists(k.readers, k.readerTokens)).toBe(0);
    expect(await writer.release()).toBe('released');
  });
});

describe('Redis read-write lock through Sentinel', () => {
  const prefix = `fencelock-rw-${run}-sentinel`;
  const primary = new Redis(SENTINEL_DATA_PORT_BASE + 1, '127.0.0.1', { lazyConnect: true });
  admins.push(primary);

  afterAll(async () => {
    const keys = await primary.keys(`${prefix}:*`);
    if (keys.length > 0) await primary.del(...keys);
  });

  it("readers' tokens carry the failover epoch and rise with the writers'", async () => {
    const key = 'rw:sentinel';
    const make = () => {
      const locker = createLocker(`${SENTINEL_URL}?prefix=${prefix}`, { ttlMs: 5_000 });
      lockers.push(locker);
      return locker;
    };
    const [a, b, c] = [make(), make(), make()];
    const r1 = await a.acquire(key, { mode: 'read' });
    const r2 = await b.acquire(key, { mode: 'read' });
    expect(r2.fencingToken).toBeGreaterThan(r1.fencingToken);
    // The token is `epoch × 2^53 + counter`; the counter is what the readers' hash holds.
    const k = ((await a.backend()) as RedisBackend).keysOf(key);
    expect(await primary.hget(k.readerTokens, r1.owner)).toBe(String(counterOf(r1.fencingToken)));
    const writing = c.acquire(key, { waitMs: 10_000 });
    expect(await settledWithin(writing, 300)).toBe(false);
    expect((await c.inspect(key)).holder?.fencingToken).toBe(r1.fencingToken);
    expect(await r1.release()).toBe('released');
    expect(await r2.release()).toBe('released');
    const writer = await writing;
    expect(writer.fencingToken).toBeGreaterThan(r2.fencingToken);
    expect(await writer.release()).toBe('released');
  });
});

function byToken(a: { token: bigint }, b: { token: bigint }): number {
  return a.token < b.token ? -1 : a.token > b.token ? 1 : 0;
}
