/**
 * The one-hop handoff on single-node Redis: a release grants the key to the head of the line in
 * its own script and tells it by pub/sub, and the waiter holds the key on receipt, with no
 * attempt of its own, then renews it to its full TTL. Also what must not go wrong around it: a
 * head that vanished costs the short first TTL, a waiter that gives up as the key is handed to it
 * passes it on, a lost message is made good by the waiter's next attempt, and owner-addressed
 * grants are confirmed before they are answered.
 */
import { randomBytes } from 'node:crypto';
import diagnostics_channel from 'node:diagnostics_channel';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedisBackend,
  type RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  queuedAbandonScript,
  queuedAcquireScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { QUEUE_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/waiting-line.js';
import {
  type AcquireEvent,
  CHANNELS,
  createLocker,
  type Locker,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';

const prefix = `fencelock-handoff-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
let admin: Redis;
const lockers: Locker[] = [];
const clients: Redis[] = [];

/** The attempts each granted acquire made, by owner (the `acquire` event's `attempts`). */
const attemptsOf = new Map<string, number>();
function onAcquire(message: unknown): void {
  const event = message as AcquireEvent;
  if (event.outcome === 'granted' && event.key.startsWith('handoff-')) {
    attemptsOf.set(event.owner, event.attempts);
  }
}

interface Contender {
  readonly locker: Locker;
  readonly backend: RedisBackend;
  /** Acquire scripts this contender's connection has sent so far. */
  readonly attempts: () => number;
}

/**
 * A locker on its own connections (as a separate process would have), named `name` in CLIENT
 * LIST, counting the acquire scripts it sends.
 */
function newLocker(name = unique('handoff-client')): Contender {
  const client = new Redis(REDIS_URL, { connectionName: name });
  let attempts = 0;
  const evalsha = client.evalsha.bind(client) as (...a: unknown[]) => Promise<unknown>;
  (client as unknown as { evalsha: unknown }).evalsha = (...a: unknown[]) => {
    if (a[0] === queuedAcquireScript.sha1) attempts += 1;
    return evalsha(...a);
  };
  const backend = createRedisBackend({ client, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  clients.push(client);
  return { locker, backend, attempts: () => attempts };
}

/**
 * Wait until `contender` has made its two attempts before waiting in line: the first (which
 * queues it) and the one after its subscription to the key's channel is confirmed (the first
 * wait on a channel ends there). From then on it attempts again only every 0.5 s.
 */
async function waitingInLine(contender: Contender): Promise<void> {
  for (let i = 0; i < 200 && contender.attempts() < 2; i++) await delay(5);
  expect(contender.attempts()).toBe(2);
}

/** Wait until the key's line holds `count` entries (each waiter's first attempt has run). */
async function lineLength(backend: RedisBackend, key: string, count: number): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if ((await admin.llen(backend.keysOf(key).queue)) === count) return;
    await delay(10);
  }
  throw new Error(`the line of ${key} never held ${count} entries`);
}

beforeAll(() => {
  admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  diagnostics_channel.subscribe(CHANNELS.acquire, onAcquire);
});

afterAll(async () => {
  diagnostics_channel.unsubscribe(CHANNELS.acquire, onAcquire);
  await Promise.all(lockers.map((l) => l.close()));
  for (const client of clients) client.disconnect();
  const keys = await admin.keys(`${prefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

describe('one-hop handoff (Redis, single node)', () => {
  it('grants each head of the line on the release message, in order, with no second attempt', async () => {
    const key = unique('handoff-order');
    const { locker: holder, backend } = newLocker();
    const held = await holder.acquire(key, { ttlMs: 10_000 });
    const waiters = [newLocker(), newLocker(), newLocker()];
    const order: number[] = [];
    const leases: { owner: string; token: bigint; ttlMs: number; pttl: number }[] = [];
    const done: Promise<void>[] = [];
    for (const [i, waiter] of waiters.entries()) {
      const acquired = waiter.locker.acquire(key, { ttlMs: 10_000, waitMs: 10_000 });
      done.push(
        acquired.then(async (lease) => {
          order.push(i);
          // The grant counts from the message with its short first TTL until the confirmation.
          const firstTtlMs = lease.ttlMs;
          await delay(60);
          leases.push({
            owner: lease.owner,
            token: lease.fencingToken,
            ttlMs: firstTtlMs,
            pttl: await admin.pttl(backend.keysOf(key).lock),
          });
          expect(lease.ttlMs).toBe(10_000);
          await lease.release();
        }),
      );
      await waitingInLine(waiter);
    }
    expect(await backend.inspect(key)).toMatchObject({ holder: { owner: held.owner } });
    expect(await held.release()).toBe('released');
    await Promise.all(done);
    expect(order).toEqual([0, 1, 2]);
    // Each was granted by the release before it: no attempt after its two in line.
    expect(waiters.map((w) => w.attempts())).toEqual([2, 2, 2]);
    let previous = held.fencingToken;
    for (const lease of leases) {
      expect(attemptsOf.get(lease.owner)).toBe(2);
      expect(lease.ttlMs).toBe(QUEUE_ENTRY_TTL_MS);
      // Confirmed to the full TTL at once.
      expect(lease.pttl).toBeGreaterThan(QUEUE_ENTRY_TTL_MS);
      expect(lease.token > previous).toBe(true);
      previous = lease.token;
    }
    expect(await admin.exists(backend.keysOf(key).queue, backend.keysOf(key).waiters)).toBe(0);
  });

  it('with autoRenew: false the handed grant is still confirmed once to ttlMs', async () => {
    const key = unique('handoff-norenew');
    const { locker: holder, backend } = newLocker();
    const held = await holder.acquire(key);
    const waiter = newLocker();
    const waiting = waiter.locker.acquire(key, { ttlMs: 6_000, autoRenew: false, waitMs: 10_000 });
    await waitingInLine(waiter);
    await held.release();
    const lease = await waiting;
    expect(waiter.attempts()).toBe(2);
    await delay(100);
    expect(lease.ttlMs).toBe(6_000);
    expect(await admin.pttl(backend.keysOf(key).lock)).toBeGreaterThan(5_000);
    expect(lease.remainingMs).toBeGreaterThan(5_000);
    expect(await lease.release()).toBe('released');
  });

  it('a head that vanished after joining the line costs its short first TTL, then the next waiter gets the key', async () => {
    const key = unique('handoff-vanished');
    const { locker: holder, backend } = newLocker();
    const k = backend.keysOf(key);
    const held = await holder.acquire(key);
    // The waiter of a process that died: it queued once (asking for 600 ms) and never comes back.
    const ghost = randomBytes(16).toString('hex');
    const reply = await queuedAcquireScript.run(
      admin,
      [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
      [ghost, 600, QUEUE_ENTRY_TTL_MS, 5_600],
    );
    expect(reply[0]).toBe(0);
    const { locker: next } = newLocker();
    const waiting = next.acquire(key, { waitMs: 10_000 });
    await lineLength(backend, key, 2);
    const releasedAt = performance.now();
    await held.release();
    // The release handed the key to the ghost, for the TTL it asked for.
    const handed = await holder.inspect(key);
    expect(handed.holder?.owner).toBe(ghost);
    expect(handed.holder?.ttlMs).toBeLessThanOrEqual(600);
    const lease = await waiting;
    const waitedMs = performance.now() - releasedAt;
    // 600 ms of the ghost's grant, then the next waiter's recheck (every 500 ms at most).
    expect(waitedMs).toBeGreaterThan(500);
    expect(waitedMs).toBeLessThan(600 + 500 + 400);
    expect(lease.fencingToken > (handed.holder?.fencingToken ?? 0n)).toBe(true);
    await lease.release();
  });

  it('a waiter that gives up as the key is handed to it passes the key on to the next', async () => {
    const key = unique('handoff-abandon');
    const { locker: holder, backend } = newLocker();
    const k = backend.keysOf(key);
    const handOffKeys = [
      k.lock,
      k.fence,
      k.channel,
      k.queue,
      k.waiters,
      k.readers,
      k.readerTokens,
    ] as const;
    const held = await holder.acquire(key);
    const quitter = randomBytes(16).toString('hex');
    await queuedAcquireScript.run(
      admin,
      [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
      [quitter, 10_000, QUEUE_ENTRY_TTL_MS, 15_000],
    );
    const next = newLocker();
    const waiting = next.locker.acquire(key, { waitMs: 10_000 });
    await waitingInLine(next);
    await held.release();
    expect((await holder.inspect(key)).holder?.owner).toBe(quitter);
    // Its withdrawal lands after the handoff: it deletes the handed grant and hands it on.
    expect(
      await queuedAbandonScript.run(admin, handOffKeys, [quitter, '0', QUEUE_ENTRY_TTL_MS, 5_000]),
    ).toBe(1);
    const lease = await waiting;
    expect(next.attempts()).toBe(2);
    expect((await holder.inspect(key)).holder?.owner).toBe(lease.owner);
    expect(await lease.release()).toBe('released');
    expect((await holder.inspect(key)).holder).toBeNull();
    expect(await admin.exists(k.queue, k.waiters)).toBe(0);
  });

  it('an acquire aborted as the release hands it the key leaves nothing locked', async () => {
    const key = unique('handoff-race');
    const { locker: holder, backend } = newLocker();
    const held = await holder.acquire(key);
    const quitter = newLocker();
    const controller = new AbortController();
    const gaveUp = quitter.locker.acquire(key, { waitMs: 10_000, signal: controller.signal }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await waitingInLine(quitter);
    const next = newLocker();
    const waiting = next.locker.acquire(key, { waitMs: 10_000 });
    await waitingInLine(next);
    await lineLength(backend, key, 2);
    const releasedAt = performance.now();
    const released = held.release();
    controller.abort(new Error('the caller gave up'));
    expect(await released).toBe('released');
    expect(await gaveUp).toBeInstanceOf(LockTimeoutError);
    const lease = await waiting;
    // Handed on by the quitter's withdrawal, not found by a poll after the short TTL.
    expect(performance.now() - releasedAt).toBeLessThan(QUEUE_ENTRY_TTL_MS / 4);
    expect(next.attempts()).toBe(2);
    expect(await lease.release()).toBe('released');
    expect((await holder.inspect(key)).holder).toBeNull();
    expect(await admin.exists(backend.keysOf(key).queue)).toBe(0);
  });

  it("a lost release message is made good by the waiter's next attempt, with the handed token", async () => {
    const key = unique('handoff-lost');
    const { locker: holder } = newLocker();
    const held = await holder.acquire(key);
    const name = unique('handoff-deaf');
    const waiter = newLocker(name);
    const waiting = waiter.locker.acquire(key, { waitMs: 10_000 });
    await waitingInLine(waiter);
    // Drop the waiter's subscriber connection: the release message is published to nobody.
    const list = (await admin.client('LIST')) as string;
    const subscriber = list
      .split('\n')
      .find((line) => line.includes(` name=${name} `) && / sub=[1-9]/.test(line));
    expect(subscriber).toBeDefined();
    const id = /(?:^| )id=(\d+)/.exec(subscriber ?? '')?.[1] ?? '';
    await admin.client('KILL', 'ID', id);
    const releasedAt = performance.now();
    await held.release();
    const handed = (await holder.inspect(key)).holder;
    expect(handed).not.toBeNull();
    const lease = await waiting;
    const waitedMs = performance.now() - releasedAt;
    expect(lease.owner).toBe(handed?.owner);
    expect(lease.fencingToken).toBe(handed?.fencingToken);
    // Its recheck (every 500 ms at most) came before the handed grant's first TTL ran out.
    expect(waitedMs).toBeLessThan(QUEUE_ENTRY_TTL_MS);
    expect(waiter.attempts()).toBe(3);
    expect(attemptsOf.get(lease.owner)).toBe(3);
    expect(await lease.release()).toBe('released');
  });

  it('an owner-addressed waiter is answered with the handed grant confirmed to its ttlMs', async () => {
    const key = unique('handoff-owner');
    const { locker: holder, backend } = newLocker();
    const held = await holder.acquire(key);
    const sidecarContender = newLocker();
    const sidecar = sidecarContender.locker;
    const owner = randomBytes(16).toString('hex');
    const waiting = sidecar.acquireForOwner(key, owner, { ttlMs: 8_000, waitMs: 10_000 });
    await waitingInLine(sidecarContender);
    await held.release();
    const grant = await waiting;
    expect(grant?.ttlMs).toBe(8_000);
    expect(sidecarContender.attempts()).toBe(2);
    expect(await admin.pttl(backend.keysOf(key).lock)).toBeGreaterThan(7_000);
    expect((await holder.inspect(key)).holder?.fencingToken).toBe(grant?.fencingToken);
    expect(
      await sidecar.releaseForOwner({ key, owner, fencingToken: grant?.fencingToken ?? 0n }),
    ).toBe('released');
  });
});
