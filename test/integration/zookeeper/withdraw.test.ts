/**
 * A failed acquire leaves no contender node behind (Curator's `InterProcessMutex`: the
 * `internalLockLoop` finally block deletes its own node on any failure, with a guaranteed delete
 * that is retried until it reaches the ensemble). A node left in place would stay in line until
 * its session ends, and block every later waiter of the key, the same locker's next acquire
 * included.
 *
 * The faults are injected into the locker's own session object (a slow create, a lost reply, a
 * delete that cannot reach the ensemble); everything else runs against the real ensemble, and
 * the admin client checks what the ensemble has.
 */
import { describe, expect, it } from 'vitest';
import {
  ZooKeeperError,
  type ZookeeperBackend,
} from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { ZkSession } from '../../../packages/fencelock/src/backends/zookeeper/session.js';
import { LockTimeoutError } from '../../../packages/fencelock/src/index.js';
import { contenders, sleep, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('withdraw');
const TTL = 10_000;
const CONNECTION_LOSS = -4;

/** Replace `name` on this one session object; returns the undo. */
function patch<K extends 'create' | 'children' | 'delete'>(
  session: ZkSession,
  name: K,
  replacement: (original: ZkSession[K]) => ZkSession[K],
): () => void {
  const original = session[name].bind(session) as ZkSession[K];
  Object.defineProperty(session, name, {
    value: replacement(original),
    configurable: true,
    writable: true,
  });
  return () => {
    delete (session as unknown as Record<string, unknown>)[name];
  };
}

describe('ZooKeeper: a failed acquire withdraws its node', () => {
  it('an attempt that fails after its node was created deletes it, also after the caller timed out', async () => {
    const key = 'late-create-then-error';
    const locker = fixture.locker({ ttlMs: TTL });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.dirOf(key);
    const session = await backend.session(TTL);
    // A slow create: it reaches the ensemble only after the caller gave up (and after the
    // withdrawal that followed found nothing); then the next read of the attempt fails.
    let created = false;
    const undoCreate = patch(session, 'create', (create) => async (path, data, mode) => {
      if (!path.startsWith(`${dir}/_c_`)) return create(path, data, mode);
      await sleep(400);
      const made = await create(path, data, mode);
      created = true;
      return made;
    });
    let failed = false;
    const undoChildren = patch(session, 'children', (children) => async (path) => {
      if (path === dir && created && !failed) {
        failed = true;
        throw new ZooKeeperError(CONNECTION_LOSS, 'connection loss (injected)');
      }
      return children(path);
    });
    try {
      await expect(locker.acquire(key, { waitMs: 100 })).rejects.toBeInstanceOf(LockTimeoutError);
      await waitUntil(() => failed);
    } finally {
      undoCreate();
      undoChildren();
    }
    // The attempt's own node went with its failure.
    await sleep(200);
    await waitForCount(fixture.admin, dir, 0, 3_000);
    // Nothing in line: the same locker's next acquire gets the key at once.
    const lease = await locker.acquire(key, { waitMs: 3_000 });
    await lease.release();
  });

  it('a withdrawal whose delete cannot reach the ensemble is retried until the node is gone', async () => {
    const key = 'delete-lost';
    const holderLocker = fixture.locker({ ttlMs: TTL });
    const locker = fixture.locker({ ttlMs: TTL });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.dirOf(key);
    const session = await backend.session(TTL);
    const holder = await holderLocker.acquire(key);
    let refused = 0;
    const undoDelete = patch(session, 'delete', (del) => async (path, version) => {
      if (path.startsWith(`${dir}/`) && refused === 0) {
        refused += 1;
        throw new ZooKeeperError(CONNECTION_LOSS, 'connection loss (injected)');
      }
      return del(path, version);
    });
    try {
      const waiting = locker.acquire(key, { waitMs: 1_000 });
      waiting.catch(() => undefined);
      await waitForCount(fixture.admin, dir, 2);
      // Times out in line; its withdrawal's delete fails once.
      await expect(waiting).rejects.toBeInstanceOf(LockTimeoutError);
      await waitUntil(() => refused === 1);
      // Retried in the background: only the holder's node is left.
      await waitForCount(fixture.admin, dir, 1, 5_000);
      const [left] = await contenders(fixture.admin, dir);
      expect(left?.owner).toBe(holder.owner);
    } finally {
      undoDelete();
      await holder.release();
    }
    // The next acquire of the same locker is not blocked by a node of its own.
    const lease = await locker.acquire(key, { waitMs: 3_000 });
    await lease.release();
    await waitForCount(fixture.admin, dir, 0);
  });
});

async function waitUntil(check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() >= deadline) throw new Error(`not within ${timeoutMs} ms`);
    await sleep(5);
  }
}
