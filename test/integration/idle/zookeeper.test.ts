/**
 * What a released key leaves behind on ZooKeeper (docs/engines/zookeeper.md, "What a released key
 * leaves behind"): nothing, once the leader's next container check has run. A key's node is a
 * container; its contender nodes go with each release, and the leader deletes the empty
 * container on its check (`znode.container.checkIntervalMs`: ZK_CONTAINER_CHECK_MS, 1000 ms on
 * the ensemble of `scripts/services.sh`, without its rate limit). Only the namespace's two shared
 * nodes stay.
 *
 * FENCELOCK_IDLE_KEYS sets how many distinct keys are locked and released (2,000 by default;
 * 10,000 took about a minute here, see the report in the test's output).
 */
import { describe, expect, it } from 'vitest';
import { ZK_CONTAINER_CHECK_MS } from '../../helpers/engines.js';
import type { ZkAdmin } from '../../helpers/zookeeper.js';
import { children, sleep, useNamespace } from '../zookeeper/support.js';

const KEYS = Number(process.env.FENCELOCK_IDLE_KEYS || 2_000);
/** Keys locked and released at once. */
const BATCH = 500;

const ns = useNamespace('idle');

/** Whether `path` exists; only "no node" (-101) means no, any other error rejects. */
function exists(admin: ZkAdmin, path: string): Promise<boolean> {
  return admin.exists(path, false).then(
    () => true,
    (error: unknown) => {
      if (error instanceof Error && /^-101\b/.test(error.message)) return false;
      throw error;
    },
  );
}

/** Every node under `path`, `path` included (0 when it does not exist). */
async function countNodes(admin: ZkAdmin, path: string): Promise<number> {
  if (!(await exists(admin, path))) return 0;
  let count = 1;
  for (const name of await children(admin, path))
    count += await countNodes(admin, `${path}/${name}`);
  return count;
}

/** Poll until `/<namespace>/locks` has no child; how long that took, ms. Throws after `timeoutMs`. */
async function waitUntilNoKeyNode(timeoutMs: number): Promise<number> {
  const locks = `/${ns.namespace}/locks`;
  const startedAt = performance.now();
  for (;;) {
    const left = (await children(ns.admin, locks)).length;
    if (left === 0) return performance.now() - startedAt;
    if (performance.now() - startedAt > timeoutMs) {
      throw new Error(`${left} key nodes still under ${locks} after ${timeoutMs} ms`);
    }
    await sleep(200);
  }
}

describe('zookeeper: a released key leaves nothing behind', () => {
  it(`${KEYS} distinct keys locked and released: the namespace back to its shared nodes after the container check`, async () => {
    const locker = ns.locker();
    const root = `/${ns.namespace}`;
    expect(await countNodes(ns.admin, root)).toBe(0);

    const startedAt = performance.now();
    const lastKeyNode = ns.backend().dirOf(`idle-${KEYS - 1}`);
    let lastKeyNodeWhileHeld = false;
    for (let first = 0; first < KEYS; first += BATCH) {
      const batch = Array.from({ length: Math.min(BATCH, KEYS - first) }, (_, i) => first + i);
      const tokens = await Promise.all(
        batch.map((n) =>
          locker.withLock(`idle-${n}`, async (lease) => {
            if (n === KEYS - 1) lastKeyNodeWhileHeld = await exists(ns.admin, lastKeyNode);
            return lease.fencingToken;
          }),
        ),
      );
      expect(tokens.every((t) => t > 0n)).toBe(true);
    }
    const lockedMs = performance.now() - startedAt;
    // The key nodes were there while held (so "gone" below means the server deleted them).
    expect(lastKeyNodeWhileHeld).toBe(true);
    // Every key was released: no contender node is left, only the empty key nodes the container
    // check has not reached yet (none, when a check ran since the last release).
    const left = (await children(ns.admin, `${root}/locks`)).length;
    expect(left).toBeLessThanOrEqual(KEYS);

    // The bound: one container check, then the deletes (no rate limit on this ensemble).
    const goneMs = await waitUntilNoKeyNode(2 * ZK_CONTAINER_CHECK_MS + 30_000);
    // Only `/<namespace>` and `/<namespace>/locks` stay, whatever the number of keys.
    expect(await countNodes(ns.admin, root)).toBe(2);
    console.info(
      `zookeeper idle: ${KEYS} keys locked and released in ${Math.round(lockedMs)} ms; ` +
        `${left} key nodes left at the end, all gone ${Math.round(goneMs)} ms later`,
    );
  }, 300_000);

  it('a key whose node the server removed gets a larger token afterwards', async () => {
    const locker = ns.locker();
    const key = 'idle-token';
    const dir = ns.backend().dirOf(key);
    const first = await locker.withLock(key, async (lease) => lease.fencingToken);
    await waitUntilGone(dir);
    const second = await locker.withLock(key, async (lease) => lease.fencingToken);
    expect(second).toBeGreaterThan(first);
    // Made again as a container: the server deletes it again.
    await waitUntilGone(dir);
  });
});

/** Poll until `path` does not exist; throws after two container checks and 10 s. */
async function waitUntilGone(path: string): Promise<void> {
  const deadline = performance.now() + 2 * ZK_CONTAINER_CHECK_MS + 10_000;
  for (;;) {
    await ns.admin.sync(path);
    if (!(await exists(ns.admin, path))) return;
    if (performance.now() > deadline) throw new Error(`${path} was not deleted`);
    await sleep(100);
  }
}
