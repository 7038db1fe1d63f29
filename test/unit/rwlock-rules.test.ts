/**
 * The read-write pre-checks of the core (`core/rwlock.ts`) and the reentrancy scopes they read
 * (`core/reentry.ts`): mode granted by the backend's capabilities; downgrade answers the held
 * writer; upgrade refused; scopes per locker, mode and key.
 */
import { describe, expect, it } from 'vitest';
import type { Lease } from '../../packages/fencelock/src/core/lease.js';
import { reenterHeld, runHolding, scopeKeyOf } from '../../packages/fencelock/src/core/reentry.js';
import { assertModeGranted, heldWriterFor } from '../../packages/fencelock/src/core/rwlock.js';
import { InvalidArgumentError } from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

/** The part of a lease the rules read. */
function fakeLease(key: string, owner: string, isHeld = true): Lease {
  let holds = 1;
  return {
    key,
    owner,
    isHeld,
    reenter: () => {
      if (!isHeld) return false;
      holds += 1;
      return true;
    },
    get holdCount() {
      return holds;
    },
  } as unknown as Lease;
}

describe('assertModeGranted', () => {
  it('accepts the modes of capabilities.modes and names them otherwise', () => {
    const backend = new MemoryBackend();
    expect(() => assertModeGranted(backend, 'write')).not.toThrow();
    expect(() => assertModeGranted(backend, 'read')).toThrow(
      /one of write .*memory store has no read locks/,
    );
    backend.capabilities = { ...backend.capabilities, modes: ['write', 'read'] };
    expect(() => assertModeGranted(backend, 'read')).not.toThrow();
  });
});

describe('heldWriterFor', () => {
  const prefix = 'p\0';
  it('is undefined outside any held lock of the key', () => {
    expect(heldWriterFor(prefix, 'k', 'read')).toBeUndefined();
    expect(heldWriterFor(prefix, 'k', 'write')).toBeUndefined();
  });

  it('a read inside the write lock (downgrade) answers the writer', () => {
    const writer = fakeLease('k', 'w1');
    runHolding(scopeKeyOf(prefix, 'write', 'k'), writer, () => {
      expect(heldWriterFor(prefix, 'k', 'read')).toBe('w1');
      // Another locker's scope, or another key, is not the caller's own lock.
      expect(heldWriterFor('q\0', 'k', 'read')).toBeUndefined();
      expect(heldWriterFor(prefix, 'k2', 'read')).toBeUndefined();
    });
  });

  it('a write inside the read lock (upgrade) is refused; a lease no longer held counts for nothing', () => {
    runHolding(scopeKeyOf(prefix, 'read', 'k'), fakeLease('k', 'r1'), () => {
      const error = (() => {
        try {
          heldWriterFor(prefix, 'k', 'write');
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('mode');
    });
    runHolding(scopeKeyOf(prefix, 'read', 'k'), fakeLease('k', 'r1', false), () => {
      expect(heldWriterFor(prefix, 'k', 'write')).toBeUndefined();
    });
  });
});

describe('reenterHeld', () => {
  it('reenters the lease of the async context first, else the handle own, only for its key', () => {
    const scope = scopeKeyOf('p\0', 'write', 'k');
    const own = fakeLease('k', 'own');
    const inContext = fakeLease('k', 'ctx');
    expect(reenterHeld(scope, 'k', own)).toBe(own);
    expect(reenterHeld(scope, 'other', own)).toBeUndefined();
    expect(reenterHeld(scope, 'k', fakeLease('k', 'gone', false))).toBeUndefined();
    expect(reenterHeld(scope, 'k', null)).toBeUndefined();
    runHolding(scope, inContext, () => {
      expect(reenterHeld(scope, 'k', own)).toBe(inContext);
    });
    expect(inContext.holdCount).toBe(2);
  });
});
