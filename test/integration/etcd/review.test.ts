/**
 * Cases from the adversarial review of the etcd backend: a waiter aborted while its watch is
 * being created, a waiter whose lease was revoked by hand, and waiting with a minority member
 * frozen. Each failed before its fix.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { pauseMember, restoreCluster, resumeMember } from '../../helpers/etcd-cluster.js';
import { adminClient, contenders, etcdUrl, sleep, uniqueNamespace } from './support.js';

const lockers: Locker[] = [];
async function dirOf(l: Locker, key: string): Promise<string> {
  return ((await l.backend()) as EtcdBackend).dirOf(key);
}
function locker(namespace: string): Locker {
  const l = createLocker(etcdUrl(namespace));
  lockers.push(l);
  return l;
}

afterAll(async () => {
  await Promise.allSettled(lockers.map((l) => l.close()));
  await restoreCluster();
});

describe('etcd review cases', () => {
  it('settles a queued acquire promptly whenever it is aborted, also during watch creation', async () => {
    const ns = uniqueNamespace('abort');
    const holder = locker(ns);
    const waiter = locker(ns);
    const held = await holder.acquire('k', { ttlMs: 60_000 });
    await waiter.tryAcquire('k'); // the session and connections are up
    const slow: number[] = [];
    const runs: Promise<void>[] = [];
    for (let i = 0; i < 40; i++) {
      const controller = new AbortController();
      setTimeout(() => controller.abort(), Math.random() * 6);
      const started = performance.now();
      runs.push(
        waiter
          .acquire('k', { signal: controller.signal })
          .then(
            () => undefined,
            () => undefined,
          )
          .then(() => {
            const took = performance.now() - started;
            if (took > 2_000) slow.push(took);
          }),
      );
      await sleep(15);
    }
    await Promise.all(runs);
    expect(slow).toEqual([]);
    await held.release();
    // Every aborted waiter was withdrawn from the queue.
    await sleep(500);
    expect(await contenders(adminClient(), await dirOf(waiter, 'k'))).toHaveLength(0);
  });

  it('queues again on a fresh session when the waiter’s lease is revoked by hand', async () => {
    const ns = uniqueNamespace('revoke');
    const holder = locker(ns);
    const waiter = locker(ns);
    const held = await holder.acquire('k', { ttlMs: 30_000 });
    const waiting = waiter.acquire('k', { ttlMs: 30_000, waitMs: 15_000 });
    let keys: string[] = [];
    for (let i = 0; i < 50 && keys.length < 2; i++) {
      keys = (await contenders(adminClient(), await dirOf(waiter, 'k'))).map((c) => c.key);
      await sleep(50);
    }
    expect(keys).toHaveLength(2);
    const waiterKey = keys.find((k) => !k.endsWith(`-${held.owner}`))!;
    const leaseHex = waiterKey.split('/').at(-1)!.split('-')[1]!;
    await adminClient().leaseClient.leaseRevoke({ ID: BigInt(`0x${leaseHex}`).toString() });
    await held.release();
    const lease = await waiting;
    expect(lease.fencingToken).toBeGreaterThan(held.fencingToken);
    expect(await lease.release()).toBe('released');
  });

  it('keeps waitMs while a minority member is frozen', async () => {
    const ns = uniqueNamespace('pause');
    const holder = locker(ns);
    const waiter = locker(ns);
    const held = await holder.acquire('k', { ttlMs: 30_000 });
    await (await waiter.acquire('warm', { ttlMs: 30_000 })).release();
    const settledAt: number[] = [];
    const started = performance.now();
    await pauseMember(1);
    try {
      const runs = Array.from({ length: 4 }, async (_, i) => {
        await sleep(100 * i);
        await waiter.acquire('k', { ttlMs: 30_000, waitMs: 3_000 }).catch(() => undefined);
        settledAt.push(performance.now() - started);
      });
      await Promise.all(runs);
    } finally {
      await resumeMember(1);
    }
    // waitMs 3 s; a request stuck on the frozen member gives up at the 5 s call deadline.
    expect(settledAt).toHaveLength(4);
    expect(Math.max(...settledAt)).toBeLessThan(9_000);
    await held.release();
  });
});
