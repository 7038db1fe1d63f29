/**
 * The semaphore part of the backend contract (`locker.semaphore`), registered by
 * `describeBackend` for every backend: on a backend whose `capabilities.permits` is false, the
 * refusal; elsewhere at most N holders under contention from several processes (judged by the
 * torture harness's fenced register and checker), tokens from the key's one sequence,
 * arrival order, event-driven handoff, a crashed holder's permit back by its TTL, and an
 * agreement on the permit count. Timing bounds are loose (shared machines).
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import {
  type Backend,
  InvalidArgumentError,
  type Lease,
  type Locker,
  type LockerOptions,
  MAX_PERMITS,
  PermitsMismatchError,
} from '../../packages/fencelock/src/index.js';
import { runPermitProcesses, startPermitHolder } from './semaphore-processes.js';

/**
 * What the semaphore cases need from the suite: clients on the shared store (and the store's URL,
 * for clients in other processes), fresh keys.
 */
export interface SemaphoreSuite {
  newClient(
    options?: LockerOptions,
  ): Promise<{ locker: Locker; backend: Backend; storeUrl: string }>;
  uniqueKey(label: string): string;
}

/** A caller-chosen owner id (128 random bits, hex). */
function ownerId(): string {
  return randomBytes(16).toString('hex');
}

/** Register the semaphore cases (inside `describeBackend`'s describe). */
export function describeSemaphoreContract(suite: SemaphoreSuite): void {
  const { newClient, uniqueKey } = suite;

  it('semaphore: refused at once where capabilities.permits is false', async () => {
    const { locker, backend } = await newClient();
    if (backend.capabilities.permits) return;
    const semaphore = locker.semaphore(uniqueKey('no-permits'), { permits: 2 });
    const refused = await semaphore.acquire().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as InvalidArgumentError).argument).toBe('store');
  });

  it('semaphore: 32 contenders in 4 processes never exceed the permits at a fenced register; tokens rise', async (t) => {
    const { backend, storeUrl } = await newClient();
    if (!backend.capabilities.permits) return t.skip();
    const permits = 3;
    const rounds = 4;
    const { verdict, outcomes } = await runPermitProcesses({
      store: storeUrl,
      key: uniqueKey('permits'),
      permits,
      processes: 4,
      contendersPerProcess: 8,
      rounds,
      ttlMs: 10_000,
      waitMs: 60_000,
    });
    expect(verdict.grants).toBe(32 * rounds);
    expect(outcomes).toEqual(Array(32 * rounds).fill('released'));
    // Holders at once by the grants' intervals (acquire returned → release called, inside the
    // engine's hold) and by the register's order of writes (first write → last, two each).
    expect(verdict.rawOverlaps).toBe(0);
    expect(verdict.believedOverlaps).toBe(0);
    expect(verdict.maxWriting).toBeGreaterThanOrEqual(1);
    expect(verdict.maxWriting).toBeLessThanOrEqual(permits);
    expect(verdict.writes).toBe(2 * 32 * rounds);
    expect(verdict.staleAccepted).toBe(0);
    expect(verdict.lostIncrements).toBe(0);
    expect(verdict.tokenDuplicates).toBe(0);
    expect(verdict.tokenRegressions).toBe(0);
    expect(verdict.writesAfterKnownLoss).toBe(0);
  }, 180_000);

  it('semaphore: tryAcquire is null once every permit is held; a release lets the next in', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('try');
    const semA = a.locker.semaphore(key, { permits: 2, ttlMs: 10_000 });
    const semB = b.locker.semaphore(key, { permits: 2, ttlMs: 10_000 });
    const first = await semA.acquire();
    const second = await semB.tryAcquire();
    expect(second).not.toBeNull();
    expect(second!.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(second!.owner).not.toBe(first.owner);
    expect(await semA.tryAcquire()).toBeNull();
    expect(await first.release()).toBe('released');
    const third = await semA.tryAcquire();
    expect(third?.fencingToken).toBeGreaterThan(second!.fencingToken);
    // The engine's compare-and-delete: a released permit's owner and token no longer hold one,
    // while other permits are held (not-owner), and once none is (not-held).
    const stale = { key, owner: first.owner, fencingToken: first.fencingToken, permits: 2 };
    expect(await a.backend.release(stale)).toBe('not-owner');
    expect(await a.backend.renew(stale, 10_000)).toEqual({ ok: false, reason: 'not-owner' });
    expect(await second!.release()).toBe('released');
    expect(await third!.release()).toBe('released');
    expect(await a.backend.release(stale)).toBe('not-held');
  });

  it('semaphore: a waiter is woken by a release well under a poll (30 s TTL), in arrival order', async (t) => {
    const [a, b, c] = await Promise.all([newClient(), newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('handoff');
    const options = { permits: 1, ttlMs: 30_000, waitMs: 20_000 } as const;
    const held = await a.locker.semaphore(key, options).acquire();
    const order: string[] = [];
    const firstWaiter = b.locker
      .semaphore(key, options)
      .acquire()
      .then((p) => {
        order.push('b');
        return p;
      });
    await delay(200);
    const secondWaiter = c.locker
      .semaphore(key, options)
      .acquire()
      .then((p) => {
        order.push('c');
        return p;
      });
    await delay(200);
    const releasedAt = performance.now();
    expect(await held.release()).toBe('released');
    const next = await firstWaiter;
    const handoffMs = performance.now() - releasedAt;
    // A waiter that only polled would wait up to 0.5 s (LINE_RECHECK_MS) for its next attempt.
    expect(handoffMs).toBeLessThan(250);
    expect(next.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await next.release()).toBe('released');
    const last = await secondWaiter;
    expect(order).toEqual(['b', 'c']);
    expect(await last.release()).toBe('released');
  });

  it("semaphore: a crashed holder's permit comes back by its TTL", async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('crash');
    // A holder that stops renewing (its process died): nothing releases its permit.
    const crashed = await a.locker
      .semaphore(key, { permits: 1 })
      .acquire({ ttlMs: 1_500, autoRenew: false });
    const semaphore = b.locker.semaphore(key, { permits: 1 });
    expect(await semaphore.tryAcquire({ ttlMs: 10_000 })).toBeNull();
    const startedAt = performance.now();
    const next = await semaphore.acquire({ ttlMs: 10_000, waitMs: 15_000 });
    expect(performance.now() - startedAt).toBeLessThan(12_000);
    expect(next.fencingToken).toBeGreaterThan(crashed.fencingToken);
    expect(await next.release()).toBe('released');
  });

  it("semaphore: a killed holder process's permit comes back by its TTL or session end", async (t) => {
    const { locker, backend, storeUrl } = await newClient();
    if (!backend.capabilities.permits) return t.skip();
    const key = uniqueKey('killed');
    const ttlMs = 2_000;
    // Two permits: one held here, one by the process that is killed (its watchdog renewing it).
    const semaphore = locker.semaphore(key, { permits: 2 });
    const mine = await semaphore.acquire({ ttlMs: 30_000 });
    const holder = await startPermitHolder({ store: storeUrl, key, permits: 2, ttlMs });
    await delay(ttlMs + 500);
    expect(await semaphore.tryAcquire({ ttlMs: 30_000 })).toBeNull();
    await holder.kill();
    const killedAt = performance.now();
    const next = await semaphore.acquire({ ttlMs: 30_000, waitMs: 20_000 });
    // The TTL (a session's timeout on ZooKeeper, a lease's on etcd) plus the time the engine and
    // the waiter take to notice; a loose bound for shared machines.
    expect(performance.now() - killedAt).toBeLessThan(ttlMs + 10_000);
    expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await next.release()).toBe('released');
    expect(await mine.release()).toBe('released');
  }, 60_000);

  it('semaphore: the watchdog renews a permit past its TTL', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('renew');
    const permit = await a.locker.semaphore(key, { permits: 1 }).acquire({ ttlMs: 1_500 });
    await delay(3_500);
    expect(permit.isHeld).toBe(true);
    expect(await b.locker.semaphore(key, { permits: 1 }).tryAcquire()).toBeNull();
    expect(await permit.release()).toBe('released');
  });

  it('semaphore: users who disagree on permits get PermitsMismatchError, and nothing is held', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('mismatch');
    const held = await a.locker.semaphore(key, { permits: 2, ttlMs: 10_000 }).acquire();
    const other = b.locker.semaphore(key, { permits: 3, ttlMs: 10_000 });
    for (const attempt of [() => other.tryAcquire(), () => other.acquire({ waitMs: 2_000 })]) {
      const refused = await attempt().catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(PermitsMismatchError);
      expect(refused).toMatchObject({ key, requested: 3, inUse: 2, code: 'ERR_PERMITS_MISMATCH' });
    }
    // Nothing of the refused contender stayed: the one free permit is still there for a user
    // of the right count, and once the key is idle another count is accepted.
    const second = await a.locker.semaphore(key, { permits: 2 }).tryAcquire({ ttlMs: 10_000 });
    expect(second).not.toBeNull();
    expect(await held.release()).toBe('released');
    expect(await second!.release()).toBe('released');
    const recounted = await other.tryAcquire();
    expect(recounted).not.toBeNull();
    expect(await recounted!.release()).toBe('released');
  });

  it('semaphore: a lock and a semaphore of one key are different objects', async (t) => {
    const { locker, backend } = await newClient();
    if (!backend.capabilities.permits) return t.skip();
    const key = uniqueKey('apart');
    const lease = await locker.acquire(key, { ttlMs: 10_000 });
    const permit = await locker.semaphore(key, { permits: 1 }).tryAcquire({ ttlMs: 10_000 });
    expect(permit).not.toBeNull();
    expect(await permit!.release()).toBe('released');
    expect(await lease.release()).toBe('released');
  });

  it('semaphore: withPermit returns what fn returns and releases, also when fn throws', async (t) => {
    const { locker, backend } = await newClient();
    if (!backend.capabilities.permits) return t.skip();
    const semaphore = locker.semaphore(uniqueKey('with'), { permits: 1, ttlMs: 10_000 });
    let inside: Lease | undefined;
    const answer = await semaphore.withPermit((permit) => {
      inside = permit;
      return 42;
    });
    expect(answer).toBe(42);
    expect(inside?.isHeld).toBe(false);
    const boom = new Error('boom');
    await expect(semaphore.withPermit(() => Promise.reject(boom))).rejects.toBe(boom);
    const again = await semaphore.tryAcquire();
    expect(again?.fencingToken).toBeGreaterThan(inside!.fencingToken);
    expect(await again!.release()).toBe('released');
  });

  it('semaphore: owner-addressed permits (the sidecar path) acquire, renew and release by name', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.permits) return t.skip();
    const key = uniqueKey('owner');
    const [first, second, third] = [ownerId(), ownerId(), ownerId()];
    const options = { ttlMs: 10_000, permits: 2 } as const;
    const one = await a.locker.acquireForOwner(key, first, options);
    expect(one).toMatchObject({ key, owner: first, permits: 2 });
    // The same owner asking again holds the same permit (a lost reply is safe).
    expect((await a.locker.acquireForOwner(key, first, options)).fencingToken).toBe(
      one.fencingToken,
    );
    const two = await b.locker.tryAcquireForOwner(key, second, options);
    expect(two?.fencingToken).toBeGreaterThan(one.fencingToken);
    expect(await b.locker.tryAcquireForOwner(key, third, options)).toBeNull();
    // Renewed by name, token and permit count (through the granting locker: on etcd and
    // ZooKeeper the grant lives in its session), and released so by any locker.
    const ref = { key, owner: first, fencingToken: one.fencingToken, permits: 2 };
    expect(await a.locker.renewForOwner(ref, 10_000)).toMatchObject({ outcome: 'renewed' });
    expect(await b.locker.releaseForOwner(ref)).toBe('released');
    expect(await b.locker.releaseForOwner(ref)).toBe('not-owner');
    await expect(
      b.locker.releaseForOwner({ key, owner: second, permits: 2 }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    const three = await b.locker.tryAcquireForOwner(key, third, options);
    expect(three?.fencingToken).toBeGreaterThan(two!.fencingToken);
    for (const [owner, grant] of [
      [second, two!],
      [third, three!],
    ] as const) {
      const released = await a.locker.releaseForOwner({
        key,
        owner,
        fencingToken: grant.fencingToken,
        permits: 2,
      });
      expect(released).toBe('released');
    }
  });

  it('semaphore: bad permits and options are InvalidArgumentError before any engine call', async () => {
    const { locker } = await newClient();
    const key = uniqueKey('bad');
    for (const permits of [0, -1, 1.5, MAX_PERMITS + 1, Number.NaN, '3', undefined, null]) {
      const thrown = (() => {
        try {
          locker.semaphore(key, { permits } as never);
        } catch (error) {
          return error;
        }
        return undefined;
      })();
      expect(thrown, String(permits)).toBeInstanceOf(InvalidArgumentError);
      expect((thrown as InvalidArgumentError).argument).toBe('permits');
    }
    expect(() => locker.semaphore(key, 3 as never)).toThrow(InvalidArgumentError);
    expect(() => locker.semaphore('', { permits: 1 })).toThrow(InvalidArgumentError);
    const semaphore = locker.semaphore(key, { permits: 2 });
    for (const options of [{ reentrant: true }, { mode: 'read' }, { permits: 3 }, { ttlMs: 0 }]) {
      await expect(semaphore.acquire(options as never)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    await expect(semaphore.withPermit('fn' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
}
