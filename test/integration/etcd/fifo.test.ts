/**
 * FIFO on etcd: 20 waiters, each on its own locker (its own client and session), queue on a held
 * key in a known order (each starts only once the previous one's contender key is in etcd). When
 * the holder releases, the key passes down the line in exactly that order, and the fencing
 * tokens of the grants strictly increase.
 */
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import type { Lease } from '../../../packages/fencelock/src/index.js';
import { contenders, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('fifo');
const WAITERS = 20;

describe('etcd FIFO queue', () => {
  it('grants 20 queued waiters in enqueue order with strictly increasing tokens', async () => {
    const key = 'fifo:resource';
    const holderLocker = fixture.locker({ ttlMs: 10_000 });
    const holder = await holderLocker.acquire(key);
    const prefix = ((await holderLocker.backend()) as EtcdBackend).dirOf(key);

    const grants: { index: number; token: bigint }[] = [];
    // Mutual exclusion: a grant comes only after the previous holder started its release.
    let releasing = -2;
    const overlaps: number[] = [];
    const done: Promise<void>[] = [];
    for (let i = 0; i < WAITERS; i++) {
      const locker = fixture.locker({ ttlMs: 10_000 });
      done.push(
        locker.acquire(key, { waitMs: 60_000 }).then(async (lease: Lease) => {
          if (releasing !== i - 1) overlaps.push(i);
          grants.push({ index: i, token: lease.fencingToken });
          releasing = i;
          expect(await lease.release()).toBe('released');
        }),
      );
      // The next waiter starts only when this one holds its place in line.
      await waitForCount(fixture.admin, prefix, i + 2);
    }
    const queued = await contenders(fixture.admin, prefix);
    expect(queued).toHaveLength(WAITERS + 1);
    expect(grants).toHaveLength(0);

    releasing = -1;
    expect(await holder.release()).toBe('released');
    await Promise.all(done);

    expect(grants.map((g) => g.index)).toEqual(Array.from({ length: WAITERS }, (_, i) => i));
    const tokens = [holder.fencingToken, ...grants.map((g) => g.token)];
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    // Each grant's token is the create revision of the key it queued with, in line order.
    expect(tokens).toEqual(queued.map((q) => q.createRevision));
    expect(overlaps).toEqual([]);
    expect(await fixture.admin.getAll().prefix(prefix).count()).toBe(0);
  });
});
