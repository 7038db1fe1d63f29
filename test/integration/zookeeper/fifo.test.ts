/**
 * FIFO on ZooKeeper: 20 waiters, each on its own locker (its own client and session), queue on a
 * held key in a known order (each starts only once the previous one's contender node is in the
 * ensemble). When the holder releases, the key passes down the line in exactly the order of the
 * node sequence numbers, and the fencing tokens (the nodes' czxids) strictly increase.
 */
import { describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { Lease } from '../../../packages/fencelock/src/index.js';
import { contenders, countChildren, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('fifo');
const WAITERS = 20;

describe('ZooKeeper FIFO queue', () => {
  it('grants 20 queued waiters in sequence order with strictly increasing tokens', async () => {
    const key = 'fifo:resource';
    const holderLocker = fixture.locker({ ttlMs: 10_000 });
    const holder = await holderLocker.acquire(key);
    const dir = ((await holderLocker.backend()) as ZookeeperBackend).dirOf(key);

    const grants: { index: number; owner: string; token: bigint }[] = [];
    // Mutual exclusion: a grant comes only after the previous holder started its release.
    let releasing = -2;
    const overlaps: number[] = [];
    const done: Promise<void>[] = [];
    for (let i = 0; i < WAITERS; i++) {
      const locker = fixture.locker({ ttlMs: 10_000 });
      done.push(
        locker.acquire(key, { waitMs: 60_000 }).then(async (lease: Lease) => {
          if (releasing !== i - 1) overlaps.push(i);
          grants.push({ index: i, owner: lease.owner, token: lease.fencingToken });
          releasing = i;
          expect(await lease.release()).toBe('released');
        }),
      );
      // The next waiter starts only when this one holds its place in line.
      await waitForCount(fixture.admin, dir, i + 2);
    }
    const queued = await contenders(fixture.admin, dir);
    expect(queued).toHaveLength(WAITERS + 1);
    expect(queued.every((n) => n.mode === 'write')).toBe(true);
    expect(queued[0]!.owner).toBe(holder.owner);
    expect(queued[0]!.czxid).toBe(holder.fencingToken);
    // Every waiter's node lives in its own session.
    expect(new Set(queued.map((n) => n.ephemeralOwner)).size).toBe(WAITERS + 1);
    expect(grants).toHaveLength(0);

    releasing = -1;
    expect(await holder.release()).toBe('released');
    await Promise.all(done);

    expect(grants.map((g) => g.index)).toEqual(Array.from({ length: WAITERS }, (_, i) => i));
    const tokens = [holder.fencingToken, ...grants.map((g) => g.token)];
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    // Grant i went to the owner of the i-th node in sequence order, with that node's czxid.
    expect([holder.owner, ...grants.map((g) => g.owner)]).toEqual(queued.map((n) => n.owner));
    expect(tokens).toEqual(queued.map((n) => n.czxid));
    expect(overlaps).toEqual([]);
    expect(await countChildren(fixture.admin, dir)).toBe(0);
    expect((await holderLocker.inspect(key)).holder).toBeNull();
  });
});
