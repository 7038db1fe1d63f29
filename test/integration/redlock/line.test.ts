/**
 * Redlock: waiters stand in a line per key on every node, ordered by the place each contender
 * chose at its first attempt, and a free key goes to the head of the line (grant-on-node.lua);
 * a release publishes the head on every node (release-watch.ts). Each client below has its own
 * backend (its own connections), as separate processes would have. Before the line, a releasing
 * client took the key straight back while the others slept their backoff: with 16 clients
 * looping on one key, some were never granted.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import { grantOnNodeScript } from '../../../packages/fencelock/src/backends/redlock/scripts.js';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/waiting-line.js';
import {
  createLocker,
  type Lease,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';
import { expectFairTurns, takeTurns } from '../../helpers/turns.js';

const prefix = `fencelock-it-redlock-line-${randomBytes(4).toString('hex')}`;
const admins = REDLOCK_NODE_URLS.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
const opened: Locker[] = [];

afterAll(async () => {
  await Promise.all(opened.map((locker) => locker.close()));
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
});

/** A locker on its own backend (its own connections), as a separate process would have. */
function client(): { locker: Locker; backend: RedlockBackend } {
  const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
  const locker = createLocker(backend);
  opened.push(locker);
  return { locker, backend };
}

/** The line of `key` on every node, head first. */
function lines(backend: RedlockBackend, key: string): Promise<string[][]> {
  return Promise.all(admins.map((admin) => admin.zrange(backend.keysOf(key).queue, '0', '-1')));
}

describe('Redlock: a line of waiters per key on every node', () => {
  it('16 clients looping on one key: every client granted, turns alternate, tokens rise', async () => {
    const key = `line:loop:${randomUUID()}`;
    const clients = Array.from({ length: 16 }, () => client());
    // Every client connected before the loop starts.
    await Promise.all(
      clients.map(async ({ locker }) => (await locker.acquire(`warm:${randomUUID()}`)).release()),
    );
    const tokens: bigint[] = [];
    const stop = new AbortController();
    const watching = (async () => {
      // The tokens in grant order, read from the nodes' holder as it changes.
      const observer = clients[0]!.locker;
      let last = 0n;
      while (!stop.signal.aborted) {
        const holder = (await observer.inspect(key)).holder;
        if (holder && holder.fencingToken !== last) {
          tokens.push(holder.fencingToken);
          last = holder.fencingToken;
        }
        await delay(1);
      }
    })();
    const turns = await takeTurns(
      clients.map((c) => c.locker),
      key,
      { durationMs: 4_000, holdMs: 2, ttlMs: 10_000, waitMs: 20_000 },
    );
    stop.abort();
    await watching;
    expectFairTurns(turns);
    expect(turns.grants.length).toBeGreaterThan(50);
    expect(tokens.length).toBeGreaterThan(10);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
    expect(await lines(clients[0]!.backend, key)).toEqual(REDLOCK_NODE_URLS.map(() => []));
  }, 30_000);

  it('grants waiters in arrival order, each with a larger token; a releaser waits its turn', async () => {
    const key = `line:order:${randomUUID()}`;
    const holder = client().locker;
    const held = await holder.acquire(key);
    // Two waiters share a locker: the release message must wake the right one of them.
    const shared = client().locker;
    const waiters = [client().locker, shared, client().locker, shared, holder];
    const order: number[] = [];
    const tokens: bigint[] = [];
    const done: Promise<void>[] = [];
    for (const [i, locker] of waiters.entries()) {
      done.push(
        locker.acquire(key, { waitMs: 10_000 }).then(async (lease: Lease) => {
          order.push(i);
          tokens.push(lease.fencingToken);
          await delay(5);
          await lease.release();
        }),
      );
      // Each waiter's place (its first attempt's clock) is after the one before.
      await delay(40);
    }
    expect(await held.release()).toBe('released');
    await Promise.all(done);
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(tokens[0]! > held.fencingToken).toBe(true);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
  });

  it('a single attempt never joins the line and does not take a free key from a waiter', async () => {
    const key = `line:single:${randomUUID()}`;
    const { locker: a, backend } = client();
    const held = await a.acquire(key);
    expect(await client().locker.tryAcquire(key)).toBeNull();
    expect(await lines(backend, key)).toEqual(REDLOCK_NODE_URLS.map(() => []));
    const waiting = client().locker.acquire(key, { waitMs: 10_000 });
    await delay(100);
    expect((await lines(backend, key)).map((line) => line.length)).toEqual([1, 1, 1, 1, 1]);
    await held.release();
    const lease = await waiting;
    expect(await lines(backend, key)).toEqual(REDLOCK_NODE_URLS.map(() => []));
    await lease.release();
    const single = await client().locker.tryAcquire(key);
    expect(single).not.toBeNull();
    await single?.release();
  });

  it('a waiter that times out leaves the line on every node: the next one is granted promptly', async () => {
    const key = `line:timeout:${randomUUID()}`;
    const { locker: a, backend } = client();
    const held = await a.acquire(key);
    const gaveUp = client()
      .locker.acquire(key, { waitMs: 150 })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    await delay(30);
    const waiting = client().locker.acquire(key, { waitMs: 10_000 });
    expect(await gaveUp).toBeInstanceOf(LockTimeoutError);
    await delay(50);
    expect((await lines(backend, key)).map((line) => line.length)).toEqual([1, 1, 1, 1, 1]);
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    // Without the withdrawal the quitter's entries would hold the line for QUEUE_ENTRY_TTL_MS.
    expect(performance.now() - releasedAt).toBeLessThan(QUEUE_ENTRY_TTL_MS / 4);
    await lease.release();
  });

  it('different heads on different nodes do not block: the majority’s head is granted', async () => {
    const key = `line:split:${randomUUID()}`;
    const { locker, backend } = client();
    const k = backend.keysOf(key);
    // A waiter of a process that died after its first attempt reached two nodes only, with the
    // earliest place: it is head there until its entries expire.
    const ghost = randomBytes(16).toString('hex');
    for (const admin of admins.slice(0, 2)) {
      // It found the key held there, so it joined the line; the holder is gone since.
      await admin.set(k.lock, `${'f'.repeat(32)}:1`, 'PX', 60_000);
      const reply = await grantOnNodeScript.run(
        admin,
        [k.lock, k.fence, k.queue, k.waiters],
        [ghost, 10_000, 15_000, QUEUE_ENTRY_TTL_MS, 1],
      );
      expect(reply[0]).toBe(0);
      await admin.del(k.lock);
    }
    expect((await lines(backend, key)).map((line) => line.length)).toEqual([1, 1, 0, 0, 0]);
    const startedAt = performance.now();
    const lease = await locker.acquire(key, { waitMs: 10_000 });
    // Granted by the three nodes where it is head, well before the ghost's entries expire.
    expect(performance.now() - startedAt).toBeLessThan(QUEUE_ENTRY_TTL_MS / 2);
    expect((await locker.inspect(key)).holder?.owner).toBe(lease.owner);
    await lease.release();
  });
});
