/**
 * The sidecar's mapping of owner names to backend owner ids: deterministic (any sidecar maps a
 * name the same way), 128 bits of lowercase hex, distinct per key and per (name, key) split.
 */
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { validateOwnerId } from '../../src/options.js';
import { OWNER_NAMESPACE, ownerIdFor } from '../../src/server/owner.js';

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
});
