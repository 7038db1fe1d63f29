/**
 * Sessions the user opens on etcd (`locker.openSession`), as etcd's `concurrency.Session`: one
 * etcd lease kept alive in the background, carrying every lock acquired with `{ session }`;
 * `close()` revokes it, `orphan()` lets it run out, and its loss ends all its leases at once.
 */
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  createLocker,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import { contenders, sleep, useNamespace } from './support.js';

const ns = useNamespace('session');

/** Remaining TTL of an etcd lease in seconds; -1 once it is revoked or expired. */
async function serverTtl(leaseHex: string): Promise<number> {
  const res = await ns.admin.leaseClient.leaseTimeToLive({
    ID: BigInt(`0x${leaseHex}`).toString(),
  });
  return Number(res.TTL);
}

async function dirOf(locker: ReturnType<typeof ns.locker>, key: string): Promise<string> {
  return ((await locker.backend()) as EtcdBackend).dirOf(key);
}

describe('etcd sessions opened by the user', () => {
  it('grants whole seconds, rounded up, and carries every lock of the session on its lease', async () => {
    const locker = ns.locker({ ttlMs: 30_000 });
    const session = await locker.openSession({ ttlMs: 4500 });
    expect(session.ttlMs).toBe(5000);
    expect(session.isOpen).toBe(true);
    const ttl = await serverTtl(session.id);
    expect(ttl).toBeGreaterThan(3);
    expect(ttl).toBeLessThanOrEqual(5);

    const a = await locker.acquire('session:carry:a', { session });
    const b = await locker.acquire('session:carry:b', { session });
    expect(a.ttlMs).toBe(5000);
    const leaseId = BigInt(`0x${session.id}`).toString();
    for (const [lease, key] of [
      [a, 'session:carry:a'],
      [b, 'session:carry:b'],
    ] as const) {
      const [mine] = await contenders(ns.admin, await dirOf(locker, key));
      expect(mine?.lease).toBe(leaseId);
      expect(mine?.createRevision).toBe(lease.fencingToken);
    }
    // Kept alive past its TTL by the background keepalive.
    await sleep(6000);
    expect(a.isHeld && b.isHeld).toBe(true);
    expect(await a.release()).toBe('released');
    expect(b.isHeld).toBe(true);
    expect(await b.release()).toBe('released');
    expect(session.isOpen).toBe(true);
    await session.close();
    expect(session.isOpen).toBe(false);
    expect(await serverTtl(session.id)).toBe(-1);
  }, 20_000);

  it('close() revokes the lease: its leases are lost, their keys gone, its waiters cancelled', async () => {
    const locker = ns.locker({ ttlMs: 5000 });
    const other = ns.locker({ ttlMs: 5000 });
    const session = await locker.openSession();
    const held = await locker.acquire('session:close:held', { session });
    const blocker = await other.acquire('session:close:queued');
    const waiting = locker.acquire('session:close:queued', { session }).then(
      () => undefined,
      (error: unknown) => error,
    );
    const queueDir = await dirOf(locker, 'session:close:queued');
    const deadline = performance.now() + 5000;
    while ((await contenders(ns.admin, queueDir)).length < 2 && performance.now() < deadline) {
      await sleep(10);
    }
    expect(await contenders(ns.admin, queueDir)).toHaveLength(2);

    await session.close();
    const lost = held.signal.reason as LockLostError;
    expect(held.signal.aborted).toBe(true);
    expect(lost).toBeInstanceOf(LockLostError);
    expect(lost.reason).toBe('session-lost');
    const cancelled = await waiting;
    expect(cancelled).toBeInstanceOf(LockTimeoutError);
    expect(String((cancelled as Error).message)).toContain(`session ${session.id} ended`);
    expect(await contenders(ns.admin, await dirOf(locker, 'session:close:held'))).toEqual([]);
    // Only the other locker's key is left in the queue.
    const left = await contenders(ns.admin, queueDir);
    expect(left.map((c) => c.createRevision)).toEqual([blocker.fencingToken]);
    expect(await held.release()).toBe('not-held');
    expect(() => locker.lock('session:close:again', { session })).toThrow(InvalidArgumentError);
    expect(await blocker.release()).toBe('released');
  });

  it('a lease revoked behind its back ends the session and all its leases at the next keepalive', async () => {
    const locker = ns.locker({ ttlMs: 10_000 });
    const session = await locker.openSession();
    const leases = await Promise.all(
      [1, 2, 3].map((i) => locker.acquire(`session:revoked:${i}`, { session })),
    );
    const revokedAt = performance.now();
    await ns.admin.leaseClient.leaseRevoke({ ID: BigInt(`0x${session.id}`).toString() });
    await Promise.all(
      leases.map(
        (lease) =>
          new Promise<void>((resolve) => {
            if (lease.signal.aborted) resolve();
            else lease.signal.addEventListener('abort', () => resolve(), { once: true });
          }),
      ),
    );
    // The keepalive runs every third of the TTL; its answer (TTL 0) ends the session.
    expect(performance.now() - revokedAt).toBeLessThan(session.ttlMs / 3 + 1000);
    expect(session.signal.aborted).toBe(true);
    for (const lease of leases) {
      expect((lease.signal.reason as LockLostError).reason).toBe('session-lost');
    }
    // The locker itself is fine: locks outside the session still work.
    const after = await locker.acquire('session:revoked:1');
    expect(after.fencingToken).toBeGreaterThan(leases[0]!.fencingToken);
    expect(await after.release()).toBe('released');
  }, 15_000);

  it('orphan() keeps the keys until the TTL runs out, then the leases are lost', async () => {
    const locker = ns.locker({ ttlMs: 5000 });
    const other = ns.locker({ ttlMs: 5000 });
    const session = await locker.openSession({ ttlMs: 2000 });
    const lease = await locker.acquire('session:orphan', { session });
    const orphanedAt = performance.now();
    session.orphan();
    expect(session.isOpen).toBe(false);
    expect(() => locker.lock('session:orphan:new', { session })).toThrow(InvalidArgumentError);
    // Still held on the engine: nobody else gets it before the TTL.
    expect(await other.tryAcquire('session:orphan')).toBeNull();
    await new Promise<void>((resolve) =>
      lease.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    const lostAfterMs = performance.now() - orphanedAt;
    expect(lostAfterMs).toBeLessThanOrEqual(session.ttlMs);
    // Its validity and the session's end together: either timer may say so first.
    expect(['expired', 'session-lost']).toContain((lease.signal.reason as LockLostError).reason);
    // The server drops the lease (and the key) at its TTL; the next contender is granted.
    const next = await other.acquire('session:orphan', { waitMs: 5000 });
    expect(next.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect(await next.release()).toBe('released');
  }, 15_000);

  it("the locker's close() revokes its open sessions", async () => {
    const locker = createLocker(ns.url, { ttlMs: 5000 });
    const session = await locker.openSession();
    await locker.acquire('session:locker-close', { session });
    await locker.close();
    expect(session.isOpen).toBe(false);
    expect(await serverTtl(session.id)).toBe(-1);
    expect(await contenders(ns.admin, await dirOf(ns.locker(), 'session:locker-close'))).toEqual(
      [],
    );
  });

  it('rejects bad session input before any engine call', async () => {
    const locker = ns.locker({ ttlMs: 5000 });
    const another = ns.locker({ ttlMs: 5000 });
    const session = await another.openSession();
    expect(() => locker.lock('session:bad', { session })).toThrow(/of another locker/);
    expect(() => another.lock('session:bad', { session, ttlMs: 9000 })).toThrow(
      InvalidArgumentError,
    );
    expect(() => another.lock('session:bad', { session, autoRenew: false })).toThrow(
      /keeps its locks alive/,
    );
    expect(() => another.lock('session:bad', { session: {} as never })).toThrow(
      InvalidArgumentError,
    );
    expect(() => createLocker(ns.url, { session } as never)).toThrow(/per-lock option/);
    await expect(locker.openSession({ ttlMs: -1 })).rejects.toThrow(InvalidArgumentError);
    await expect(locker.openSession({ ttl: 5 } as never)).rejects.toThrow(InvalidArgumentError);
    await session.close();
  });
});
