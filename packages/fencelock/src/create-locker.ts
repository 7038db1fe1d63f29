/**
 * `createLocker`: the front door. Takes a store URL or a backend instance.
 */
import type { Backend } from './core/backend.js';
import { Locker } from './core/locker.js';
import { InvalidArgumentError } from './errors.js';
import { type LockerOptions, resolveLockerOptions } from './options.js';
import { resolveStoreUrl, storeName } from './stores.js';

/**
 * Create a locker on a store.
 *
 * @param store a store URL — `sqlite:<path>` (embedded, one host), `redis://[user:pass@]host:port[/db]`
 *   or `rediss://…` — or a backend instance such as `createRedisBackend({ client })`.
 * @param options lock defaults (`ttlMs`, `waitMs`, `autoRenew`, `maxHoldMs`, `reentrant`, `retry`)
 *   and `driftFactor`.
 * @throws InvalidArgumentError for a malformed URL or option, before any network call.
 *
 * @example
 * const locker = createLocker('redis://127.0.0.1:6379');
 * await locker.withLock('order:pay:100', async (lease) => {
 *   await chargeCard({ fencingToken: lease.fencingToken, signal: lease.signal });
 * });
 * await locker.close();
 */
export function createLocker(store: string | Backend, options?: LockerOptions): Locker {
  const { defaults, driftFactor, name } = resolveLockerOptions(options);
  if (typeof store === 'string') {
    return new Locker(resolveStoreUrl(store), defaults, driftFactor, name ?? storeName(store));
  }
  if (!isBackend(store)) {
    throw new InvalidArgumentError('store', 'a store URL string or a Backend instance', store);
  }
  return new Locker(store, defaults, driftFactor, name ?? store.name);
}

function isBackend(value: unknown): value is Backend {
  if (typeof value !== 'object' || value === null) return false;
  const b = value as Record<string, unknown>;
  return (
    typeof b.capabilities === 'object' &&
    b.capabilities !== null &&
    Array.isArray((b.capabilities as Record<string, unknown>).modes) &&
    ['attempt', 'renew', 'release', 'abandon', 'inspect', 'close'].every(
      (m) => typeof b[m] === 'function',
    )
  );
}
