/**
 * Shared bits of the ZooKeeper integration tests: store URLs on the 3-server ensemble of
 * `scripts/services.sh up zookeeper` (one namespace per test file), a test-only admin client
 * that reads the ensemble behind fencelock's back, and polling helpers.
 *
 * Contender nodes are `/<namespace>/locks/<encoded key>/_c_<owner>-<w|r>-<10-digit sequence>`
 * (`backend.dirOf(key)` is the key's node); a grant's fencing token is its node's czxid.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll } from 'vitest';
import {
  createZookeeperBackend,
  type ZookeeperBackend,
} from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import {
  createLocker,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { ZK_HOSTS } from '../../helpers/engines.js';
import { openAdmin, removeTree, type ZkAdmin } from '../../helpers/zookeeper.js';

export { ZK_HOSTS };

/** A namespace no other run or test file uses. */
export function uniqueNamespace(tag: string): string {
  return `fencelock-it-${tag}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** The store URL for `namespace` over all three servers. */
export function zkUrl(namespace: string, hosts = ZK_HOSTS): string {
  return `zk://${hosts}/${namespace}`;
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** A contender node as the ensemble has it. */
export interface ContenderNode {
  /** Node name, `_c_<owner>-<w|r>-<sequence>`. */
  readonly name: string;
  /** Full path. */
  readonly path: string;
  readonly owner: string;
  readonly mode: 'write' | 'read';
  readonly sequence: number;
  /** Zxid of the node's create: the fencing token of its grant. */
  readonly czxid: bigint;
  /** Session id (hex) the ephemeral node belongs to. */
  readonly ephemeralOwner: string;
}

const NODE_NAME = /^_c_([0-9a-f]+)-([wr])-(\d{10})$/;

/** Whether `error` is the admin client's "no node" (code -101; its messages start with the code). */
function isNoNode(error: unknown): boolean {
  return error instanceof Error && /^-101\b/.test(error.message);
}

/**
 * Children of `path`, unsorted; [] when it does not exist. Any other error (a lost connection)
 * rejects: an engine that cannot answer must never look like an empty one. The admin's server
 * is synced with the leader first: a ZooKeeper follower may lag, and a read from it alone could
 * miss what another client's session just did.
 */
export async function children(admin: ZkAdmin, path: string): Promise<string[]> {
  await (admin as ZkAdmin & { sync(path: string): Promise<string> }).sync(path);
  try {
    return await admin.get_children(path, false);
  } catch (error) {
    if (isNoNode(error)) return [];
    throw error;
  }
}

/**
 * The contender nodes under `dir`, lowest sequence first (the queue order), with their czxid.
 * A node deleted between the listing and its stat is left out. Throws on a child that is not a
 * contender node (the backend must write nothing else there).
 */
export async function contenders(admin: ZkAdmin, dir: string): Promise<ContenderNode[]> {
  const nodes: ContenderNode[] = [];
  for (const name of await children(admin, dir)) {
    const m = NODE_NAME.exec(name);
    if (m === null) throw new Error(`unexpected child ${name} under ${dir}`);
    const path = `${dir}/${name}`;
    let stat: { czxid: number; ephemeralOwner: string };
    try {
      stat = await admin.exists(path, false);
    } catch (error) {
      if (isNoNode(error)) continue;
      throw error;
    }
    nodes.push({
      name,
      path,
      owner: m[1]!,
      mode: m[2] === 'w' ? 'write' : 'read',
      sequence: Number(m[3]),
      czxid: BigInt(stat.czxid),
      ephemeralOwner: stat.ephemeralOwner,
    });
  }
  return nodes.sort((a, b) => a.sequence - b.sequence);
}

/** Number of children of `dir` (0 when it does not exist). */
export async function countChildren(admin: ZkAdmin, dir: string): Promise<number> {
  return (await children(admin, dir)).length;
}

/**
 * Remove `/<namespace>` and everything under it, and make sure it is gone: sessions that were
 * just closed may still have ephemeral nodes there (the server deletes them when it processes
 * the close), and a lagging follower may list children late, so it retries for up to
 * `timeoutMs`. Throws if the namespace is still there then.
 */
export async function removeNamespace(
  admin: ZkAdmin,
  namespace: string,
  timeoutMs = 10_000,
): Promise<void> {
  const root = `/${namespace}`;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    await (admin as ZkAdmin & { sync(path: string): Promise<string> }).sync(root);
    await removeTree(admin, root);
    try {
      await admin.exists(root, false);
    } catch (error) {
      if (isNoNode(error)) return;
      throw error;
    }
    if (performance.now() >= deadline) throw new Error(`${root} is still there after clean-up`);
    await sleep(100);
  }
}

/** Poll until exactly `count` children exist under `dir`; throws after `timeoutMs`. */
export async function waitForCount(
  admin: ZkAdmin,
  dir: string,
  count: number,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const n = await countChildren(admin, dir);
    if (n === count) return;
    if (performance.now() >= deadline) {
      throw new Error(`expected ${count} nodes under ${dir} within ${timeoutMs} ms, saw ${n}`);
    }
    await sleep(5);
  }
}

export { settledWithin } from '../../helpers/promises.js';

/** Something `useNamespace` closes after the file's tests. */
interface Closable {
  close(): Promise<void> | void;
}

/**
 * One namespace for a test file: its store URL, an admin client opened before the tests, and
 * lockers (`locker()`) and backends (`backend()`, or anything given to `track()`) that are
 * closed, with the namespace's nodes removed, after them.
 */
export function useNamespace(tag: string): {
  readonly namespace: string;
  readonly url: string;
  readonly admin: ZkAdmin;
  locker(options?: LockerOptions): Locker;
  backend(): ZookeeperBackend;
  track<T extends Closable>(closable: T): T;
} {
  const namespace = uniqueNamespace(tag);
  const url = zkUrl(namespace);
  const closables: Closable[] = [];
  let admin: ZkAdmin | undefined;
  beforeAll(async () => {
    admin = await openAdmin();
  });
  afterAll(async () => {
    await Promise.allSettled(closables.map(async (c) => c.close()));
    if (admin === undefined) return;
    try {
      await removeNamespace(admin, namespace);
    } finally {
      admin.close();
    }
  });
  const track = <T extends Closable>(closable: T): T => {
    closables.push(closable);
    return closable;
  };
  return {
    namespace,
    url,
    get admin() {
      if (admin === undefined) throw new Error('the admin client opens in beforeAll');
      return admin;
    },
    locker(options) {
      return track(createLocker(url, options));
    },
    backend() {
      return track(createZookeeperBackend({ url }));
    },
    track,
  };
}
