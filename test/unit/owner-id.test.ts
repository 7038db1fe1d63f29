import { describe, expect, it } from 'vitest';
import { newOwnerId } from '../../packages/fencelock/src/core/lock.js';

describe('newOwnerId', () => {
  it('hands out 128-bit hex ids, never the same bytes twice across refills of its pool', () => {
    // 256 ids per 4 KiB fill: 3,000 ids cross a dozen refills.
    const ids = Array.from({ length: 3_000 }, () => newOwnerId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(ids).size).toBe(ids.length);
    // A refill draws fresh bytes (it does not hand the previous batch out again).
    const batches = new Set<string>();
    for (let i = 0; i + 256 <= ids.length; i += 256) batches.add(ids.slice(i, i + 256).join(''));
    expect(batches.size).toBe(Math.floor(ids.length / 256));
  });
});
