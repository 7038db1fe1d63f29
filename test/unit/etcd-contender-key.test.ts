import type { IKeyValue } from 'etcd3';
import { describe, expect, it } from 'vitest';
import {
  contenderKey,
  contenderOf,
  contendersOf,
} from '../../packages/fencelock/src/backends/etcd/contender-key.js';

const DIR = 'fencelock/locks/jobs/';
const OWNER = '0123456789abcdef'.repeat(2);

/** A key as a range read returns it (keys only). */
function kv(key: string, lease: string, createRevision = 7): IKeyValue {
  return {
    key: Buffer.from(key),
    create_revision: String(createRevision),
    mod_revision: String(createRevision),
    version: '1',
    value: Buffer.alloc(0),
    lease,
  };
}

describe('etcd contender keys', () => {
  it('reads back the keys the backend writes: owner, mode, create revision', () => {
    const write = contenderKey(DIR, 'write', '694d9b1c8a3f2e01', OWNER);
    expect(write).toBe(`${DIR}w-694d9b1c8a3f2e01-${OWNER}`);
    expect(contenderOf(kv(write, '7587882313423105537', 41), DIR)).toEqual({
      key: write,
      owner: OWNER,
      mode: 'write',
      order: 41n,
    });
    const read = contenderKey(DIR, 'read', '1', `${OWNER}${OWNER}`);
    expect(contenderOf(kv(read, '1'), DIR)?.mode).toBe('read');
    expect(contenderOf(kv(read, '1'), DIR)?.owner).toBe(`${OWNER}${OWNER}`);
  });

  it('ignores keys of any other shape, or bound to no lease', () => {
    const foreign = [
      kv(`${DIR}foreign`, '5'),
      kv(`${DIR}w-1a-${OWNER}`, '0'), // no lease
      kv(`${DIR}x/w-1a-${OWNER}`, '5'), // one folder down
      kv(`${DIR}w-1a-not-an-owner`, '5'),
      kv(`${DIR}w-1a-${OWNER.slice(1)}`, '5'), // 31 hex digits
      kv(`${DIR}w-1a-${OWNER.toUpperCase()}`, '5'),
      kv(`${DIR}x-1a-${OWNER}`, '5'), // another mode letter
      kv(`${DIR}w-${'f'.repeat(17)}-${OWNER}`, '5'), // more than an int64
      kv(`${DIR}w-1a-${OWNER}-extra`, '5'),
      kv(`fencelock/locks/jobs2/w-1a-${OWNER}`, '5'), // another lock's folder
    ];
    for (const key of foreign) expect(contenderOf(key, DIR)).toBeUndefined();
    const ours = kv(`${DIR}w-1a-${OWNER}`, '26', 9);
    expect(contendersOf([...foreign, ours], DIR).map((entry) => entry.order)).toEqual([9n]);
  });
});
