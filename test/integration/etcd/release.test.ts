/**
 * Release outcomes on etcd for leases without the watchdog (`autoRenew: false`), which live on a
 * single-use etcd lease of their own. Regression: the backend revoked that lease (in the
 * background) before its compare-and-delete, and when the revoke landed first the key was
 * already gone, so a release of a held lease answered 'not-held' and `withLock` threw
 * LockLostError after work that had been fully protected.
 */
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { adminClient, contenders, etcdUrl, sleep, uniqueNamespace } from './support.js';

const namespace = uniqueNamespace('release');
let admin: Etcd3;
let locker: Locker;

beforeAll(() => {
  admin = adminClient();
  locker = createLocker(etcdUrl(namespace), { ttlMs: 5000 });
});

afterAll(async () => {
  await locker.close();
  await admin.delete().prefix(`${namespace}/`);
  admin.close();
});

/** Remaining TTL of an etcd lease in seconds; -1 once it is revoked or expired. */
async function leaseTtl(id: string): Promise<number> {
  return Number((await admin.leaseClient.leaseTimeToLive({ ID: id })).TTL);
}

describe('etcd leases without the watchdog', () => {
  it("answers 'released' for a held lease, every time, then revokes its own etcd lease", async () => {
    const outcomes: string[] = [];
    for (let i = 0; i < 20; i++) {
      const key = `release:single-use:${i}`;
      const dir = ((await locker.backend()) as EtcdBackend).dirOf(key);
      const lease = await locker.acquire(key, { autoRenew: false });
      const [mine] = await contenders(admin, dir);
      expect(mine?.createRevision).toBe(lease.fencingToken);
      outcomes.push(await lease.release());
      expect(await admin.getAll().prefix(dir).count()).toBe(0);
      // The lease that carried only this lock does not linger until its TTL.
      const deadline = performance.now() + 3000;
      while ((await leaseTtl(mine!.lease)) !== -1 && performance.now() < deadline) await sleep(20);
      expect(await leaseTtl(mine!.lease)).toBe(-1);
    }
    expect(outcomes).toEqual(new Array(20).fill('released'));
  });

  it('withLock without the watchdog returns the work’s result (no false LockLostError)', async () => {
    for (let i = 0; i < 10; i++) {
      const result = await locker.withLock(`release:withlock:${i}`, async () => i, {
        autoRenew: false,
      });
      expect(result).toBe(i);
    }
  });

  it('a waiter without the watchdog gets its full ttlMs from the grant, not from enqueueing', async () => {
    // autoRenew false means "the grant ends ttlMs after it" (AttemptRequest.autoRenew); time
    // spent in the queue must not eat into it.
    const key = 'single-use:waited';
    const holderLocker = createLocker(etcdUrl(namespace), { ttlMs: 10_000 });
    try {
      const dir = ((await locker.backend()) as EtcdBackend).dirOf(key);
      const holder = await holderLocker.acquire(key);
      const waiting = locker.acquire(key, { autoRenew: false, ttlMs: 3000, waitMs: 20_000 });
      waiting.catch(() => undefined);
      await sleep(2000);
      expect(await holder.release()).toBe('released');
      const lease = await waiting;
      const grantedAt = performance.now();
      expect(lease.ttlMs).toBe(3000);
      // The engine keeps the key at least as long as the library says the lease is valid.
      const [mine] = await contenders(admin, dir);
      const engineTtlS = await leaseTtl(mine!.lease);
      expect(engineTtlS + 1).toBeGreaterThanOrEqual((lease.expiresAt - performance.now()) / 1000);
      await sleep(1800 - (performance.now() - grantedAt));
      expect(lease.signal.aborted, String(lease.signal.reason)).toBe(false);
      expect(lease.isHeld).toBe(true);
      expect(await admin.getAll().prefix(dir).count()).toBe(1);
      expect(await lease.release()).toBe('released');
    } finally {
      await holderLocker.close();
    }
  });

  it('a waiter without the watchdog keeps its place in line while it waits longer than ttlMs', async () => {
    const key = 'single-use:long-wait';
    const holderLocker = createLocker(etcdUrl(namespace), { ttlMs: 10_000 });
    const behindLocker = createLocker(etcdUrl(namespace), { ttlMs: 10_000 });
    try {
      const dir = ((await locker.backend()) as EtcdBackend).dirOf(key);
      const holder = await holderLocker.acquire(key);
      const order: string[] = [];
      const first = locker
        .acquire(key, { autoRenew: false, ttlMs: 2000, waitMs: 20_000 })
        .then(async (lease) => {
          order.push('first');
          await lease.release();
        });
      first.catch(() => undefined);
      await sleep(200);
      const second = behindLocker.acquire(key, { waitMs: 20_000 }).then(async (lease) => {
        order.push('second');
        await lease.release();
      });
      second.catch(() => undefined);
      await sleep(4000);
      expect(await admin.getAll().prefix(dir).count()).toBe(3);
      expect(await holder.release()).toBe('released');
      await Promise.all([first, second]);
      expect(order).toEqual(['first', 'second']);
    } finally {
      await Promise.all([holderLocker.close(), behindLocker.close()]);
    }
  });
});
