/**
 * A test-only ZooKeeper client (the `zookeeper` package's promise API) for reading and changing
 * the ensemble behind fencelock's back. Never handed to a backend.
 */
import { createRequire } from 'node:module';
import { outsideNativeCallbacks } from '../../packages/fencelock/src/backends/zookeeper/session.js';
import { ZK_HOSTS } from './engines.js';

/** The promise API calls the tests use. */
export interface ZkAdmin {
  get_children(path: string, watch: boolean): Promise<string[]>;
  /** Bring the connected server up to date with the leader before the next read. */
  sync(path: string): Promise<unknown>;
  exists(path: string, watch: boolean): Promise<{ czxid: number; ephemeralOwner: string }>;
  get(path: string, watch: boolean): Promise<[{ czxid: number }, unknown]>;
  delete_(path: string, version: number): Promise<void>;
  create(path: string, data: string, flags: number): Promise<string>;
  close(): void;
  readonly client_id: string;
}

const require = createRequire(import.meta.url);

/** Connect an admin client (10 s session) to `hosts`; throws if none answers within 10 s. */
export async function openAdmin(hosts = ZK_HOSTS): Promise<ZkAdmin> {
  const ZooKeeper = require('zookeeper') as new (
    config: object,
  ) => ZkAdmin & {
    init(config: object): void;
    once(event: string, listener: (...args: unknown[]) => void): void;
  };
  // Never from inside another client's callback (see outsideNativeCallbacks).
  await outsideNativeCallbacks();
  const zk = new ZooKeeper({ connect: hosts, timeout: 10_000, debug_level: 0 });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      zk.close();
      reject(new Error('admin client: no ZooKeeper answer within 10 s'));
    }, 10_000);
    zk.once('connect', () => {
      clearTimeout(timer);
      resolve();
    });
    zk.init({});
  });
  return zk;
}

/** Children of `path`, sorted; [] when it does not exist. */
export async function childrenOf(zk: ZkAdmin, path: string): Promise<string[]> {
  return (await zk.get_children(path, false).catch(() => [] as string[])).sort();
}

/** Delete `path` and everything under it (missing nodes are fine). */
export async function removeTree(zk: ZkAdmin, path: string): Promise<void> {
  for (const name of await childrenOf(zk, path)) await removeTree(zk, `${path}/${name}`);
  await zk.delete_(path, -1).catch(() => undefined);
}
