/**
 * The sidecar's mapping of owner names to backend owner ids: deterministic (any sidecar maps a
 * name the same way), 128 bits of lowercase hex, distinct per key and per (name, key) split;
 * names that are not well-formed UTF-16 are refused (they would alias the U+FFFD name).
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  isWellFormedOwnerName,
  OWNER_NAMESPACE,
  ownerIdFor,
} from '../../packages/cli/src/server/owner.js';
import { allowedFor, daprLockSchema, renewSchema } from '../../packages/cli/src/server/schemas.js';
import { InvalidArgumentError } from '../../packages/fencelock/src/errors.js';
import { validateOwnerId } from '../../packages/fencelock/src/options.js';

describe('ownerIdFor', () => {
  it('is the first 32 hex digits of SHA-256 over namespace, name length, name and key', () => {
    const expected = createHash('sha256')
      .update('fencelock/sidecar-owner/v1\n5\nvaderorder:pay:100')
      .digest('hex')
      .slice(0, 32);
    expect(OWNER_NAMESPACE).toBe('fencelock/sidecar-owner/v1\n');
    expect(ownerIdFor('vader', 'order:pay:100')).toBe(expected);
    expect(ownerIdFor('vader', 'order:pay:100')).toBe(ownerIdFor('vader', 'order:pay:100'));
  });

  it('gives a valid backend owner id for any name, empty-free or not ASCII', () => {
    for (const name of ['vader', 'ünïcødé 🔒', 'x'.repeat(1024), 'a\nb']) {
      expect(validateOwnerId(ownerIdFor(name, 'k'))).toMatch(/^[0-9a-f]{32}$/);
    }
  });

  it('differs per key, and per split of the same characters between name and key', () => {
    expect(ownerIdFor('vader', 'k1')).not.toBe(ownerIdFor('vader', 'k2'));
    expect(ownerIdFor('ab', 'c')).not.toBe(ownerIdFor('a', 'bc'));
    expect(ownerIdFor('é', 'k')).not.toBe(ownerIdFor('e\u0301', 'k'));
  });

  it('refuses a name with a lone surrogate, which would share the id of the U+FFFD name', () => {
    for (const name of ['\ud800', 'a\udfffb', '\udc00\ud800', 'x\ud83d']) {
      let error: unknown;
      try {
        ownerIdFor(name, 'k');
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(name)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('owner');
      expect(isWellFormedOwnerName(name)).toBe(false);
    }
    expect(() => ownerIdFor(42 as never, 'k')).toThrow(InvalidArgumentError);
    // A surrogate pair is one code point: fine, and not the U+FFFD name.
    expect(isWellFormedOwnerName('\ud83d\udd12')).toBe(true);
    expect(ownerIdFor('\ud83d\udd12', 'k')).not.toBe(ownerIdFor('\ufffd\ufffd', 'k'));
  });

  it("the request schemas' owner pattern refuses exactly the names that are not well-formed", () => {
    const lockOwner = daprLockSchema.body.properties.lockOwner;
    const owner = renewSchema.body.properties.owner;
    expect(owner).toBe(lockOwner);
    // Ajv compiles patterns with the u flag.
    const pattern = new RegExp(lockOwner.pattern, 'u');
    for (const name of ['vader', '\ufffd', '\ud83d\udd12', 'a\nb', 'ünï']) {
      expect(pattern.test(name), JSON.stringify(name)).toBe(true);
    }
    for (const name of ['\ud800', 'a\udfffb', '\udc00\ud800']) {
      expect(pattern.test(name), JSON.stringify(name)).toBe(false);
    }
    expect(allowedFor('lockOwner', 0)).toContain('well-formed');
    expect(allowedFor('owner', 0)).toContain('well-formed');
  });
});
