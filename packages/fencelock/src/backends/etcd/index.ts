/**
 * `fencelock/etcd`: locks on an etcd cluster (the `etcd3` package), with sessions, revision
 * fencing tokens, predecessor watches, read-write modes and semaphores (`locker.semaphore`).
 *
 * @example
 * import { createLocker } from 'fencelock';
 * const locker = createLocker('etcd://127.0.0.1:2379,127.0.0.1:22379');
 * await locker.withLock('report', async (lease) => { … }, { mode: 'read' });
 */
import type { Etcd3 } from 'etcd3';
import { InvalidArgumentError } from '../../errors.js';
import { isOptionsObject } from '../../options.js';
import { createEtcdBackendFromConfig, EtcdBackend } from './backend.js';
import { type EtcdUrlConfig, parseEtcdUrl } from './url.js';

export { EtcdBackend } from './backend.js';
export { EtcdSession } from './session.js';
export { type EtcdUrlConfig, parseEtcdUrl } from './url.js';

/** Options of `createEtcdBackend`. */
export interface EtcdBackendOptions {
  /** An etcd3 client to use; it stays open after `close()`. Give this or `url`. */
  readonly client?: Etcd3;
  /** An `etcd://host:port[,host:port…][/namespace]` URL. Give this or `client`. */
  readonly url?: string;
  /** Key namespace (with `client`). @default 'fencelock' */
  readonly namespace?: string;
  /** How long to wait for a session's lease grant, ms. @default 5000 */
  readonly timeoutMs?: number;
}

/**
 * Create an etcd backend from `{ url }`, `{ client }` or a checked URL config. No connection is
 * made before the first lock operation.
 * @throws InvalidArgumentError for a malformed URL, a missing or non-etcd3 client, or a bad option.
 */
export function createEtcdBackend(options: EtcdBackendOptions | EtcdUrlConfig): EtcdBackend {
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', '{ url } or { client }', options);
  }
  if ('endpoints' in options) return createEtcdBackendFromConfig(options);
  const o = options as EtcdBackendOptions;
  if ((o.url === undefined) === (o.client === undefined)) {
    throw new InvalidArgumentError(
      'options',
      'exactly one of url or client',
      Object.keys(o).join(','),
    );
  }
  if (o.url !== undefined) {
    if (typeof o.url !== 'string') throw new InvalidArgumentError('url', 'an etcd:// URL', o.url);
    return createEtcdBackendFromConfig(parseEtcdUrl(o.url));
  }
  const client = o.client as unknown as Record<string, unknown>;
  if (
    !['if', 'put', 'getAll', 'watch', 'lease', 'close'].every(
      (m) => typeof client[m] === 'function',
    )
  ) {
    throw new InvalidArgumentError('client', 'an etcd3 Etcd3 client', o.client);
  }
  const namespace = o.namespace ?? 'fencelock';
  if (typeof namespace !== 'string' || namespace === '' || namespace.includes('/')) {
    throw new InvalidArgumentError('namespace', 'a non-empty string without "/"', namespace);
  }
  const timeoutMs = o.timeoutMs ?? 5000;
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1 || timeoutMs > 600_000) {
    throw new InvalidArgumentError('timeoutMs', 'an integer in [1, 600000]', timeoutMs);
  }
  return new EtcdBackend(o.client as Etcd3, false, namespace, timeoutMs);
}
