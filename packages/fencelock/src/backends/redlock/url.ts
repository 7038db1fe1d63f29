/**
 * Parse `redlock://host:port,host:port,host:port[?prefix=…&nodeTimeoutMs=…]` store URLs without
 * importing the engine client: an odd number (≥ 3) of independent Redis nodes.
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter, parseHostList } from '../store-url.js';

/** A checked Redlock store URL. */
export interface RedlockUrlConfig {
  /** `redis://host:port` per node. */
  readonly nodes: readonly string[];
  readonly prefix: string;
  readonly nodeTimeoutMs: number;
}

/** Default longest wait for one node's answer, ms (far below any sensible TTL). */
export const DEFAULT_NODE_TIMEOUT_MS = 200;

const SHAPE = 'redlock://host:port,host:port,host:port[?prefix=…&nodeTimeoutMs=…]';
const PARAMS = ['prefix', 'nodeTimeoutMs'];

/** @throws InvalidArgumentError for a malformed URL, an even or too small node count, or a bad parameter. */
export function parseRedlockUrl(store: string): RedlockUrlConfig {
  const match = /^redlock:\/\/([^/?#@]+)\/?(\?[^#]*)?$/i.exec(store);
  if (match === null) throw new InvalidArgumentError('store', SHAPE, store);
  const [, hosts = '', query = ''] = match;
  const nodes = parseHostList(hosts, SHAPE, store).map((m) => `redis://${m.host}:${m.port}`);
  assertNodeCount(nodes.length);
  const params = new URLSearchParams(query);
  for (const name of params.keys()) {
    if (!PARAMS.includes(name)) {
      throw new InvalidArgumentError(`store parameter ${name}`, PARAMS.join(', '), name);
    }
  }
  return {
    nodes,
    prefix: validatePrefix(params.get('prefix') ?? 'fencelock'),
    nodeTimeoutMs: integerParameter(params, 'nodeTimeoutMs', DEFAULT_NODE_TIMEOUT_MS, 1, 60_000),
  };
}

/**
 * Redlock needs an odd number of nodes, at least 3 (an even one adds a node without adding a
 * tolerated failure).
 * @throws InvalidArgumentError
 */
export function assertNodeCount(count: number): void {
  if (!Number.isInteger(count) || count < 3 || count % 2 === 0) {
    throw new InvalidArgumentError('nodes', 'an odd number of Redis nodes, at least 3', count);
  }
}

/** @throws InvalidArgumentError for an empty prefix or one with `{` or `}`. */
export function validatePrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix === '' || /[{}]/.test(prefix)) {
    throw new InvalidArgumentError('prefix', 'a non-empty string without { or }', prefix);
  }
  return prefix;
}
