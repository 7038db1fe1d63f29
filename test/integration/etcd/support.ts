/**
 * Shared bits of the etcd integration tests: store URLs on the 3-member cluster of
 * `scripts/services.sh up etcd` (one namespace per test file), a test-only admin client that
 * reads the engine behind fencelock's back, and polling helpers.
 */
import { randomBytes } from 'node:crypto';
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll } from 'vitest';
import {
  createLocker,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS } from '../../helpers/engines.js';

/** `127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793` (the `etcd://` host list). */
export const ETCD_HOSTS = ETCD_ENDPOINTS.map((e) => e.replace('http://', '')).join(',');

/** A namespace no other run or test file uses. */
export function uniqueNamespace(tag: string): string {
  return `fencelock-it-${tag}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** The store URL for `namespace` over all three members. */
export function etcdUrl(namespace: string, hosts = ETCD_HOSTS): string {
  return `etcd://${hosts}/${namespace}`;
}

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** A test-only etcd client over all members (never handed to a backend). */
export function adminClient(): Etcd3 {
  return new Etcd3({ hosts: [...ETCD_ENDPOINTS], dialTimeout: 5000 });
}

/** The contender keys under `dir`, oldest (lowest create revision) first. */
export async function contenders(
  admin: Etcd3,
  dir: string,
): Promise<{ key: string; createRevision: bigint; lease: string }[]> {
  const response = await admin.getAll().prefix(dir).sort('Create', 'Ascend').exec();
  return response.kvs.map((kv) => ({
    key: kv.key.toString(),
    createRevision: BigInt(kv.create_revision),
    lease: kv.lease,
  }));
}

/** Poll until exactly `count` keys exist under `dir`; throws after `timeoutMs`. */
export async function waitForCount(
  admin: Etcd3,
  dir: string,
  count: number,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const n = await admin.getAll().prefix(dir).count();
    if (n === count) return;
    if (performance.now() >= deadline) {
      throw new Error(`expected ${count} keys under ${dir} within ${timeoutMs} ms, saw ${n}`);
    }
    await sleep(5);
  }
}

/** One engine request a test client made, as `instrumentedClient` logs it. */
export interface RequestEvent {
  readonly waiter: number;
  readonly at: number;
  readonly what: string;
}

/** The etcd3 internals the counters hook (plain JS properties of the client at runtime). */
interface ClientInternals {
  pool: {
    exec: (service: string, method: string, ...rest: unknown[]) => Promise<unknown>;
    withConnection: (service: string, ...rest: unknown[]) => Promise<unknown>;
  };
  watchManager: {
    watchers: unknown[];
    attach: (watcher: unknown) => void;
    detach: (watcher: unknown) => Promise<void>;
  };
}

/**
 * An etcd3 client whose requests are logged as `waiter`'s, with its peak number of watches held
 * at once and the keys it watched.
 */
export function instrumentedClient(
  waiter: number,
  log: RequestEvent[],
): { client: Etcd3; peak: () => number; watched: string[] } {
  const client = new Etcd3({ hosts: [...ETCD_ENDPOINTS], dialTimeout: 5000 });
  const internals = client as unknown as ClientInternals;
  const { pool, watchManager } = internals;
  const exec = pool.exec.bind(pool);
  pool.exec = (service, method, ...rest) => {
    log.push({ waiter, at: performance.now(), what: `${service}.${method}` });
    return exec(service, method, ...rest);
  };
  const withConnection = pool.withConnection.bind(pool);
  pool.withConnection = (service, ...rest) => {
    // Streams: Watch (counted as a request) and Lease keepalives (session traffic, not counted).
    if (service === 'Watch') log.push({ waiter, at: performance.now(), what: 'Watch.stream' });
    return withConnection(service, ...rest);
  };
  let peak = 0;
  const watched: string[] = [];
  const attach = watchManager.attach.bind(watchManager);
  watchManager.attach = (watcher) => {
    log.push({ waiter, at: performance.now(), what: 'Watch.create' });
    watched.push(String((watcher as { request?: { key?: Buffer } }).request?.key));
    attach(watcher);
    peak = Math.max(peak, watchManager.watchers.length);
  };
  const detach = watchManager.detach.bind(watchManager);
  watchManager.detach = (watcher) => {
    log.push({ waiter, at: performance.now(), what: 'Watch.cancel' });
    return detach(watcher);
  };
  return { client, peak: () => peak, watched };
}

export { settledWithin } from '../../helpers/promises.js';

/**
 * One namespace for a test file: its store URL, an admin client opened before the tests, and
 * lockers made with `locker()` that are closed, with the namespace's keys deleted, after them.
 */
export function useNamespace(tag: string): {
  readonly namespace: string;
  readonly url: string;
  readonly admin: Etcd3;
  locker(options?: LockerOptions): Locker;
} {
  const namespace = uniqueNamespace(tag);
  const url = etcdUrl(namespace);
  const lockers: Locker[] = [];
  let admin: Etcd3 | undefined;
  beforeAll(() => {
    admin = adminClient();
  });
  afterAll(async () => {
    await Promise.allSettled(lockers.map((l) => l.close()));
    await admin?.delete().prefix(`${namespace}/`);
    admin?.close();
  });
  return {
    namespace,
    url,
    get admin() {
      if (admin === undefined) throw new Error('the admin client opens in beforeAll');
      return admin;
    },
    locker(options) {
      const locker = createLocker(url, options);
      lockers.push(locker);
      return locker;
    },
  };
}
