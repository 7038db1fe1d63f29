/**
 * Parse `etcd://[user:pass@]host:port[,host:port…][/namespace][?params]` store URLs without
 * importing the engine client. The namespace (default `fencelock`) prefixes every key the backend
 * writes. Parameter: `dialTimeoutMs` (default 5000).
 */
import { InvalidArgumentError } from '../../errors.js';
import { integerParameter, parseHostList } from '../store-url.js';

/** A checked etcd store URL. */
export interface EtcdUrlConfig {
  /** `http://host:port` per cluster member. */
  readonly endpoints: readonly string[];
  readonly auth?: { readonly username: string; readonly password: string };
  /** Key namespace, without slashes. */
  readonly namespace: string;
  readonly dialTimeoutMs: number;
}

const SHAPE = 'etcd://[user:pass@]host:port[,host:port…][/namespace]';

/** @throws InvalidArgumentError for a malformed URL or parameter. */
export function parseEtcdUrl(store: string): EtcdUrlConfig {
  const match = /^etcd:\/\/(?:([^:@/]*):([^@/]*)@)?([^/?#]+)(\/[^?#]*)?(\?[^#]*)?$/i.exec(store);
  if (match === null) throw new InvalidArgumentError('store', SHAPE, store);
  const [, user, password, hosts = '', path = '', query = ''] = match;
  const endpoints = parseHostList(hosts, SHAPE, store).map((m) => `http://${m.host}:${m.port}`);
  const decode = (text: string, part: string): string => {
    try {
      return decodeURIComponent(text);
    } catch {
      throw new InvalidArgumentError('store', `${SHAPE} with a well-formed ${part}`, store);
    }
  };
  const namespace = decode(path.replace(/^\/+|\/+$/g, ''), 'namespace') || 'fencelock';
  if (namespace.includes('/')) {
    // Namespaces must not nest: `a/locks/b` would live inside namespace `a`.
    throw new InvalidArgumentError('store', `${SHAPE} with a namespace without "/"`, store);
  }
  const params = new URLSearchParams(query);
  for (const name of params.keys()) {
    if (name !== 'dialTimeoutMs') {
      throw new InvalidArgumentError(`store parameter ${name}`, 'dialTimeoutMs', name);
    }
  }
  const dialTimeoutMs = integerParameter(params, 'dialTimeoutMs', 5000, 1, 600_000);
  return {
    endpoints,
    namespace,
    dialTimeoutMs,
    ...(user !== undefined && password !== undefined
      ? { auth: { username: decode(user, 'user'), password: decode(password, 'password') } }
      : {}),
  };
}
