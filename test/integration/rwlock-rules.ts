/**
 * Read-write downgrade and upgrade (Curator's `InterProcessReadWriteLock` rules), the same on
 * every queue-based store (etcd, ZooKeeper):
 * - inside `withLock` of a write lock, a read lock of the same key from the same locker is
 *   granted at once past its own writer (first attempt), and stays held after the write lock is
 *   released;
 * - a downgrade that finds another writer queued behind the write lock settles at once (that
 *   writer waits for the caller: waiting would never end) and never lets that writer in beside
 *   the reader;
 * - inside `withLock` of a read lock, a write lock of the same key is refused at once with
 *   `InvalidArgumentError` (it would wait for itself), before any engine call, so no entry is
 *   written for it.
 */
import { expect, it, vi } from 'vitest';
import type { Backend } from '../../packages/fencelock/src/core/backend.js';
import {
  InvalidArgumentError,
  type Lease,
  type Locker,
  type LockerOptions,
} from '../../packages/fencelock/src/index.js';
import { settledWithin } from '../helpers/promises.js';

/** What the rules need of a store's test fixture. */
export interface QueueStore {
  /** Engine name, for messages. */
  readonly engine: string;
  locker(options?: LockerOptions): Locker;
  /** The engine folder (key prefix or node) where the contenders of `key` live. */
  dirOf(backend: Backend, key: string): string;
  /** The contenders under `dir` in queue order, as `[owner, mode, fencing token]`. */
  line(dir: string): Promise<[string, 'read' | 'write', bigint][]>;
  /** How many entries are under `dir`. */
  count(dir: string): Promise<number>;
  /** Wait until exactly `n` entries are under `dir`. */
  waitForCount(dir: string, n: number): Promise<void>;
}

/** Register the downgrade and upgrade tests for `store` (call inside a `describe`). */
export function downgradeAndUpgradeTests(store: QueueStore): void {
  it('downgrade: a read lock inside withLock of the write lock is granted at once and outlives it', async () => {
    const key = 'rw:downgrade';
    const locker = store.locker({ ttlMs: 10_000 });
    const other = store.locker({ ttlMs: 10_000 });
    const backend = await locker.backend();
    const dir = store.dirOf(backend, key);
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
      expect(await store.line(dir)).toEqual([
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
    expect(await store.line(dir)).toEqual([[reader!.owner, 'read', reader!.fencingToken]]);
    const info = await other.inspect(key);
    expect(info.holder?.owner).toBe(reader!.owner);
    expect(info.holder?.fencingToken).toBe(reader!.fencingToken);
    // Now it is an ordinary read lock: another reader shares it, a writer waits for it.
    const otherReader = await other.tryAcquire(key, { mode: 'read' });
    expect(otherReader).not.toBeNull();
    expect(await otherReader!.release()).toBe('released');
    expect(await other.tryAcquire(key, { mode: 'write' })).toBeNull();
    expect(await reader!.release()).toBe('released');
    expect(await store.count(dir)).toBe(0);
  });

  it('downgrade with another writer queued behind the write lock: settles at once, never deadlocks', async () => {
    // Another locker's writer W2 queues behind the caller's write lock W; then the caller asks
    // for the read lock inside W's withLock. Waiting for W2 means waiting for W itself, which is
    // only released when the read acquire returns: a deadlock (for ever with the default
    // waitMs). Whatever the answer (a grant, or a refusal), it must come at once, and the grants
    // must stay exclusive (W2 never beside the read lease) with tokens increasing in grant order.
    const key = 'rw:downgrade-queued-writer';
    const locker = store.locker({ ttlMs: 10_000 });
    const other = store.locker({ ttlMs: 10_000 });
    const dir = store.dirOf(await locker.backend(), key);
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
      await store.waitForCount(dir, 2);
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
      `${store.engine} downgrade behind a queued writer: ${reader ? 'granted' : `refused (${String(refusal)})`} after ${Math.round(downgradeMs)} ms`,
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
    expect(await store.count(dir)).toBe(0);
  });

  it('upgrade: a write lock inside withLock of a read lock is refused at once, with no entry', async () => {
    const key = 'rw:upgrade';
    const locker = store.locker({ ttlMs: 10_000 });
    const backend = await locker.backend();
    const dir = store.dirOf(backend, key);
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
        // Refused before any engine call, so no entry could be written.
        expect(calls).toBe(0);
        expect(elapsedMs).toBeLessThan(1000);
        expect(await store.line(dir)).toEqual([[r.owner, 'read', r.fencingToken]]);
        expect(r.isHeld).toBe(true);
        return 'done';
      },
      { mode: 'read' },
    );
    expect(result).toBe('done');
    expect(readerLease!.isHeld).toBe(false);
    expect(await store.count(dir)).toBe(0);
    // Outside the read lock's scope, the same locker takes the write lock as usual.
    const writer = await locker.acquire(key, { waitMs: 3000 });
    expect(writer.fencingToken).toBeGreaterThan(readerLease!.fencingToken);
    expect(await writer.release()).toBe('released');
  });
}
