/**
 * Read-write locks on Redlock (5 nodes): readers share the key, a writer is alone, each grant
 * voted on by a majority (a read majority and a write majority share a node, where the two
 * cannot both be granted). One line per key on every node, by ticket: a reader that arrives
 * after a queued writer waits for it, readers ahead of a writer go together. Waiting is
 * event-driven with no herd: a writer's release wakes the readers at the head of the line (each
 * by its owner id) and nobody behind the next writer; the last reader's release wakes the writer
 * at the head; both well under the 0.5 s recheck with a 30 s TTL. Every grant gets its own
 * fencing token, rising in grant order. A crashed reader's grant ends by its TTL.
 *
 * Downgrade and upgrade: the rules of test/integration/rwlock-rules.ts, with the line as seen on
 * the first node.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ReadWriteLockKeys,
  readWriteLockKeys,
} from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import {
  grantOnNodeScript,
  readGrantOnNodeScript,
  releaseOnNodeScript,
} from '../../../packages/fencelock/src/backends/redlock/scripts.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  type Lease,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';
import { settledWithin } from '../../helpers/promises.js';
import { downgradeAndUpgradeTests } from '../rwlock-rules.js';

/** Longest handoff gap that counts as event-driven: well under the 0.5 s recheck. */
const EVENT_GAP_MS = 250;
/** A TTL no grant here runs out of by itself (a handoff by expiry would take this long). */
const LONG_TTL_MS = 30_000;
/**
 * A vote settles on a majority; the nodes that answer after it are checked by polling up to this
 * long (`expect.poll` options).
 */
const NODES_SETTLE = { timeout: 2_000, interval: 10 };

const prefix = `fencelock-redlock-rw-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `rw-${label}-${randomBytes(4).toString('hex')}`;
let admins: Redis[] = [];
const lockers: Locker[] = [];
const subscribers: Redis[] = [];

beforeAll(() => {
  admins = REDLOCK_NODE_URLS.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  for (const s of subscribers) s.disconnect();
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  }
});

/** A locker on its own connections to every node (as a separate process would have). */
function newLocker(options?: LockerOptions): Locker {
  const locker = createLocker(createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix }), options);
  lockers.push(locker);
  return locker;
}

async function keysOf(locker: Locker, key: string): Promise<ReadWriteLockKeys> {
  return ((await locker.backend()) as RedlockBackend).keysOf(key);
}

type Grant = { name: string; token: bigint; at: number };

/** A contender on its own locker, recording the grant order. */
function contender(key: string, mode: LockMode, name: string, grants: Grant[]): Promise<Lease> {
  return newLocker({ ttlMs: LONG_TTL_MS })
    .acquire(key, { mode, waitMs: 30_000 })
    .then((lease) => {
      grants.push({ name, token: lease.fencingToken, at: performance.now() });
      return lease;
    });
}

/** The line of `k` on one node as `[owner, mode, token]`: its writer, its live readers by token, then its waiters by ticket (0n). */
async function lineOn(
  admin: Redis,
  k: ReadWriteLockKeys,
): Promise<[string, 'read' | 'write', bigint][]> {
  const line: [string, 'read' | 'write', bigint][] = [];
  const writer = await admin.get(k.lock);
  if (writer !== null) {
    const [owner = '', token = '0'] = writer.split(':');
    line.push([owner, 'write', BigInt(token)]);
  }
  const now = Date.now();
  const live = new Set(await admin.zrangebyscore(k.readers, `(${now}`, '+inf'));
  const tokens = await admin.hgetall(k.readerTokens);
  const readers = Object.entries(tokens)
    .filter(([owner]) => live.has(owner))
    .map(([owner, token]) => [owner, 'read', BigInt(token)] as [string, 'read', bigint]);
  line.push(...readers.sort((a, b) => (a[2] < b[2] ? -1 : 1)));
  const holders = new Set(line.map(([owner]) => owner));
  for (const owner of await admin.zrange(k.queue, '0', '-1')) {
    // A head writer keeps its entry while it holds the key: it is listed once, as the holder.
    if (holders.has(owner)) continue;
    const [expiresAt, reads] = await admin.hmget(k.waiters, owner, `${owner}:read`);
    if (Number(expiresAt ?? 0) <= now) continue;
    line.push([owner, reads === '1' ? 'read' : 'write', 0n]);
  }
  return line;
}

/** Wait until the line of `k` on every node holds `count` waiters (holders aside). */
async function waiting(k: ReadWriteLockKeys, count: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const lines = await Promise.all(admins.map((admin) => lineOn(admin, k)));
    if (lines.every((l) => l.filter(([, , token]) => token === 0n).length === count)) return;
    await delay(10);
  }
  throw new Error(`the line never held ${count} waiters`);
}

/** Record the messages published on the key's release channel of every node. */
async function listen(k: ReadWriteLockKeys): Promise<{ messages: string[][] }> {
  const messages: string[][] = admins.map(() => []);
  await Promise.all(
    admins.map(async (admin, n) => {
      const subscriber = admin.duplicate();
      subscribers.push(subscriber);
      subscriber.on('message', (_channel: string, message: string) => messages[n]!.push(message));
      await subscriber.subscribe(k.channel);
    }),
  );
  return { messages };
}

const byToken = (a: Grant, b: Grant) => (a.token < b.token ? -1 : 1);

describe('Redlock read-write lock (5 nodes)', () => {
  const dirs = new Map<string, ReadWriteLockKeys>();
  const count = async (dir: string) => (await lineOn(admins[0]!, dirs.get(dir)!)).length;
  downgradeAndUpgradeTests({
    engine: 'redlock',
    locker: (options) => newLocker(options),
    dirOf: (backend, key) => {
      const k = (backend as RedlockBackend).keysOf(key);
      dirs.set(k.lock, k);
      return k.lock;
    },
    line: (dir) => lineOn(admins[0]!, dirs.get(dir)!),
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
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect([r1, r2, r3].every((r) => r.isHeld)).toBe(true);
    expect(r2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(r3.fencingToken).toBeGreaterThan(r2.fencingToken);
    // A grant needs a majority; the other nodes' answers may still be on their way.
    for (const admin of admins) {
      await expect.poll(() => admin.zcard(k.readers), NODES_SETTLE).toBe(3);
      expect(await admin.exists(k.lock)).toBe(0);
      expect(await admin.pttl(k.readers)).toBeGreaterThan(LONG_TTL_MS - 5_000);
    }
    const info = await probe.inspect(key);
    expect(info.holder?.owner).toBe(r1.owner);
    expect(info.holder?.fencingToken).toBe(r1.fencingToken);
    expect(info.holder?.ttlMs).toBeGreaterThan(LONG_TTL_MS - 5_000);
    expect(info.lastFencingToken).toBe(r3.fencingToken);
    // A writer's single attempt fails and leaves no entry.
    expect(await probe.tryAcquire(key)).toBeNull();
    for (const admin of admins) expect(await admin.zcard(k.queue)).toBe(0);
    const r4 = await probe.tryAcquire(key, { mode: 'read' });
    expect(r4?.fencingToken).toBeGreaterThan(r3.fencingToken);
    for (const r of [r1, r2, r3, r4!]) expect(await r.release()).toBe('released');
    for (const admin of admins) {
      await expect
        .poll(() => admin.exists(k.readers, k.readerTokens, k.queue, k.waiters), NODES_SETTLE)
        .toBe(0);
    }
  });

  it('release and renew of a read grant compare owner and token; the watchdog renews it', async () => {
    const key = unique('refusals');
    const locker = newLocker();
    await locker.inspect(key);
    const backend = await locker.backend();
    const reader = await locker.acquire(key, { mode: 'read', ttlMs: 1_000 });
    const { owner, fencingToken: token } = reader;
    const stranger = randomBytes(16).toString('hex');
    expect(await backend.release({ key, owner, fencingToken: token + 1n })).toBe('not-owner');
    expect(await backend.release({ key, owner: stranger, fencingToken: token })).toBe('not-owner');
    expect(await backend.renew({ key, owner, fencingToken: token + 1n }, 10_000)).toEqual({
      ok: false,
      reason: 'not-owner',
    });
    // Past its TTL, renewed by the watchdog.
    await delay(2_500);
    expect(reader.isHeld).toBe(true);
    expect(await newLocker().tryAcquire(key)).toBeNull();
    expect(await reader.release()).toBe('released');
    expect(await backend.release({ key, owner, fencingToken: token })).toBe('not-held');
    expect(await backend.renew({ key, owner, fencingToken: token }, 10_000)).toEqual({
      ok: false,
      reason: 'not-held',
    });
  });

  it('a reader arriving after a queued writer waits for it (FIFO); the handoffs are event-driven', async () => {
    const key = unique('fifo');
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const w = contender(key, 'write', 'W', grants);
    await waiting(k, 1);
    const r3 = contender(key, 'read', 'R3', grants);
    await waiting(k, 2);
    // Only readers hold, yet R3 waits: a writer is ahead of it. A single read attempt too.
    expect(await settledWithin(Promise.race([w, r3]), 300)).toBe(false);
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    const channel = await listen(k);
    // The writer waits for every earlier reader: that release tells nobody.
    expect(await r2.release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(channel.messages.flat()).toEqual([]);
    // The last reader's release wakes the writer at once.
    const lastReaderAt = performance.now();
    expect(await r1.release()).toBe('released');
    const writer = await w;
    expect(grants.at(-1)!.at - lastReaderAt).toBeLessThan(EVENT_GAP_MS);
    expect(await settledWithin(r3, 300)).toBe(false);
    // The writer's release wakes the reader behind it at once, by its owner id.
    const writerAt = performance.now();
    expect(await writer.release()).toBe('released');
    const reader3 = await r3;
    expect(grants.at(-1)!.at - writerAt).toBeLessThan(EVENT_GAP_MS);
    await delay(100);
    for (const messages of channel.messages) {
      expect(new Set(messages)).toEqual(new Set([writer.owner, reader3.owner]));
    }
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'W', 'R3']);
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!.token).toBeGreaterThan(grants[i - 1]!.token);
    }
    expect(await reader3.release()).toBe('released');
    for (const admin of admins) {
      await expect
        .poll(
          () => admin.exists(k.lock, k.readers, k.readerTokens, k.queue, k.waiters),
          NODES_SETTLE,
        )
        .toBe(0);
    }
  });

  it("a writer's release wakes the readers at the head of the line, and nobody behind the next writer", async () => {
    const key = unique('wake');
    const grants: Grant[] = [];
    const probe = newLocker({ ttlMs: LONG_TTL_MS });
    const k = await keysOf(probe, key);
    const holder = await contender(key, 'write', 'W1', grants);
    const queued: Promise<Lease>[] = [];
    const names = [
      ['read', 'R1'],
      ['read', 'R2'],
      ['read', 'R3'],
      ['write', 'W2'],
      ['read', 'R4'],
    ] as const;
    for (const [i, [mode, name]] of names.entries()) {
      queued.push(contender(key, mode, name, grants));
      await waiting(k, i + 1);
    }
    const line = (await lineOn(admins[0]!, k)).filter(([, , t]) => t === 0n).map(([o]) => o);
    await delay(200);
    const channel = await listen(k);
    const releasedAt = performance.now();
    expect(await holder.release()).toBe('released');
    const readers = await Promise.all(queued.slice(0, 3));
    for (const g of grants.slice(1)) expect(g.at - releasedAt).toBeLessThan(EVENT_GAP_MS);
    expect(new Set(grants.slice(1).map((g) => g.name))).toEqual(new Set(['R1', 'R2', 'R3']));
    // One message per reader at the head on each node, by owner id; none for W2 or R4.
    await delay(100);
    for (const messages of channel.messages) expect(messages).toEqual(line.slice(0, 3));
    expect(await settledWithin(Promise.race(queued.slice(3)), 300)).toBe(false);
    // W2 goes once the three readers are gone (the last one's release wakes it); then R4.
    for (const r of readers.slice(0, 2)) expect(await r.release()).toBe('released');
    expect(await settledWithin(queued[3]!, 200)).toBe(false);
    const lastAt = performance.now();
    expect(await readers[2]!.release()).toBe('released');
    const w2 = await queued[3]!;
    expect(grants.at(-1)!.name).toBe('W2');
    expect(grants.at(-1)!.at - lastAt).toBeLessThan(EVENT_GAP_MS);
    expect(await w2.release()).toBe('released');
    expect(await (await queued[4]!).release()).toBe('released');
    const ordered = [grants[0]!, ...grants.slice(1, 4).sort(byToken), ...grants.slice(4)];
    for (let i = 1; i < ordered.length; i++) {
      expect(ordered[i]!.token).toBeGreaterThan(ordered[i - 1]!.token);
    }
    expect(grants.slice(4).map((g) => g.name)).toEqual(['W2', 'R4']);
  });

  it("a crashed reader's grant lapses by its TTL; a waiting writer then goes", async () => {
    const key = unique('crashed');
    const crashed = newLocker();
    const backend = await crashed.backend();
    const k = await keysOf(crashed, key);
    // The connections are up before the short grant's vote (a tenth of its TTL per node).
    await crashed.inspect(key);
    // A reader that never renews nor releases (its process died): a grant of 1 s.
    const owner = randomBytes(16).toString('hex');
    const granted = await backend.attempt({
      key,
      owner,
      ttlMs: 1_000,
      mode: 'read',
      autoRenew: false,
      willWait: false,
    });
    expect(granted.granted).toBe(true);
    const startedAt = performance.now();
    const writer = await newLocker({ ttlMs: LONG_TTL_MS }).acquire(key, { waitMs: 10_000 });
    const waitedMs = performance.now() - startedAt;
    expect(waitedMs).toBeGreaterThan(800);
    expect(waitedMs).toBeLessThan(3_000);
    expect(writer.fencingToken).toBeGreaterThan(granted.granted ? granted.token : 0n);
    expect(await writer.release()).toBe('released');
    for (const admin of admins) {
      await expect.poll(() => admin.zscore(k.readers, owner), NODES_SETTLE).toBeNull();
    }
  });

  it('a reader and a writer are never both granted when their votes race on 5 nodes', async () => {
    let both = 0;
    let readsWon = 0;
    let writesWon = 0;
    const pairs = Array.from({ length: 2 }, () => [
      newLocker({ ttlMs: LONG_TTL_MS }),
      newLocker({ ttlMs: LONG_TTL_MS }),
      newLocker({ ttlMs: LONG_TTL_MS }),
    ]);
    // The connections are up before the votes race.
    await Promise.all(pairs.flat().map((l) => l.inspect(unique('warm-up'))));
    for (let round = 0; round < 30; round++) {
      const key = unique(`race-${round}`);
      const [a, b, c] = pairs[round % pairs.length]!;
      // Two readers and a writer start their votes at once (the writer first in odd rounds); the
      // nodes see them in any order.
      const writing = () => b!.tryAcquire(key);
      const w0 = round % 2 === 1 ? writing() : undefined;
      const [r1, w, r2] = await Promise.all([
        a!.tryAcquire(key, { mode: 'read' }),
        w0 ?? writing(),
        c!.tryAcquire(key, { mode: 'read' }),
      ]);
      const readers = [r1, r2].filter((r) => r !== null);
      if (w !== null && readers.length > 0) both++;
      if (w !== null) writesWon++;
      if (readers.length > 0) readsWon++;
      for (const lease of [r1, w, r2]) if (lease !== null) await lease.release();
    }
    console.info(`redlock rw race: ${readsWon} rounds to readers, ${writesWon} to the writer`);
    expect(both).toBe(0);
    expect(readsWon + writesWon).toBeGreaterThan(0);
  });

  it('a split vote: a writer granted on two nodes and a reader on two others; the fifth decides, never both', async () => {
    const locker = newLocker();
    await locker.inspect(unique('warm-up'));
    const backend = (await locker.backend()) as RedlockBackend;
    for (let round = 0; round < 10; round++) {
      const key = unique(`split-${round}`);
      const k = backend.keysOf(key);
      const keys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
      const writer = randomBytes(16).toString('hex');
      const reader = randomBytes(16).toString('hex');
      // The two votes reached the first two and the last two nodes in opposite orders.
      for (const admin of admins.slice(0, 2)) {
        expect(
          (await grantOnNodeScript.run(admin, keys, [writer, 10_000, 20_000, '0', 0]))[0],
        ).toBe(1);
      }
      for (const admin of admins.slice(3)) {
        expect(
          (await readGrantOnNodeScript.run(admin, keys, [reader, 10_000, 20_000, '0', 0, '']))[0],
        ).toBe(1);
      }
      const request = (owner: string, mode: LockMode) =>
        ({ key, owner, ttlMs: 10_000, mode, autoRenew: false, willWait: false }) as const;
      const results = await Promise.all(
        round % 2 === 0
          ? [backend.attempt(request(writer, 'write')), backend.attempt(request(reader, 'read'))]
          : [
              backend.attempt(request(reader, 'read')),
              backend.attempt(request(writer, 'write')),
            ].reverse(),
      );
      const granted = results.filter((r) => r.granted);
      expect(granted).toHaveLength(1);
      // The loser was withdrawn on every node: the winner holds the key alone.
      const info = await locker.inspect(key);
      const winner = results[0]!.granted ? writer : reader;
      expect(info.holder?.owner).toBe(winner);
      for (const admin of admins) {
        expect(await admin.get(k.lock).then((v) => v?.startsWith(reader) ?? false)).toBe(false);
        expect(await admin.zscore(k.readers, writer)).toBeNull();
        if (winner === reader) expect(await admin.exists(k.lock)).toBe(0);
        else expect(await admin.zscore(k.readers, reader)).toBeNull();
      }
      const lease = {
        key,
        owner: winner,
        fencingToken: granted[0]!.granted ? granted[0]!.token : 0n,
      };
      expect(await backend.release(lease)).toBe('released');
    }
  });

  describe('scripts on one node', () => {
    const node = () => admins[0]!;
    const keysFor = (label: string) => readWriteLockKeys(prefix, unique(label));
    const grantKeys = (k: ReadWriteLockKeys) =>
      [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
    const read = (k: ReadWriteLockKeys, who: string, ticket: string, heldWriter = '') =>
      readGrantOnNodeScript.run(node(), grantKeys(k), [
        who,
        10_000,
        20_000,
        ticket,
        2_000,
        heldWriter,
      ]);
    const write = (k: ReadWriteLockKeys, who: string, ticket: string) =>
      grantOnNodeScript.run(node(), grantKeys(k), [who, 10_000, 20_000, ticket, 2_000]);

    it('a reader goes past readers ahead of it but not past a writer; a writer waits for live readers', async () => {
      const k = keysFor('lua-read');
      const r1 = await read(k, 'r1', '100');
      expect(r1[0]).toBe(1);
      // A writer waits for the reader, standing in line; its reply bounds the wait by the reader's TTL.
      const w = await write(k, 'w', '200');
      expect(w[0]).toBe(0);
      expect(w[1]).toBeGreaterThan(9_000);
      // A reader with an earlier ticket than the writer goes; one with a later ticket waits.
      expect((await read(k, 'r2', '150'))[0]).toBe(1);
      expect(await read(k, 'r3', '300')).toEqual([0, expect.any(Number)]);
      expect(await node().zrange(k.queue, '0', '-1')).toEqual(['w', 'r3']);
      expect(await node().hget(k.waiters, 'r3:read')).toBe('1');
      // A downgrade blocked by another writer: -2, and nothing of it stays.
      expect(await read(k, 'd', '0', 'someone')).toEqual([-2]);
      expect(await node().zscore(k.readers, 'd')).toBeNull();
      // The first reader's release wakes nobody; the last one's wakes the writer only.
      const messages = await listen(k);
      expect(
        await releaseOnNodeScript.run(
          node(),
          [k.lock, k.queue, k.waiters, k.channel, k.readers, k.readerTokens],
          ['r1', String(r1[1])],
        ),
      ).toBe(1);
      const r2Token = await node().hget(k.readerTokens, 'r2');
      expect(
        await releaseOnNodeScript.run(
          node(),
          [k.lock, k.queue, k.waiters, k.channel, k.readers, k.readerTokens],
          ['r2', r2Token!],
        ),
      ).toBe(1);
      await delay(50);
      expect(messages.messages[0]).toEqual(['w']);
      expect((await write(k, 'w', '200'))[0]).toBe(1);
    });
  });
});
