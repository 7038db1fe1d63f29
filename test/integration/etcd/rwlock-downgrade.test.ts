/**
 * Read-write downgrade and upgrade on etcd (Curator's `InterProcessReadWriteLock` rules):
 * - inside `withLock` of a write lock, a read lock of the same key from the same locker is
 *   granted at once past its own writer (first attempt), and stays held after the write lock
 *   is released;
 * - inside `withLock` of a read lock, a write lock of the same key is refused at once with
 *   `InvalidArgumentError` (it would wait for itself), before any engine call, so no key is
 *   written for it.
 */
import { describe, expect, it, vi } from 'vitest';
import type { EtcdBackend } from '../../../src/backends/etcd/index.js';
import { InvalidArgumentError, type Lease } from '../../../src/index.js';
import { contenders, settledWithin, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('rw-downgrade');

/** The contender keys under `dir` in create order, as `[owner, mode, create revision]`. */
async function line(dir: string): Promise<[string, 'read' | 'write', bigint][]> {
  return (await contenders(fixture.admin, dir)).map((c) => {
    const name = c.key.slice(dir.length);
    const owner = name.slice(name.lastIndexOf('-') + 1);
    return [owner, name.startsWith('r-') ? 'read' : 'write', c.createRevision];
  });
}

async function count(dir: string): Promise<number> {
  return fixture.admin.getAll().prefix(dir).count();
}

describe('etcd read-write lock: downgrade and upgrade', () => {
  it('downgrade: a read lock inside withLock of the write lock is granted at once and outlives it', async () => {
    const key = 'rw:downgrade';
    const locker = fixture.locker({ ttlMs: 10_000 });
    const other = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
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
      expect(await line(dir)).toEqual([
        [w.owner, 'write', w.fencingToken],
        [reader.owner, 'read', reader.fencingToken],
      ]);
      // Nobody else gets in while the write lock is held: not a reader, not a writer.
      expect(await other.tryAcquire(key, { mode: 'read' })).toBeNull();
      expect(await other.tryAcquire(key, { mode: 'write' })).toBeNull();
    });
    attempt.mockRestore();

    // The write lock is released; the read lease is still held, on the engine too.
    expect(writerLease!.isHeld).toBe(false);
    expect(reader!.isHeld).toBe(true);
    expect(await line(dir)).toEqual([[reader!.owner, 'read', reader!.fencingToken]]);
    const info = await other.inspect(key);
    expect(info.holder?.owner).toBe(reader!.owner);
    expect(info.holder?.fencingToken).toBe(reader!.fencingToken);
    // Now it is an ordinary read lock: another reader shares it, a writer waits for it.
    const otherReader = await other.tryAcquire(key, { mode: 'read' });
    expect(otherReader).not.toBeNull();
    expect(await otherReader!.release()).toBe('released');
    expect(await other.tryAcquire(key, { mode: 'write' })).toBeNull();
    expect(await reader!.release()).toBe('released');
    expect(await count(dir)).toBe(0);
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
    const dir = ((await locker.backend()) as EtcdBackend).dirOf(key);
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
      `etcd downgrade behind a queued writer: ${reader ? 'granted' : `refused (${String(refusal)})`} after ${Math.round(downgradeMs)} ms`,
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
    expect(await count(dir)).toBe(0);
  });

  it('upgrade: a write lock inside withLock of a read lock is refused at once, with no key', async () => {
    const key = 'rw:upgrade';
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
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
        // Refused before any engine call, so no key could be written.
        expect(calls).toBe(0);
        expect(elapsedMs).toBeLessThan(1000);
        expect(await line(dir)).toEqual([[r.owner, 'read', r.fencingToken]]);
        expect(r.isHeld).toBe(true);
        return 'done';
      },
      { mode: 'read' },
    );
    expect(result).toBe('done');
    expect(readerLease!.isHeld).toBe(false);
    expect(await count(dir)).toBe(0);
    // Outside the read lock's scope, the same locker takes the write lock as usual.
    const writer = await locker.acquire(key, { waitMs: 3000 });
    expect(writer.fencingToken).toBeGreaterThan(readerLease!.fencingToken);
    expect(await writer.release()).toBe('released');
  });
});
