/**
 * A semaphore's permits on Redlock: the permit quorum's arithmetic, and votes on the 5 real
 * nodes of `scripts/services.sh` where some nodes are made to refuse. A test client fills a
 * node's permits directly (the single-node `semaphore-acquire.lua` run on that node alone), as
 * other holders would, so that fewer nodes than the quorum can grant although a majority can.
 * Also the two Redlock permit scripts run directly on one node.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  type SemaphoreKeys,
  semaphoreKeys,
} from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import {
  semaphoreAcquireScript,
  semaphoreReleaseScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import {
  createRedlockBackend,
  permitQuorumOf,
  quorumOf,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import {
  settlePermitTokenScript,
  withdrawPermitOnNodeScript,
} from '../../../packages/fencelock/src/backends/redlock/scripts.js';
import {
  createLocker,
  type Locker,
  MAX_PERMITS,
  PermitsMismatchError,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const prefix = `fencelock-redlock-permits-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
let admins: Redis[];
let subscriber: Redis | undefined;
const lockers: Locker[] = [];

beforeAll(() => {
  admins = REDLOCK_NODE_URLS.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
});

afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
  if (subscriber !== undefined) {
    await subscriber.quit();
    subscriber = undefined;
  }
});

afterAll(async () => {
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  }
});

describe('the permit quorum', () => {
  it('is the least q with (permits + 1) · q > nodes · permits', () => {
    // 5 nodes: 3, 4, 4, then every node from permits = nodes − 1 = 4 on.
    expect([1, 2, 3, 4, 5, 6, 100].map((p) => permitQuorumOf(5, p))).toEqual([3, 4, 4, 5, 5, 5, 5]);
    expect([1, 2, 3].map((p) => permitQuorumOf(3, p))).toEqual([2, 3, 3]);
    expect([1, 2, 3, 4, 5, 6, 7].map((p) => permitQuorumOf(7, p))).toEqual([4, 5, 6, 6, 6, 7, 7]);
    const wrong: string[] = [];
    for (const nodes of [1, 3, 5, 7, 9, 11, 21]) {
      for (let permits = 1; permits <= MAX_PERMITS; permits++) {
        const q = permitQuorumOf(nodes, permits);
        const holds =
          // permits + 1 holders on q nodes each need more slots than the nodes have…
          (permits + 1) * q > nodes * permits &&
          // …q − 1 would not be enough (q is the least such), and q is never more than every node…
          (permits + 1) * (q - 1) <= nodes * permits &&
          q <= nodes &&
          // …any two permit quorums share a node (tokens rise as for locks)…
          2 * q > nodes &&
          // …and every node votes from permits = nodes − 1 on.
          (permits < nodes - 1 || q === nodes);
        if (!holds) wrong.push(`${nodes} nodes, ${permits} permits: ${q}`);
      }
      expect(permitQuorumOf(nodes, 1)).toBe(quorumOf(nodes));
    }
    expect(wrong).toEqual([]);
  });

  it('is more than a majority where a majority would let too many in', async () => {
    // The case of the docstring: 5 nodes, 2 permits; 3 holders granted on a majority (3 nodes)
    // each take 9 of the 10 slots, so a majority does not bound them.
    expect(3 * quorumOf(5)).toBe(9);
    expect(3 * permitQuorumOf(5, 2)).toBe(12);
    const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
    expect(backend.quorum).toBe(3);
    expect([1, 2, 3, 4].map((p) => backend.permitQuorum(p))).toEqual([3, 4, 4, 5]);
    await backend.close();
  });
});

/** A locker on Redlock over the 5 nodes, and its backend. */
function redlock(): { locker: Locker; backend: RedlockBackend } {
  const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  return { locker, backend };
}

function keysOf(key: string): SemaphoreKeys {
  return semaphoreKeys(prefix, key);
}

/** Hold a permit of `key` on node n (0-based) alone, as another holder of `permits` would. */
async function holdOn(n: number, key: string, owner: string, permits: number): Promise<void> {
  const k = keysOf(key);
  const reply = await semaphoreAcquireScript.run(
    admins[n]!,
    [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.fence],
    [owner, 30_000, permits, 0, 35_000, '0'],
  );
  expect(reply[0]).toBe(1);
}

/** Release `owner`'s permit of `key` on node n (0-based) alone. */
async function releaseOn(n: number, key: string, owner: string): Promise<void> {
  const k = keysOf(key);
  const token = await admins[n]!.hget(k.tokens, owner);
  const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
  expect(await semaphoreReleaseScript.run(admins[n]!, keys, [owner, token!])).toBe(1);
}

/** How many permits of `key` each node holds, and how many waiters stand in its line there. */
async function countsOf(key: string): Promise<{ holders: number[]; line: number[] }> {
  const k = keysOf(key);
  const holders = await Promise.all(admins.map((a) => a.zcard(k.holders)));
  const line = await Promise.all(admins.map((a) => a.zcard(k.queue)));
  return { holders, line };
}

/** Wait until `check` passes or `ms` ran out (then once more, to fail with its message). */
async function eventually(check: () => Promise<void>, ms = 2_000): Promise<void> {
  const deadline = performance.now() + ms;
  for (;;) {
    try {
      await check();
      return;
    } catch (error) {
      if (performance.now() > deadline) throw error;
      await delay(20);
    }
  }
}

describe('permits on real nodes (5 nodes)', () => {
  it('2 permits: refused where only a majority (3 nodes) can grant, granted on 4', async () => {
    const { locker } = redlock();
    const key = unique('too-few');
    // Nodes 1 and 2 are full (two other holders each): only nodes 3 to 5 can grant.
    for (const n of [0, 1]) for (const owner of ['x1', 'x2']) await holdOn(n, key, owner, 2);
    const semaphore = locker.semaphore(key, { permits: 2, ttlMs: 10_000 });
    expect(await semaphore.tryAcquire()).toBeNull();
    // Withdrawn where it was granted: nothing of it stays.
    expect(await countsOf(key)).toEqual({ holders: [2, 2, 0, 0, 0], line: [0, 0, 0, 0, 0] });

    // A waiter loses its votes the same way, withdraws its permits and keeps its place in every
    // node's line (also on nodes 3 to 5, which granted it and so took its entry out).
    const waiting = semaphore.acquire({ waitMs: 10_000 });
    await eventually(async () => {
      expect(await countsOf(key)).toEqual({ holders: [2, 2, 0, 0, 0], line: [1, 1, 1, 1, 1] });
    });
    // One permit frees on node 1: it publishes the waiter's id there, and the waiter is granted
    // on nodes 1, 3, 4 and 5 (the quorum of 4), with one token on all of them.
    await releaseOn(0, key, 'x1');
    const permit = await waiting;
    const k = keysOf(key);
    const tokens = await Promise.all(admins.map((a) => a.hget(k.tokens, permit.owner)));
    const token = String(permit.fencingToken);
    expect(tokens).toEqual([token, null, token, token, token]);
    // Node 2 refused it and kept its entry: taken out after the grant.
    await eventually(async () => {
      expect(await countsOf(key)).toEqual({ holders: [2, 2, 1, 1, 1], line: [0, 0, 0, 0, 0] });
    }, 500);
    // Released once deleted on 2 nodes (no quorum of 4 can hold it then); the rest follow.
    expect(await permit.release()).toBe('released');
    await eventually(async () => {
      expect(await countsOf(key)).toEqual({ holders: [1, 2, 0, 0, 0], line: [0, 0, 0, 0, 0] });
    }, 500);
  });

  it('4 permits (nodes − 1): every node must grant; one full node refuses the permit', async () => {
    const { locker } = redlock();
    const key = unique('every-node');
    for (const owner of ['x1', 'x2', 'x3', 'x4']) await holdOn(4, key, owner, 4);
    const semaphore = locker.semaphore(key, { permits: 4, ttlMs: 10_000 });
    expect(await semaphore.tryAcquire()).toBeNull();
    expect((await countsOf(key)).holders).toEqual([0, 0, 0, 0, 4]);
    await releaseOn(4, key, 'x1');
    const permit = await semaphore.tryAcquire();
    expect(permit).not.toBeNull();
    expect((await countsOf(key)).holders).toEqual([1, 1, 1, 1, 4]);
    expect(await permit!.release()).toBe('released');
  });

  it('another permit count on too few nodes to block a quorum is outvoted; on more, a mismatch', async () => {
    const { locker } = redlock();
    const key = unique('counts');
    // 2 permits need 4 nodes: one node using 3 permits cannot stop the grant.
    await holdOn(0, key, 'x1', 3);
    const semaphore = locker.semaphore(key, { permits: 2, ttlMs: 10_000 });
    const permit = await semaphore.tryAcquire();
    expect(permit).not.toBeNull();
    expect(await permit!.release()).toBe('released');
    await eventually(async () => expect((await countsOf(key)).holders).toEqual([1, 0, 0, 0, 0]));
    // Two such nodes leave 3 for the quorum of 4: PermitsMismatchError, and nothing stays.
    await holdOn(1, key, 'x1', 3);
    for (const attempt of [
      () => semaphore.tryAcquire(),
      () => semaphore.acquire({ waitMs: 1_000 }),
    ]) {
      const refused = await attempt().catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(PermitsMismatchError);
      expect(refused).toMatchObject({ key, requested: 2, inUse: 3 });
      expect(await countsOf(key)).toEqual({ holders: [1, 1, 0, 0, 0], line: [0, 0, 0, 0, 0] });
    }
  });

  it('three clients with 2 permits: never more than 2 hold, tokens rise', async () => {
    const key = unique('three');
    const clients = [redlock(), redlock(), redlock()];
    let inside = 0;
    let most = 0;
    // Each permit's token is above every token released before its acquire began.
    let released = 0n;
    let regressions = 0;
    await Promise.all(
      clients.map(async ({ locker }) => {
        const semaphore = locker.semaphore(key, { permits: 2, ttlMs: 10_000 });
        for (let round = 0; round < 10; round++) {
          const bound = released;
          const permit = await semaphore.acquire({ waitMs: 20_000 });
          inside += 1;
          most = Math.max(most, inside);
          if (permit.fencingToken <= bound) regressions += 1;
          await delay(2);
          inside -= 1;
          if (permit.fencingToken > released) released = permit.fencingToken;
          expect(await permit.release()).toBe('released');
        }
      }),
    );
    expect(most).toBe(2);
    expect(regressions).toBe(0);
    await eventually(async () => {
      expect(await countsOf(key)).toEqual({ holders: [0, 0, 0, 0, 0], line: [0, 0, 0, 0, 0] });
    });
  });
});

describe('Redlock permit scripts on one node', () => {
  const node = () => admins[0]!;
  const lineKeys = (k: SemaphoreKeys) =>
    [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;

  /** A single attempt (`ticket` '0') or a waiter's attempt on node 1. */
  function acquire(k: SemaphoreKeys, owner: string, permits: number, ticket = '0') {
    return semaphoreAcquireScript.run(
      node(),
      [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.fence],
      [owner, 30_000, permits, ticket === '0' ? 0 : 2_000, 35_000, ticket],
    );
  }

  async function listen(channel: string): Promise<string[]> {
    subscriber = node().duplicate();
    const messages: string[] = [];
    subscriber.on('message', (from: string, message: string) => {
      if (from === channel) messages.push(message);
    });
    await subscriber.subscribe(channel);
    return messages;
  }

  it('a lost vote drops the permit, keeps the place by ticket and wakes others, not itself', async () => {
    const k = keysOf(unique('withdraw'));
    const messages = await listen(k.channel);
    expect((await acquire(k, 'a', 2))[0]).toBe(1);
    expect((await acquire(k, 'c', 2))[0]).toBe(1);
    expect(await acquire(k, 'b', 2, '200')).toEqual([0, expect.any(Number)]);
    expect(await acquire(k, 'd', 2, '300')).toEqual([0, expect.any(Number)]);
    // 'a' stands behind 'b' and 'd' by its ticket: the permit it frees lets 'b' in.
    const args = ['a', 2, '400', 2_000] as const;
    expect(await withdrawPermitOnNodeScript.run(node(), lineKeys(k), args)).toBe(1);
    expect(await node().zrange(k.holders, '0', '-1')).toEqual(['c']);
    expect(await node().hget(k.tokens, 'a')).toBeNull();
    expect(await node().zrange(k.queue, '0', '-1', 'WITHSCORES')).toEqual([
      'b',
      '200',
      'd',
      '300',
      'a',
      '400',
    ]);
    await eventually(async () => expect(messages).toEqual(['b']), 1_000);
    // 'c' (first in line by its ticket) keeps one of the two free slots without being told;
    // 'b' is told of the other.
    expect(await withdrawPermitOnNodeScript.run(node(), lineKeys(k), ['c', 2, '100', 2_000])).toBe(
      1,
    );
    expect(await node().zrange(k.queue, '0', '0')).toEqual(['c']);
    // Nothing dropped (no permit held): nobody is woken.
    expect(await withdrawPermitOnNodeScript.run(node(), lineKeys(k), ['e', 2, '500', 2_000])).toBe(
      0,
    );
    await delay(100);
    expect(messages).toEqual(['b', 'b']);
  });

  it('a lost vote does not join a line whose holders use another count', async () => {
    const k = keysOf(unique('withdraw-count'));
    expect((await acquire(k, 'x', 3))[0]).toBe(1);
    expect(await withdrawPermitOnNodeScript.run(node(), lineKeys(k), ['a', 2, '100', 2_000])).toBe(
      0,
    );
    expect(await node().zcard(k.queue)).toBe(0);
    expect(await node().get(k.permits)).toBe('3');
  });

  it('settling writes the combined token on a live permit and raises the counter', async () => {
    const k = keysOf(unique('settle'));
    const reply = await acquire(k, 'a', 2);
    expect(reply[0]).toBe(1);
    const combined = String(BigInt(reply[1]) + 1_000n);
    const keys = [k.holders, k.tokens, k.fence] as const;
    expect(await settlePermitTokenScript.run(node(), keys, ['a', combined, 35_000])).toBe(1);
    expect(await node().hget(k.tokens, 'a')).toBe(combined);
    expect(await node().get(k.fence)).toBe(combined);
    // A lower token leaves the counter; an owner without a live permit is not written.
    expect(await settlePermitTokenScript.run(node(), keys, ['a', String(reply[1]), 35_000])).toBe(
      1,
    );
    expect(await node().get(k.fence)).toBe(combined);
    expect(await settlePermitTokenScript.run(node(), keys, ['b', combined, 35_000])).toBe(0);
    expect(await node().hget(k.tokens, 'b')).toBeNull();
    const next = await acquire(k, 'c', 2);
    expect(BigInt(next[1])).toBeGreaterThan(BigInt(combined));
  });
});
