/**
 * Fair waiting on Redlock: waiters line up per key on every node in the order they started
 * waiting (`scripts/line.lua`), a release wakes only the head (its id on the key's channel of
 * every node), a releaser that asks again at once goes to the back, a single attempt never joins
 * the line, and a waiter that gives up leaves it at once.
 */
import { randomBytes } from 'node:crypto';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/waiting-line.js';
import {
  type AcquireEvent,
  CHANNELS,
  createLocker,
  type Lease,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';
import { closedPort } from '../../helpers/ports.js';

const prefix = `fencelock-redlock-fair-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
let admins: Redis[];
const lockers: Locker[] = [];

/** A locker on its own connections to every node (as a separate process would have). */
function newLocker(nodes: readonly string[] = REDLOCK_NODE_URLS): {
  locker: Locker;
  backend: RedlockBackend;
} {
  const backend = createRedlockBackend({ nodes, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  return { locker, backend };
}

/** How many entries the key's line has on each node. */
function lineLengths(backend: RedlockBackend, key: string): Promise<number[]> {
  return Promise.all(admins.map((admin) => admin.zcard(backend.keysOf(key).queue)));
}

beforeAll(() => {
  admins = REDLOCK_NODE_URLS.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  }
});

/** Attempts each granted acquire of `key` made, by owner, while `body` runs. */
async function countingAttempts(
  key: string,
  body: (attempts: Map<string, number>) => Promise<void>,
): Promise<void> {
  const attempts = new Map<string, number>();
  const onAcquire = (message: unknown) => {
    const event = message as AcquireEvent;
    if (event.key === key && event.outcome === 'granted') attempts.set(event.owner, event.attempts);
  };
  subscribe(CHANNELS.acquire, onAcquire);
  try {
    await body(attempts);
  } finally {
    unsubscribe(CHANNELS.acquire, onAcquire);
  }
}

describe('fair waiting (Redlock, 5 nodes)', () => {
  it('grants waiters in the order they started waiting, each woken once by a release', async () => {
    const key = unique('order');
    await countingAttempts(key, async (attempts) => {
      const holder = newLocker().locker;
      const held = await holder.acquire(key);
      // Two waiters share a locker: the release message must wake the right one of them.
      const shared = newLocker().locker;
      const waiterLockers = [newLocker().locker, shared, newLocker().locker, shared, holder];
      const order: number[] = [];
      const tokens: bigint[] = [];
      const owners: string[] = [];
      const done: Promise<void>[] = [];
      for (const [i, locker] of waiterLockers.entries()) {
        done.push(
          locker.acquire(key, { waitMs: 10_000 }).then(async (lease: Lease) => {
            order.push(i);
            tokens.push(lease.fencingToken);
            owners.push(lease.owner);
            await delay(5);
            await lease.release();
          }),
        );
        // Each waiter's first attempt reaches the nodes before the next one starts.
        await delay(40);
      }
      expect(await held.release()).toBe('released');
      await Promise.all(done);
      expect(order).toEqual([0, 1, 2, 3, 4]);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
      expect(tokens[0]! > held.fencingToken).toBe(true);
      // A waiter attempts when it starts, when a node first confirms its subscription (each node
      // may end one wait so), and when a release names it: no polling in between (the later
      // waiters waited 40 to 200 ms; without the subscriptions they attempted 45 times).
      for (const owner of owners) {
        expect(attempts.get(owner)).toBeLessThanOrEqual(2 + REDLOCK_NODE_URLS.length);
      }
    });
  });

  it('with two of five nodes down, a waiter still waits for the release message', async () => {
    const key = unique('nodes-down');
    const down = await Promise.all([closedPort(), closedPort()]);
    const nodes = [...REDLOCK_NODE_URLS.slice(0, 3), ...down.map((p) => `redis://127.0.0.1:${p}`)];
    await countingAttempts(key, async (attempts) => {
      const held = await newLocker(nodes).locker.acquire(key);
      const waiting = newLocker(nodes).locker.acquire(key, { waitMs: 10_000 });
      await delay(300);
      await held.release();
      const lease = await waiting;
      // The subscriptions on the nodes that are down stay queued: they neither end a wait nor
      // keep failing (before, each wait ended at once and the waiter attempted again and again).
      expect(attempts.get(lease.owner)).toBeLessThanOrEqual(2 + 3);
      await lease.release();
    });
  });

  it('a releaser that asks again at once goes behind the waiter already in line', async () => {
    const key = unique('regrab');
    const a = newLocker().locker;
    const b = newLocker().locker;
    const first = await a.acquire(key);
    const grants: string[] = [];
    const waiting = b.acquire(key, { waitMs: 10_000 }).then(async (lease) => {
      grants.push('b');
      await delay(20);
      await lease.release();
    });
    await delay(50);
    await first.release();
    // Sent right after the release, on the releaser's own connections: without the line it would
    // find the key free on every node before b's attempt arrives.
    const again = await a.acquire(key, { waitMs: 10_000 });
    grants.push('a');
    await again.release();
    await waiting;
    expect(grants).toEqual(['b', 'a']);
  });

  it('tryAcquire never joins the line and does not jump it', async () => {
    const key = unique('try');
    const { locker: a, backend } = newLocker();
    const b = newLocker().locker;
    const c = newLocker().locker;
    const held = await a.acquire(key);
    expect(await b.tryAcquire(key)).toBeNull();
    expect(await lineLengths(backend, key)).toEqual([0, 0, 0, 0, 0]);
    // A waiter is in line; the key is then free only for it, not for a single attempt.
    const waiting = c.acquire(key, { waitMs: 10_000 });
    await delay(50);
    expect(await lineLengths(backend, key)).toEqual([1, 1, 1, 1, 1]);
    await held.release();
    const lease = await waiting;
    expect(await b.tryAcquire(key)).toBeNull();
    await lease.release();
    // The holder kept its entry while it held the key; its release took it out everywhere.
    expect(await lineLengths(backend, key)).toEqual([0, 0, 0, 0, 0]);
    const single = await b.tryAcquire(key);
    expect(single).not.toBeNull();
    await single?.release();
  });

  it('a waiter that times out leaves the line at once: the next one is granted promptly', async () => {
    const key = unique('timeout');
    const { locker: a, backend } = newLocker();
    const quitter = newLocker().locker;
    const next = newLocker().locker;
    const held = await a.acquire(key);
    const gaveUp = quitter.acquire(key, { waitMs: 150 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await delay(30);
    const waiting = next.acquire(key, { waitMs: 10_000 });
    expect(await gaveUp).toBeInstanceOf(LockTimeoutError);
    await delay(50);
    expect(await lineLengths(backend, key)).toEqual([1, 1, 1, 1, 1]);
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    // Without the withdrawal the quitter's entry would hold the line for QUEUE_ENTRY_TTL_MS.
    expect(performance.now() - releasedAt).toBeLessThan(QUEUE_ENTRY_TTL_MS / 4);
    await lease.release();
  });
});
