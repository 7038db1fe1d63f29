/**
 * Read-write locks on etcd: readers share the key; a writer waits for every earlier contender;
 * a reader waits only for earlier writers, so a reader that queued behind a waiting writer waits
 * for that writer even while only readers hold the key (no writer starvation). Fencing tokens of
 * all grants strictly increase in grant order.
 */
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import type { LockMode } from '../../../packages/fencelock/src/core/backend.js';
import { type Lease, LockTimeoutError } from '../../../packages/fencelock/src/index.js';
import { settledWithin, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('rwlock');

/** A contender on its own locker; records the grant order. */
function contender(
  key: string,
  mode: LockMode,
  name: string,
  grants: { name: string; token: bigint }[],
): Promise<Lease> {
  const locker = fixture.locker({ ttlMs: 10_000 });
  return locker.acquire(key, { mode, waitMs: 30_000 }).then((lease) => {
    grants.push({ name, token: lease.fencingToken });
    return lease;
  });
}

describe('etcd read-write lock', () => {
  it('shares among readers; queues writers and later readers in order; tokens increase', async () => {
    const key = 'rw:resource';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = ((await probe.backend()) as EtcdBackend).dirOf(key);

    // Three readers hold at once.
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'R3']);
    // A writer cannot get in, by tryAcquire.
    expect(await probe.tryAcquire(key, { mode: 'write' })).toBeNull();
    await waitForCount(fixture.admin, dir, 3);

    // W queues behind the readers; R4 and R5 queue behind W.
    const w = contender(key, 'write', 'W', grants);
    await waitForCount(fixture.admin, dir, 4);
    const r4 = contender(key, 'read', 'R4', grants);
    await waitForCount(fixture.admin, dir, 5);
    const r5 = contender(key, 'read', 'R5', grants);
    await waitForCount(fixture.admin, dir, 6);
    // Only readers hold, yet R4 and R5 wait: an earlier writer is queued.
    expect(await settledWithin(Promise.race([w, r4, r5]), 300)).toBe(false);
    // A reader's tryAcquire also yields to the queued writer.
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();

    // W waits until every earlier reader has released, whatever the order.
    expect(await (await r2).release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await (await r3).release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await r1.release()).toBe('released');
    const writer = await w;
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'R3', 'W']);
    // The readers behind W still wait while it holds.
    expect(await settledWithin(Promise.race([r4, r5]), 300)).toBe(false);

    // W releases: both readers behind it go together.
    expect(await writer.release()).toBe('released');
    const [reader4, reader5] = await Promise.all([r4, r5]);
    expect(grants.map((g) => g.name).slice(0, 4)).toEqual(['R1', 'R2', 'R3', 'W']);
    expect(new Set(grants.slice(4).map((g) => g.name))).toEqual(new Set(['R4', 'R5']));
    expect(reader4.isHeld && reader5.isHeld).toBe(true);

    // A writer queued behind R4 and R5 waits for both.
    const w2 = contender(key, 'write', 'W2', grants);
    await waitForCount(fixture.admin, dir, 3);
    expect(await reader5.release()).toBe('released');
    expect(await settledWithin(w2, 300)).toBe(false);
    expect(await reader4.release()).toBe('released');
    expect(await (await w2).release()).toBe('released');

    // Tokens strictly increase in grant order (R4 and R5, granted together, in queue order).
    const sorted = [...grants.slice(0, 4), ...grants.slice(4, 6).sort(byToken), grants[6]!];
    expect(sorted.map((g) => g.name)).toEqual(['R1', 'R2', 'R3', 'W', 'R4', 'R5', 'W2']);
    for (let i = 1; i < sorted.length; i++) {
      expect(sorted[i]!.token).toBeGreaterThan(sorted[i - 1]!.token);
    }
    expect(await fixture.admin.getAll().prefix(dir).count()).toBe(0);
  });

  it('a reader queued behind a writer goes in, beside the earlier reader, once the writer gives up', async () => {
    // The writer times out: its queue entry is withdrawn and the reader behind it goes in
    // while the earlier reader still holds (it no longer waits for a writer that left).
    const key = 'rw:withdrawn-writer';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = ((await probe.backend()) as EtcdBackend).dirOf(key);
    const r1 = await contender(key, 'read', 'R1', grants);
    const wLocker = fixture.locker({ ttlMs: 10_000 });
    const w = wLocker.acquire(key, { mode: 'write', waitMs: 1500 });
    w.catch(() => undefined);
    await waitForCount(fixture.admin, dir, 2);
    const r2 = contender(key, 'read', 'R2', grants);
    await waitForCount(fixture.admin, dir, 3);
    expect(await settledWithin(r2, 300)).toBe(false);
    await expect(w).rejects.toBeInstanceOf(LockTimeoutError);
    const reader2 = await r2;
    expect(r1.isHeld).toBe(true);
    expect(reader2.fencingToken).toBeGreaterThan(r1.fencingToken);
    expect(await reader2.release()).toBe('released');
    expect(await r1.release()).toBe('released');
    expect(await fixture.admin.getAll().prefix(dir).count()).toBe(0);
  });
});

function byToken(a: { token: bigint }, b: { token: bigint }): number {
  return a.token < b.token ? -1 : a.token > b.token ? 1 : 0;
}
