/**
 * A waiter's watch starts just after the revision of its attempt's read. When etcd compacted that
 * revision away before the watch was created (a release, then a compaction, in between), etcd
 * refuses the watch: the waiter must ask again (and be granted), not fail its acquire, for a lock
 * (predecessor watch) and a semaphore's first waiter (folder watch) alike.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import type { AttemptRequest, Lease } from '../../../packages/fencelock/src/index.js';
import { useNamespace } from './support.js';

const fixture = useNamespace('compacted');

/** Release `holder`, then compact the cluster's history up to now. */
async function releaseAndCompact(holder: Lease): Promise<void> {
  expect(await holder.release()).toBe('released');
  const marker = await fixture.admin.put(`${fixture.namespace}/marker`).value('compact here');
  await fixture.admin.kv.compact({ revision: marker.header.revision, physical: true });
}

/** The waiter's attempt, its wait across the compaction, and its next attempt (granted). */
async function waitAcrossCompaction(
  backend: EtcdBackend,
  request: AttemptRequest,
  holder: Lease,
): Promise<void> {
  const waiting = await backend.attempt(request);
  expect(waiting.granted).toBe(false);
  if (waiting.granted || waiting.waitForChange === undefined) throw new Error('expected a wait');
  await releaseAndCompact(holder);
  const startedAt = performance.now();
  const woke = await waiting.waitForChange(new AbortController().signal, 20_000).then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
  expect(woke).toEqual({ value: undefined });
  expect(performance.now() - startedAt).toBeLessThan(5_000);
  const again = await backend.attempt(request);
  expect(again.granted).toBe(true);
  if (!again.granted) return;
  const lease = { key: request.key, owner: request.owner, fencingToken: again.token };
  const permits = request.permits === undefined ? {} : { permits: request.permits };
  expect(await backend.release({ ...lease, ...permits })).toBe('released');
}

describe('etcd: a watch whose start revision was compacted', () => {
  it('a lock waiter asks again and is granted', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const holder = await locker.acquire('compacted:lock');
    await waitAcrossCompaction(
      backend,
      {
        key: 'compacted:lock',
        owner: randomBytes(16).toString('hex'),
        ttlMs: 10_000,
        mode: 'write',
        autoRenew: true,
        willWait: true,
      },
      holder,
    );
  });

  it("a semaphore's first waiter asks again and is granted", async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const holder = await locker.semaphore('compacted:semaphore', { permits: 1 }).acquire();
    await waitAcrossCompaction(
      backend,
      {
        key: 'compacted:semaphore',
        owner: randomBytes(16).toString('hex'),
        ttlMs: 10_000,
        mode: 'write',
        autoRenew: true,
        willWait: true,
        permits: 1,
      },
      holder,
    );
  });
});
