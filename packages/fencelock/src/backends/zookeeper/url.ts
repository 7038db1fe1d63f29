/**
 * Parse `zk://host:port[,host:port…][/namespace][?params]` store URLs without importing the
 * engine client. The namespace (default `fencelock`) is the top node of every path the backend
 * writes. Parameters: `connectTimeoutMs` (default 5000: the bound of a new session's connection
 * and of each request), `suspended` (`lose`, the default, or `wait`: what a lost connection means
 * for the locks held, see `ZookeeperBackendOptions`).
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter, parseHostList } from '../store-url.js';

/** What a lost connection (SUSPENDED) means for the locks held in the session. */
export type SuspendedPolicy = 'lose' | 'wait';

/** A checked ZooKeeper store URL. */
export interface ZookeeperUrlConfig {
  /** `host:port,host:port` for the client. */
  readonly connect: string;
  /** Top node name, without slashes. */
  readonly namespace: string;
  readonly connectTimeoutMs: number;
  readonly suspended: SuspendedPolicy;
}

const SHAPE = 'zk://host:port[,host:port…][/namespace]';
const PARAMS = ['connectTimeoutMs', 'suspended'];

/** @throws InvalidArgumentError for a malformed URL or parameter. */
export function parseZookeeperUrl(store: string): ZookeeperUrlConfig {
  const match = /^zk:\/\/([^/?#@]+)(\/[^?#]*)?(\?[^#]*)?$/i.exec(store);
  if (match === null) throw new InvalidArgumentError('store', SHAPE, store);
  const [, hosts = '', path = '', query = ''] = match;
  const members = parseHostList(hosts, SHAPE, store).map((m) => `${m.host}:${m.port}`);
  let namespace: string;
  try {
    namespace = decodeURIComponent(path.replace(/^\/+|\/+$/g, '')) || 'fencelock';
  } catch {
    throw new InvalidArgumentError('store', `${SHAPE} with a well-formed namespace`, store);
  }
  assertNamespace(namespace);
  const params = new URLSearchParams(query);
  for (const name of params.keys()) {
    if (!PARAMS.includes(name)) {
      throw new InvalidArgumentError(`store parameter ${name}`, PARAMS.join(', '), name);
    }
  }
  const suspended = params.get('suspended') ?? 'lose';
  if (suspended !== 'lose' && suspended !== 'wait') {
    throw new InvalidArgumentError('store parameter suspended', 'lose or wait', suspended);
  }
  return {
    connect: members.join(','),
    namespace,
    connectTimeoutMs: integerParameter(params, 'connectTimeoutMs', 5000, 1, 600_000),
    suspended,
  };
}

/**
 * A namespace is one node name: not empty, no `/`, not `.` or `..`, no control characters.
 * @throws InvalidArgumentError
 */
function assertNamespace(namespace: unknown): asserts namespace is string {
  if (
    typeof namespace !== 'string' ||
    namespace === '' ||
    namespace === '.' ||
    namespace === '..' ||
    namespace === 'zookeeper' ||
    // biome-ignore lint/suspicious/noControlCharactersInRegex: ZooKeeper refuses these in names.
    /[/\u0000-\u001f\u007f-\u009f]/.test(namespace)
  ) {
    throw new InvalidArgumentError(
      'namespace',
      'one ZooKeeper node name (not empty, no "/", not "." or ".." or "zookeeper")',
      namespace,
    );
  }
}
