/**
 * Keys fencelock did not write, under a lock's own folder, do not take part in the lock: they
 * neither block an acquire, nor show as its holder, nor turn a release of a lost lease into
 * `not-owner`. And the folders of two locks never overlap: a lock named `jobs` does not see the
 * contenders of a lock named `jobs/x`. Both failed before the fix (issue 17: a foreign key under
 * `fencelock/locks/jobs/` blocked every acquire of `jobs`).
 */
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import type { Locker } from '../../../packages/fencelock/src/index.js';
import { contenders, useNamespace } from './support.js';

const space = useNamespace('foreign');

async function dirOf(locker: Locker, key: string): Promise<string> {
  return ((await locker.backend()) as EtcdBackend).dirOf(key);
}

/** An owner id of the shape fencelock writes (32 hex digits), owned by nobody. */
const STRANGER = 'ab'.repeat(16);

describe('etcd: keys fencelock did not write', () => {
  it('a foreign key under the lock folder blocks no acquire and is no holder', async () => {
    const admin = space.admin;
    const locker = space.locker();
    const dir = await dirOf(locker, 'jobs');
    expect(dir).toBe(`${space.namespace}/locks/jobs/`);
    const lease = await admin.lease(60, { autoKeepAlive: false }).grant();
    const leaseHex = BigInt(lease).toString(16);
    // Older than any contender: each of them would be the holder if it counted.
    const foreign = [
      `${dir}foreign`, // another name, no lease
      `${dir}w-${leaseHex}-${STRANGER}`, // our shape, but bound to no lease
      `${dir}x/w-${leaseHex}-${STRANGER}`, // our shape one folder down, bound to a lease
      `${dir}w-${leaseHex}-not-an-owner`, // bound to a lease, owner of another shape
    ];
    await admin.put(foreign[0]!).value('by hand');
    await admin.put(foreign[1]!).value('write');
    await admin.put(foreign[2]!).value('write').lease(lease);
    await admin.put(foreign[3]!).value('write').lease(lease);
    try {
      const granted = await locker.tryAcquire('jobs');
      expect(granted).not.toBeNull();
      const info = await locker.inspect('jobs');
      expect(info.holder?.owner).toBe(granted!.owner);
      expect(info.holder?.fencingToken).toBe(granted!.fencingToken);
      expect(info.lastFencingToken).toBe(granted!.fencingToken);
      expect(await granted!.release()).toBe('released');
      // Only the foreign keys are left: no holder, and they were not touched.
      const after = await locker.inspect('jobs');
      expect(after.holder).toBeNull();
      expect(after.lastFencingToken).toBe(0n);
      expect((await contenders(admin, dir)).map((c) => c.key).sort()).toEqual([...foreign].sort());

      // A grant whose key was deleted behind its back: its release finds no holder, not another
      // owner (the foreign keys do not answer for the lock).
      const lost = await locker.acquire('jobs', { ttlMs: 10_000 });
      const mine = (await contenders(admin, dir)).filter((c) => c.key.endsWith(lost.owner));
      expect(mine).toHaveLength(1);
      await admin.delete().key(mine[0]!.key);
      expect(await lost.release()).toBe('not-held');
    } finally {
      await admin.delete().prefix(dir);
      await admin.leaseClient.leaseRevoke({ ID: lease });
    }
  });

  it('a waiter queued behind a foreign key does not wait on it', async () => {
    const admin = space.admin;
    const holder = space.locker();
    const waiter = space.locker();
    const dir = await dirOf(holder, 'queue');
    await admin.put(`${dir}foreign`).value('by hand');
    try {
      const first = await holder.acquire('queue', { ttlMs: 10_000, waitMs: 3_000 });
      const waiting = waiter.acquire('queue', { ttlMs: 10_000, waitMs: 10_000 });
      await new Promise((resolve) => setTimeout(resolve, 200));
      const releasedAt = performance.now();
      expect(await first.release()).toBe('released');
      const next = await waiting;
      // Woken by the release (the watch on its predecessor), not by a 30 s recheck.
      expect(performance.now() - releasedAt).toBeLessThan(2_000);
      expect(next.fencingToken).toBeGreaterThan(first.fencingToken);
      expect(await next.release()).toBe('released');
    } finally {
      await admin.delete().prefix(dir);
    }
  });

  it('a lock named jobs and one named jobs/x have folders apart: neither sees the other', async () => {
    const a = space.locker();
    const b = space.locker();
    const jobsDir = await dirOf(a, 'jobs');
    const nestedDir = await dirOf(a, 'jobs/x');
    // The lock name is one percent-encoded path segment: neither folder is inside the other.
    expect(nestedDir.startsWith(jobsDir)).toBe(false);
    expect(jobsDir.startsWith(nestedDir)).toBe(false);

    const nested = await a.acquire('jobs/x', { ttlMs: 10_000 });
    const jobs = await b.tryAcquire('jobs');
    expect(jobs).not.toBeNull();
    expect((await b.inspect('jobs')).holder?.owner).toBe(jobs!.owner);
    expect((await b.inspect('jobs/x')).holder?.owner).toBe(nested.owner);
    // Each lock's folder holds its own contender only.
    expect((await contenders(space.admin, jobsDir)).map((c) => c.key)).toEqual([
      expect.stringMatching(new RegExp(`^${jobsDir}w-[0-9a-f]+-${jobs!.owner}$`)),
    ]);
    expect(await b.tryAcquire('jobs/x')).toBeNull();
    expect(await jobs!.release()).toBe('released');
    expect(await nested.release()).toBe('released');
    expect((await a.inspect('jobs/x')).holder).toBeNull();
  });
});
