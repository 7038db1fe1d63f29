/**
 * Read-write locks on ZooKeeper: readers share the key; a writer waits for every earlier
 * contender; a reader waits only for earlier writers, so a reader that queued behind a waiting
 * writer waits for that writer even while only readers hold the key (no writer starvation).
 * Fencing tokens (the nodes' czxids) of all grants strictly increase in grant order.
 *
 * Downgrade and upgrade (Curator's `InterProcessReadWriteLock` rules): inside `withLock` of a
 * write lock, a read lock of the same key from the same locker is granted at once past its own
 * writer (first attempt), and stays held after the write lock is released; inside `withLock` of a
 * read lock, a write lock of the same key is refused at once with `InvalidArgumentError` (it
 * would wait for itself), before any engine call, so no node is created for it.
 */
import { describe, expect, it, vi } from 'vitest';
import type { ZookeeperBackend } from '../../../src/backends/zookeeper/index.js';
import type { LockMode } from '../../../src/core/backend.js';
import {
  InvalidArgumentError,
  type Lease,
  type Locker,
  LockTimeoutError,
} from '../../../src/index.js';
import { contenders, countChildren, settledWithin, useNamespace, waitForCount } from './support.js';

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

async function dirOf(locker: Locker, key: string): Promise<string> {
  return ((await locker.backend()) as ZookeeperBackend).dirOf(key);
}

describe('ZooKeeper read-write lock', () => {
  it('shares among readers; queues writers and later readers in order; tokens increase', async () => {
    const key = 'rw:resource';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = await dirOf(probe, key);

    // Three readers hold at once.
    const r1 = await contender(key, 'read', 'R1', grants);
    const r2 = await contender(key, 'read', 'R2', grants);
    const r3 = await contender(key, 'read', 'R3', grants);
    expect(grants.map((g) => g.name)).toEqual(['R1', 'R2', 'R3']);
    expect([r1, r2, r3].every((r) => r.isHeld)).toBe(true);
    // A writer cannot get in, by tryAcquire (its node is withdrawn).
    expect(await probe.tryAcquire(key, { mode: 'write' })).toBeNull();
    await waitForCount(fixture.admin, dir, 3);
    const readers = await contenders(fixture.admin, dir);
    expect(readers.map((n) => [n.owner, n.mode, n.czxid])).toEqual(
      [r1, r2, r3].map((r) => [r.owner, 'read', r.fencingToken]),
    );

    // W queues behind the readers; R4 and R5 queue behind W.
    const w = contender(key, 'write', 'W', grants);
    await waitForCount(fixture.admin, dir, 4);
    const r4 = contender(key, 'read', 'R4', grants);
    await waitForCount(fixture.admin, dir, 5);
    const r5 = contender(key, 'read', 'R5', grants);
    await waitForCount(fixture.admin, dir, 6);
    expect((await contenders(fixture.admin, dir)).map((n) => n.mode)).toEqual([
      'read',
      'read',
      'read',
      'write',
      'read',
      'read',
    ]);
    // Only readers hold, yet R4 and R5 wait: an earlier writer is queued.
    expect(await settledWithin(Promise.race([w, r4, r5]), 300)).toBe(false);
    // A reader's tryAcquire also yields to the queued writer.
    expect(await probe.tryAcquire(key, { mode: 'read' })).toBeNull();
    await waitForCount(fixture.admin, dir, 6);

    // W waits until every earlier reader has released, whatever the order.
    expect(await r2.release()).toBe('released');
    expect(await settledWithin(w, 300)).toBe(false);
    expect(await r3.release()).toBe('released');
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
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('a reader queued behind a writer goes in, beside the earlier reader, once the writer gives up', async () => {
    // The writer times out: its node is deleted and the reader behind it goes in while the
    // earlier reader still holds (it no longer waits for a writer that left).
    const key = 'rw:withdrawn-writer';
    const grants: { name: string; token: bigint }[] = [];
    const probe = fixture.locker({ ttlMs: 10_000 });
    const dir = await dirOf(probe, key);
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
    // The writer's node is gone; both readers' nodes remain.
    expect((await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode])).toEqual([
      [r1.owner, 'read'],
      [reader2.owner, 'read'],
    ]);
    expect(await reader2.release()).toBe('released');
    expect(await r1.release()).toBe('released');
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('downgrade: a read lock inside withLock of the write lock is granted at once and outlives it', async () => {
    const key = 'rw:downgrade';
    const locker = fixture.locker({ ttlMs: 10_000 });
    const other = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.dirOf(key);
    const attempt = vi.spyOn(backend, 'attempt');
    let writerLease: Lease | undefined;
    let reader: Lease | undefined;

    await locker.withLock(key, async (w) => {
      writerLease = w;
      // waitMs bounds the test: a reader that waited for its own writer would time out.
      reader = await locker.acquire(key, { mode: 'read', waitMs: 3000 });
      // One attempt, granted: it did not wait for the write lock held by the same caller.
      const readerAttempts = attempt.mock.calls.filter(([r]) => r.owner === reader!.owner);
      expect(readerAttempts).toHaveLength(1);
      expect(readerAttempts[0]![0]).toMatchObject({ mode: 'read', heldWriter: w.owner });
      expect(reader.fencingToken).toBeGreaterThan(w.fencingToken);
      expect(w.isHeld && reader.isHeld).toBe(true);
      expect((await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode, n.czxid])).toEqual(
        [
          [w.owner, 'write', w.fencingToken],
          [reader.owner, 'read', reader.fencingToken],
        ],
      );
      // Nobody else gets in while the write lock is held: not a reader, not a writer.
      expect(await other.tryAcquire(key, { mode: 'read' })).toBeNull();
      expect(await other.tryAcquire(key, { mode: 'write' })).toBeNull();
    });
    attempt.mockRestore();

    // The write lock is released; the read lease is still held, on the engine too.
    expect(writerLease!.isHeld).toBe(false);
    expect(reader!.isHeld).toBe(true);
    expect((await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode])).toEqual([
      [reader!.owner, 'read'],
    ]);
    const info = await other.inspect(key);
    expect(info.holder?.owner).toBe(reader!.owner);
    expect(info.holder?.fencingToken).toBe(reader!.fencingToken);
    // Now it is an ordinary read lock: another reader shares it, a writer waits for it.
    const otherReader = await other.tryAcquire(key, { mode: 'read' });
    expect(otherReader).not.toBeNull();
    expect(await otherReader!.release()).toBe('released');
    expect(await other.tryAcquire(key, { mode: 'write' })).toBeNull();
    expect(await reader!.release()).toBe('released');
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('downgrade with another writer queued behind the write lock: settles at once, never deadlocks', async () => {
    // Another locker's writer W2 queues behind the caller's write lock W; then the caller asks
    // for the read lock inside W's withLock. Waiting for W2 means waiting for W itself, which is
    // only released when the read acquire returns: a deadlock (for ever with the default
    // waitMs). Whatever the answer (a grant, or a refusal), it must come at once, and the grants
    // must stay exclusive (W2 never beside the read lease) with tokens increasing in grant order.
    const key = 'rw:downgrade-queued-writer';
    const locker = fixture.locker({ ttlMs: 10_000 });
    const other = fixture.locker({ ttlMs: 10_000 });
    const dir = await dirOf(locker, key);
    const grants: { name: string; token: bigint }[] = [];
    let reader: Lease | undefined;
    let refusal: unknown;
    let downgradeMs = Number.NaN;
    let w2: Promise<Lease> | undefined;

    await locker.withLock(key, async (w) => {
      grants.push({ name: 'W', token: w.fencingToken });
      w2 = other.acquire(key, { waitMs: 30_000 }).then((lease) => {
        grants.push({ name: 'W2', token: lease.fencingToken });
        if (reader?.isHeld) grants.push({ name: 'W2 beside the read lease', token: 0n });
        return lease;
      });
      w2.catch(() => undefined);
      await waitForCount(fixture.admin, dir, 2);
      const startedAt = performance.now();
      // waitMs bounds the test when the acquire waits (a deadlock would last for ever).
      await locker.acquire(key, { mode: 'read', waitMs: 10_000 }).then(
        (lease) => {
          reader = lease;
          grants.push({ name: 'R', token: lease.fencingToken });
        },
        (error: unknown) => {
          refusal = error;
        },
      );
      downgradeMs = performance.now() - startedAt;
    });
    console.info(
      `zookeeper downgrade behind a queued writer: ${reader ? 'granted' : `refused (${String(refusal)})`} after ${Math.round(downgradeMs)} ms`,
    );
    expect(
      downgradeMs,
      'the read acquire waited for a writer that waits for the caller',
    ).toBeLessThan(2000);
    if (reader !== undefined) {
      expect(await settledWithin(w2!, 300)).toBe(false);
      expect(await reader.release()).toBe('released');
    }
    expect(await (await w2!).release()).toBe('released');
    expect(grants.map((g) => g.name)).not.toContain('W2 beside the read lease');
    for (let i = 1; i < grants.length; i++) {
      expect(grants[i]!.token, `token of ${grants[i]!.name}`).toBeGreaterThan(grants[i - 1]!.token);
    }
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('upgrade: a write lock inside withLock of a read lock is refused at once, with no node', async () => {
    const key = 'rw:upgrade';
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.dirOf(key);
    let readerLease: Lease | undefined;

    const result = await locker.withLock(
      key,
      async (r) => {
        readerLease = r;
        const attempt = vi.spyOn(backend, 'attempt');
        const startedAt = performance.now();
        // waitMs bounds the test: a write lock that queued would wait for the reader, then time out.
        const error = await locker.acquire(key, { waitMs: 3000 }).then(
          (lease) => lease,
          (e: unknown) => e,
        );
        const elapsedMs = performance.now() - startedAt;
        const calls = attempt.mock.calls.length;
        attempt.mockRestore();
        expect(error).toBeInstanceOf(InvalidArgumentError);
        expect(String((error as Error).message)).toMatch(/upgrade/);
        // Refused before any engine call, so no node could be created.
        expect(calls).toBe(0);
        expect(elapsedMs).toBeLessThan(1000);
        expect((await contenders(fixture.admin, dir)).map((n) => [n.owner, n.mode])).toEqual([
          [r.owner, 'read'],
        ]);
        expect(r.isHeld).toBe(true);
        return 'done';
      },
      { mode: 'read' },
    );
    expect(result).toBe('done');
    expect(readerLease!.isHeld).toBe(false);
    expect(await countChildren(fixture.admin, dir)).toBe(0);
    // Outside the read lock's scope, the same locker takes the write lock as usual.
    const writer = await locker.acquire(key, { waitMs: 3000 });
    expect(writer.fencingToken).toBeGreaterThan(readerLease!.fencingToken);
    expect(await writer.release()).toBe('released');
  });
});

function byToken(a: { token: bigint }, b: { token: bigint }): number {
  return a.token < b.token ? -1 : a.token > b.token ? 1 : 0;
}
