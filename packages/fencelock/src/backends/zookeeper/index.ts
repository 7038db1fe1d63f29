/**
 * `fencelock/zookeeper`: locks, semaphores and leader elections on a ZooKeeper ensemble (the
 * native `zookeeper` package), with ephemeral sequential nodes, czxid fencing tokens, predecessor
 * watches, read-write modes and session states (Apache Curator's lock and leader-latch recipes).
 *
 * @example
 * import { createLocker } from 'fencelock';
 * const locker = createLocker('zk://127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183/myapp');
 * await locker.withLock('report', async (lease) => { … });
 */
import { createRequire } from 'node:module';
import { InvalidArgumentError } from '../../errors.js';
import { ZookeeperBackend } from './backend.js';
import type { NativeZooKeeperClass } from './session.js';
import { parseZookeeperUrl, type ZookeeperUrlConfig } from './url.js';

export { ZookeeperBackend, type ZookeeperBackendSettings } from './backend.js';
export {
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  outsideNativeCallbacks,
  ZkSession,
  ZooKeeperError,
} from './session.js';

import { isOptionsObject } from '../../options.js';

export { parseZookeeperUrl, type SuspendedPolicy, type ZookeeperUrlConfig } from './url.js';

/** Options of `createZookeeperBackend`. */
export interface ZookeeperBackendOptions {
  /**
   * A `zk://host:port[,host:port…][/namespace][?connectTimeoutMs=…&suspended=lose|wait]` URL.
   * `suspended=lose` (default): a lost connection loses the locks held (Curator's advice);
   * `suspended=wait`: they stay held while the session can still be alive on the server.
   * `connectTimeoutMs` (default 5000) bounds a new session's connection and each request: an
   * ensemble that refuses or never answers fails an operation with `BackendError` in the one
   * form (`<host:port,…> unreachable: connection refused` / `no answer within N ms`).
   */
  readonly url: string;
}

const require = createRequire(import.meta.url);

/**
 * Create a ZooKeeper backend. No connection is made before the first lock operation; each
 * session is a client connection of its own.
 * @throws InvalidArgumentError for a malformed URL.
 * @throws Error when the `zookeeper` package is not installed (`npm install zookeeper`).
 */
export function createZookeeperBackend(
  options: ZookeeperBackendOptions | ZookeeperUrlConfig,
): ZookeeperBackend {
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', '{ url }', options);
  }
  let config: ZookeeperUrlConfig;
  if ('connect' in options) config = options;
  else if (typeof options.url === 'string') config = parseZookeeperUrl(options.url);
  else throw new InvalidArgumentError('url', 'a zk:// URL', options.url);
  // The package is CommonJS with a native addon; its default export is the client class.
  const native = require('zookeeper') as NativeZooKeeperClass;
  return new ZookeeperBackend(native, config);
}
