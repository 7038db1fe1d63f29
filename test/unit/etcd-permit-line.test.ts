import type { IKeyValue } from 'etcd3';
import { describe, expect, it } from 'vitest';
import {
  permitContenderKey,
  permitContenderOf,
  permitContendersOf,
  permitCountValue,
} from '../../packages/fencelock/src/backends/etcd/permit-key.js';
import {
  grantsToAnnounce,
  hasSuccessor,
  permitVerdict,
} from '../../packages/fencelock/src/backends/etcd/permit-line.js';

const DIR = 'fencelock/semaphores/jobs/';
const OWNER = '0123456789abcdef'.repeat(2);

/** A key as a range read with values returns it. */
function kv(
  key: string,
  lease: string,
  value: string,
  createRevision = 7,
  modRevision = 0,
): IKeyValue {
  return {
    key: Buffer.from(key),
    create_revision: String(createRevision),
    mod_revision: String(modRevision || createRevision),
    version: '1',
    value: Buffer.from(value),
    lease,
  };
}

/** An entry named `name` at `order`, announced or not. */
function entry(name: string, order: number, announced = false) {
  return { name, order: BigInt(order), announced };
}

/** The verdict as text: `granted`, `first after a,b,c`, or `behind <predecessor>`. */
function verdictOf(entries: ReturnType<typeof entry>[], mine: number, permits: number): string {
  const verdict = permitVerdict(entries, BigInt(mine), permits);
  if (verdict.outcome === 'granted') return 'granted';
  if (verdict.outcome === 'first-waiter') {
    return `first after ${verdict.holders.map((h) => h.name).join(',')}`;
  }
  return `behind ${verdict.predecessor.name}`;
}

describe('etcd permit contender keys', () => {
  it('reads back the keys the backend writes: owner, create revision, permit count', () => {
    const key = permitContenderKey(DIR, '694d9b1c8a3f2e01', OWNER);
    expect(key).toBe(`${DIR}p-694d9b1c8a3f2e01-${OWNER}`);
    expect(permitCountValue(3)).toBe('3');
    expect(permitContenderOf(kv(key, '7587882313423105537', '3', 41), DIR)).toEqual({
      key,
      owner: OWNER,
      order: 41n,
      permits: 3,
      announced: false,
    });
    expect(permitContenderOf(kv(key, '1', '10000', 41, 57), DIR)).toEqual({
      key,
      owner: OWNER,
      order: 41n,
      permits: 10_000,
      announced: true,
    });
  });

  it('ignores keys of any other shape, bound to no lease, or without a permit count', () => {
    const name = `${DIR}p-1a-${OWNER}`;
    const foreign = [
      kv(`${DIR}foreign`, '5', '3'),
      kv(name, '0', '3'), // no lease
      kv(`${DIR}x/p-1a-${OWNER}`, '5', '3'), // one folder down
      kv(`${DIR}w-1a-${OWNER}`, '5', '3'), // a lock's contender name
      kv(`${DIR}p-1a-${OWNER.slice(1)}`, '5', '3'), // 31 hex digits
      kv(`${DIR}p-${'f'.repeat(17)}-${OWNER}`, '5', '3'), // more than an int64
      kv(`fencelock/semaphores/jobs2/p-1a-${OWNER}`, '5', '3'), // another semaphore's folder
      kv(name, '5', ''), // keys only, or no value
      kv(name, '5', '0'),
      kv(name, '5', '03'),
      kv(name, '5', '10001'), // above MAX_PERMITS
      kv(name, '5', 'write'),
      kv(name, '5', '2.5'),
    ];
    for (const key of foreign) expect(permitContenderOf(key, DIR)).toBeUndefined();
    const ours = kv(name, '26', '2', 9);
    expect(permitContendersOf([...foreign, ours], DIR).map((e) => [e.order, e.permits])).toEqual([
      [9n, 2],
    ]);
  });
});

describe('permitVerdict', () => {
  const line = [entry('a', 10), entry('b', 20), entry('c', 30), entry('d', 40), entry('e', 50)];

  it('grants every contender with fewer than permits entries ahead', () => {
    expect(verdictOf(line, 10, 2)).toBe('granted');
    expect(verdictOf(line, 20, 2)).toBe('granted');
    expect(verdictOf(line, 30, 3)).toBe('granted');
    expect(verdictOf(line, 50, 5)).toBe('granted');
    expect(verdictOf([], 10, 1)).toBe('granted');
  });

  it('makes the contender with exactly permits entries ahead the first waiter, on all of them', () => {
    expect(verdictOf(line, 30, 2)).toBe('first after a,b');
    expect(verdictOf(line, 20, 1)).toBe('first after a');
    expect(verdictOf(line, 50, 4)).toBe('first after a,b,c,d');
  });

  it('puts every later waiter behind its predecessor, the newest entry ahead', () => {
    expect(verdictOf(line, 40, 2)).toBe('behind c');
    expect(verdictOf(line, 50, 2)).toBe('behind d');
    expect(verdictOf(line, 50, 1)).toBe('behind d');
    // In any order, without its own entry, and with orders beyond 2^53 (etcd revisions).
    const big = 2n ** 60n;
    const shuffled = [
      { name: 'y', order: big + 2n },
      { name: 'w', order: big },
      { name: 'x', order: big + 1n },
    ];
    const verdict = permitVerdict(shuffled, big + 3n, 1);
    expect(verdict.outcome === 'later-waiter' && verdict.predecessor.name).toBe('y');
  });

  it('tells whether anyone is behind a contender', () => {
    expect(hasSuccessor(line, 40n)).toBe(true);
    expect(hasSuccessor(line, 50n)).toBe(false);
  });
});

describe('grantsToAnnounce', () => {
  it('announces its own grant when someone is behind it', () => {
    const line = [entry('a', 10), entry('b', 20), entry('c', 30), entry('d', 40)];
    // 2 permits: b just got one; c is first waiter and d waits on c.
    expect(grantsToAnnounce(line, 20n, 2).map((e) => e.name)).toEqual(['b']);
  });

  it('announces the later grants its read shows too (several permits freed at once)', () => {
    // 3 permits, a and b released: c, d and e hold permits, f is first waiter, g behind it.
    const line = [entry('c', 30), entry('d', 40), entry('e', 50), entry('f', 60), entry('g', 70)];
    expect(grantsToAnnounce(line, 30n, 3).map((e) => e.name)).toEqual(['c', 'd', 'e']);
    expect(grantsToAnnounce([...line].reverse(), 40n, 3).map((e) => e.name)).toEqual(['d', 'e']);
  });

  it('skips grants announced before, and the last entry (nobody behind it)', () => {
    const line = [entry('a', 10), entry('b', 20, true), entry('c', 30), entry('d', 40)];
    expect(grantsToAnnounce(line, 10n, 4).map((e) => e.name)).toEqual(['a', 'c']);
    expect(grantsToAnnounce([entry('a', 10)], 10n, 1)).toEqual([]);
    expect(grantsToAnnounce([entry('a', 10), entry('b', 20)], 10n, 3).map((e) => e.name)).toEqual([
      'a',
    ]);
  });
});
