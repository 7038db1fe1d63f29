/**
 * Reentrancy scopes, kept entirely above the backend (Curator's `InterProcessMutex` keeps a hold
 * count per thread; here the "thread" is the async context of a `withLock` callback, carried by
 * `AsyncLocalStorage`). A nested acquire finds the held lease here and makes no engine call.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { LockMode } from './backend.js';
import type { Lease } from './lease.js';

type Scope = ReadonlyMap<string, Lease>;

const storage = new AsyncLocalStorage<Scope>();

/**
 * The name of a reentrancy scope: one per locker (`scopePrefix`, random per locker), mode and
 * key, so that lockers, and the read and write locks of one key, never share a hold count.
 */
export function scopeKeyOf(scopePrefix: string, mode: LockMode, key: string): string {
  return `${scopePrefix}${mode}\0${key}`;
}

/** Whether the current async context runs inside a `withLock` callback (of any locker). */
export function inHoldingScope(): boolean {
  return storage.getStore() !== undefined;
}

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

/**
 * Reenter a live lease of `key`: the one held in the current async context under `scopeKey`
 * (inside `withLock`), else the handle's own latest lease. On success its hold count is
 * incremented and it is returned (no engine call; the same fencing token); undefined when there
 * is no such lease or it is no longer held.
 */
export function reenterHeld(
  scopeKey: string,
  key: string,
  handleLease: Lease | null,
): Lease | undefined {
  const held = heldInContext(scopeKey) ?? handleLease;
  return held?.key === key && held.reenter() ? held : undefined;
}
