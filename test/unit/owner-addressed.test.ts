/**
 * Owner-addressed operations of the Locker (`acquireForOwner`, `tryAcquireForOwner`,
 * `renewForOwner`, `releaseForOwner`): grants to a caller-chosen owner that the process does
 * not track, renewed and released by key, owner and fencing token. Real timers, an in-memory
 * backend built from the contract.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type AcquireEvent,
  CHANNELS,
  createLocker,
  InvalidArgumentError,
  type Locker,
  LockTimeoutError,
  type ReleaseEvent,
  type RenewEvent,
  type WaitEvent,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const A = 'a'.repeat(32);
const B = 'b'.repeat(32);

const lockers: Locker[] = [];
function lockerOn(backend: MemoryBackend, options = {}): Locker {
  const locker = createLocker(backend, options);
  lockers.push(locker);
  return locker;
}
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Record every event of `channel` until the returned stop function is called. */
function record<T>(channel: string): { events: T[]; stop: () => void } {
  const events: T[] = [];
  const fn = (message: unknown) => events.push(message as T);
  diagnostics_channel.subscribe(channel, fn);
  return { events, stop: () => diagnostics_channel.unsubscribe(channel, fn) };
}

describe('acquireForOwner / tryAcquireForOwner', () => {
  it('grants to the given owner and keeps nothing in the process', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const grant = await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    expect(grant).toEqual({ key: 'k', owner: A, fencingToken: 1n, ttlMs: 5000 });
    expect(backend.entries.get('k')?.owner).toBe(A);
    expect(locker.activeLeases).toBe(0);
    // No watchdog: nothing renews it.
    await sleep(100);
    expect(backend.calls.renew).toBeUndefined();
    // close() does not release it: it ends by its TTL (or an owner-addressed release).
    await locker.close();
    expect(backend.calls.release).toBeUndefined();
    expect(backend.entries.get('k')?.owner).toBe(A);
  });

  it('rounds a fractional ttlMs up, as acquire does', async () => {
    const backend = new MemoryBackend();
    const grant = await lockerOn(backend).tryAcquireForOwner('k', A, { ttlMs: 123.45 });
    expect(grant?.ttlMs).toBe(124);
  });

  it('answers a repeated acquire by the holder with the same token and a fresh TTL', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const first = await locker.acquireForOwner('k', A, { ttlMs: 200 });
    await sleep(120);
    const again = await locker.tryAcquireForOwner('k', A, { ttlMs: 1000 });
    expect(again).toEqual({ key: 'k', owner: A, fencingToken: first.fencingToken, ttlMs: 1000 });
    await sleep(150); // past the first TTL: the second one holds
    expect((await locker.inspect('k')).holder?.owner).toBe(A);
  });

  it('tryAcquireForOwner answers null while another owner holds the key', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    await expect(locker.tryAcquireForOwner('k', B, { ttlMs: 5000 })).resolves.toBeNull();
    expect(backend.entries.get('k')?.owner).toBe(A);
  });

  it('acquireForOwner waits for the holder and times out at waitMs', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    const error = await locker
      .acquireForOwner('k', B, { ttlMs: 5000, waitMs: 100 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(backend.entries.get('k')?.owner).toBe(A);
  });

  it('acquireForOwner is granted once the holder releases, with the next token', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const first = await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    const waiting = locker.acquireForOwner('k', B, { ttlMs: 5000, waitMs: 5000 });
    await sleep(50);
    await expect(
      locker.releaseForOwner({ key: 'k', owner: A, fencingToken: first.fencingToken }),
    ).resolves.toBe('released');
    const second = await waiting;
    expect(second).toEqual({ key: 'k', owner: B, fencingToken: 2n, ttlMs: 5000 });
  });

  it('stops waiting when its signal aborts, and when the locker closes', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    const controller = new AbortController();
    const aborted = locker.acquireForOwner('k', B, { ttlMs: 5000, signal: controller.signal });
    const closing = locker.acquireForOwner('k', 'c'.repeat(32), { ttlMs: 5000 });
    controller.abort();
    await expect(aborted).rejects.toMatchObject({ code: 'ERR_LOCK_TIMEOUT' });
    await locker.close();
    await expect(closing).rejects.toMatchObject({ code: 'ERR_LOCK_TIMEOUT' });
  });
});

describe('renewForOwner', () => {
  it('renews the lease of the owner and token only', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const grant = await locker.acquireForOwner('k', A, { ttlMs: 200 });
    await expect(
      locker.renewForOwner({ key: 'k', owner: A, fencingToken: grant.fencingToken }, 3000),
    ).resolves.toEqual({ outcome: 'renewed', ttlMs: 3000 });
    await sleep(300); // past the first TTL
    expect((await locker.inspect('k')).holder?.owner).toBe(A);
    await expect(
      locker.renewForOwner({ key: 'k', owner: B, fencingToken: grant.fencingToken }, 3000),
    ).resolves.toEqual({ outcome: 'not-owner' });
    await expect(
      locker.renewForOwner({ key: 'k', owner: A, fencingToken: 7n }, 3000),
    ).resolves.toEqual({ outcome: 'not-owner' });
  });

  it('answers not-held after the lease expired, and does not bring it back', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const grant = await locker.acquireForOwner('k', A, { ttlMs: 100 });
    await sleep(200);
    await expect(
      locker.renewForOwner({ key: 'k', owner: A, fencingToken: grant.fencingToken }, 3000),
    ).resolves.toEqual({ outcome: 'not-held' });
    expect((await locker.inspect('k')).holder).toBeNull();
  });
});

describe('releaseForOwner', () => {
  it('with a token: released, then not-held; never deletes another owner', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const grant = await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    await expect(
      locker.releaseForOwner({ key: 'k', owner: B, fencingToken: grant.fencingToken }),
    ).resolves.toBe('not-owner');
    expect(backend.entries.get('k')?.owner).toBe(A);
    await expect(
      locker.releaseForOwner({ key: 'k', owner: A, fencingToken: grant.fencingToken }),
    ).resolves.toBe('released');
    await expect(
      locker.releaseForOwner({ key: 'k', owner: A, fencingToken: grant.fencingToken }),
    ).resolves.toBe('not-held');
  });

  it('without a token: releases the holder only if it is the owner', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    await expect(locker.releaseForOwner({ key: 'k', owner: A })).resolves.toBe('not-held');
    await locker.acquireForOwner('k', A, { ttlMs: 5000 });
    await expect(locker.releaseForOwner({ key: 'k', owner: B })).resolves.toBe('not-owner');
    expect(backend.entries.get('k')?.owner).toBe(A);
    await expect(locker.releaseForOwner({ key: 'k', owner: A })).resolves.toBe('released');
    expect(backend.entries.has('k')).toBe(false);
  });

  it('a late release after expiry and a new grant answers not-owner (T01)', async () => {
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const a = await locker.acquireForOwner('k', A, { ttlMs: 100 });
    await sleep(200);
    const b = await locker.acquireForOwner('k', B, { ttlMs: 10_000 });
    expect(b.fencingToken).toBe(a.fencingToken + 1n);
    await expect(
      locker.releaseForOwner({ key: 'k', owner: A, fencingToken: a.fencingToken }),
    ).resolves.toBe('not-owner');
    expect(backend.entries.get('k')).toMatchObject({ owner: B, token: b.fencingToken });
  });
});

describe('bad input is refused before any engine call', () => {
  const cases: readonly [string, (l: Locker) => Promise<unknown>, string][] = [
    ['owner not hex', (l) => l.acquireForOwner('k', 'vader', { ttlMs: 1000 }), 'owner'],
    ['owner too short', (l) => l.acquireForOwner('k', 'ab12', { ttlMs: 1000 }), 'owner'],
    ['owner upper case', (l) => l.acquireForOwner('k', 'A'.repeat(32), { ttlMs: 1000 }), 'owner'],
    ['owner too long', (l) => l.tryAcquireForOwner('k', 'a'.repeat(129), { ttlMs: 1000 }), 'owner'],
    ['empty key', (l) => l.acquireForOwner('', A, { ttlMs: 1000 }), 'key'],
    ['no ttlMs', (l) => l.acquireForOwner('k', A, {} as { ttlMs: number }), 'ttlMs'],
    ['ttlMs 0', (l) => l.acquireForOwner('k', A, { ttlMs: 0 }), 'ttlMs'],
    ['ttlMs -1', (l) => l.tryAcquireForOwner('k', A, { ttlMs: -1 }), 'ttlMs'],
    ['ttlMs NaN', (l) => l.acquireForOwner('k', A, { ttlMs: Number.NaN }), 'ttlMs'],
    ['ttlMs 2**53', (l) => l.acquireForOwner('k', A, { ttlMs: 2 ** 53 }), 'ttlMs'],
    [
      'ttlMs "1000"',
      (l) => l.acquireForOwner('k', A, { ttlMs: '1000' as unknown as number }),
      'ttlMs',
    ],
    [
      'autoRenew is not an option here',
      (l) => l.acquireForOwner('k', A, { ttlMs: 1000, autoRenew: true } as { ttlMs: number }),
      'options.autoRenew',
    ],
    ['waitMs -5', (l) => l.acquireForOwner('k', A, { ttlMs: 1000, waitMs: -5 }), 'waitMs'],
    [
      'renew without a token',
      (l) => l.renewForOwner({ key: 'k', owner: A } as never, 1000),
      'fencingToken',
    ],
    [
      'renew with a number token',
      (l) => l.renewForOwner({ key: 'k', owner: A, fencingToken: 1 as unknown as bigint }, 1000),
      'fencingToken',
    ],
    [
      'renew with token 0n',
      (l) => l.renewForOwner({ key: 'k', owner: A, fencingToken: 0n }, 1000),
      'fencingToken',
    ],
    ['renew ttlMs 0', (l) => l.renewForOwner({ key: 'k', owner: A, fencingToken: 1n }, 0), 'ttlMs'],
    [
      'release with a negative token',
      (l) => l.releaseForOwner({ key: 'k', owner: A, fencingToken: -3n }),
      'fencingToken',
    ],
    ['release with a bad owner', (l) => l.releaseForOwner({ key: 'k', owner: 'x' }), 'owner'],
  ];

  it.each(cases)('%s', async (_label, call, argument) => {
    const backend = new MemoryBackend();
    const error = await call(lockerOn(backend)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe(argument);
    expect(backend.totalCalls).toBe(0);
  });
});

describe('events', () => {
  it('publishes acquire (with ttlMs), wait start/end, renew (with ttlMs) and release', async () => {
    const acquires = record<AcquireEvent>(CHANNELS.acquire);
    const waits = record<WaitEvent>(CHANNELS.wait);
    const renews = record<RenewEvent>(CHANNELS.renew);
    const releases = record<ReleaseEvent>(CHANNELS.release);
    try {
      const backend = new MemoryBackend();
      const locker = lockerOn(backend);
      const a = await locker.acquireForOwner('k', A, { ttlMs: 5000 });
      const waiting = locker.acquireForOwner('k', B, { ttlMs: 4000, waitMs: 5000 });
      await sleep(50);
      await locker.renewForOwner({ key: 'k', owner: A, fencingToken: a.fencingToken }, 6000);
      await locker.releaseForOwner({ key: 'k', owner: A });
      await waiting;

      const mine = (e: { key: string }) => e.key === 'k';
      expect(
        acquires.events.filter(mine).map(({ owner, outcome, fencingToken, ttlMs }) => ({
          owner,
          outcome,
          fencingToken,
          ttlMs,
        })),
      ).toEqual([
        { owner: A, outcome: 'granted', fencingToken: 1n, ttlMs: 5000 },
        { owner: B, outcome: 'granted', fencingToken: 2n, ttlMs: 4000 },
      ]);
      expect(waits.events.filter(mine)).toEqual([
        { backend: 'memory', store: 'memory', key: 'k', owner: B, phase: 'start' },
        { backend: 'memory', store: 'memory', key: 'k', owner: B, phase: 'end' },
      ]);
      expect(renews.events.filter(mine)).toEqual([
        {
          backend: 'memory',
          store: 'memory',
          key: 'k',
          owner: A,
          fencingToken: 1n,
          ok: true,
          ttlMs: 6000,
        },
      ]);
      expect(releases.events.filter(mine)).toEqual([
        {
          backend: 'memory',
          store: 'memory',
          key: 'k',
          owner: A,
          fencingToken: 1n,
          outcome: 'released',
        },
      ]);
    } finally {
      for (const r of [acquires, waits, renews, releases]) r.stop();
    }
  });

  it('a tryAcquire never publishes wait events; a timed-out wait publishes start and end', async () => {
    const waits = record<WaitEvent>(CHANNELS.wait);
    try {
      const backend = new MemoryBackend();
      const locker = lockerOn(backend);
      await locker.acquire('w', { ttlMs: 5000 });
      await expect(locker.tryAcquire('w')).resolves.toBeNull();
      expect(waits.events.filter((e) => e.key === 'w')).toEqual([]);
      await expect(locker.acquire('w', { waitMs: 60 })).rejects.toBeInstanceOf(LockTimeoutError);
      expect(waits.events.filter((e) => e.key === 'w').map((e) => e.phase)).toEqual([
        'start',
        'end',
      ]);
    } finally {
      waits.stop();
    }
  });
});
