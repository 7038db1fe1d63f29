/**
 * Reentrancy scopes, kept entirely above the backend (Curator's `InterProcessMutex` keeps a hold
 * count per thread; here the "thread" is the async context of a `withLock` callback, carried by
 * `AsyncLocalStorage`). A nested acquire finds the held lease here and makes no engine call.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Lease } from './lease.js';

type Scope = ReadonlyMap<string, Lease>;

const storage = new AsyncLocalStorage<Scope>();

/** The lease held for `scopeKey` in the current async context, if any. */
export function heldInContext(scopeKey: string): Lease | undefined {
  return storage.getStore()?.get(scopeKey);
}

/** Run `fn` in a child context that also holds `lease` under `scopeKey`. */
export function runHolding<T>(scopeKey: string, lease: Lease, fn: () => T): T {
  const scope = new Map(storage.getStore());
  scope.set(scopeKey, lease);
  return storage.run(scope, fn);
}
