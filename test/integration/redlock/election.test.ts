/**
 * Leader elections on Redlock (redlock/election.ts, election-watch.ts), beyond the contract: the
 * layout on every node (the leader's hash with the grant's TTL, a term counter without one) apart
 * from the lock and the semaphore of the same key, which stay untouched and alone in `list`;
 * terms above every earlier one after the counter was lost on a minority and left stale on the
 * rest (a node restarted empty, or from an old snapshot), and after a clock behind the counter; a
 * lost reply (campaign and proclaim asked again); nodes down (two of five: everything works; three:
 * QuorumError for the read, the campaign and the watch); a proclaim stored on fewer than a
 * majority (QuorumError, nothing rolled back); and the watch: armed on a majority, woken through
 * any node, silent after `stop()`, and no subscription left on any node after it or `close()`.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  type Locker,
  LockLostError,
  QuorumError,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS, REDLOCK_PORT_BASE } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const prefix = `fencelock-it-election-${randomBytes(4).toString('hex')}`;
const admins = REDLOCK_NODE_URLS.map((url) => new Redis(url));
const lockers: Locker[] = [];
const backends: RedlockBackend[] = [];
let proxies: TcpProxy[];

beforeAll(async () => {
  proxies = await Promise.all(
    [1, 2, 3, 4, 5].map((n) => startTcpProxy({ targetPort: REDLOCK_PORT_BASE + n })),
  );
});

afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
  await Promise.all(backends.splice(0).map((b) => b.close()));
  await Promise.all(proxies.map((p) => p.restore()));
});

afterAll(async () => {
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
  await Promise.all(proxies.map((p) => p.close()));
});

/** A backend and locker on the five nodes, directly or through the proxies. */
function redlock(through: 'direct' | 'proxies' = 'direct'): {
  backend: RedlockBackend;
  locker: Locker;
} {
  const nodes = through === 'direct' ? REDLOCK_NODE_URLS : proxies.map((p) => p.url);
  const backend = createRedlockBackend({ nodes, prefix, nodeTimeoutMs: 100 });
  const locker = createLocker(backend, { ttlMs: 10_000 });
  lockers.push(locker);
  return { backend, locker };
}

/** A candidate's request as the core sends it. */
function candidate(key: string, value: string, willWait = false): AttemptRequest {
  return {
    key,
    owner: randomBytes(16).toString('hex'),
    ttlMs: 10_000,
    mode: 'write',
    autoRenew: false,
    willWait,
    election: { value },
  };
}

/** Resolves once `check` resolves true, polling every 50 ms for up to 5 s. */
async function until(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await check().catch(() => false)) return;
    await delay(50);
  }
  throw new Error('condition not met within 5 s');
}

/** Subscribers of `channel` on each node (PUBSUB NUMSUB). */
async function subscribersOf(channel: string): Promise<number[]> {
  return Promise.all(
    admins.map(async (admin) => Number(((await admin.pubsub('NUMSUB', channel)) as unknown[])[1])),
  );
}

describe('Redlock election layout', () => {
  it('keeps owner, term and value in one hash with the TTL, a term counter without one; the lock and semaphore of the key stay untouched', async () => {
    const { backend, locker } = redlock();
    const key = 'layout';
    const lock = await locker.acquire(key, { ttlMs: 10_000 });
    const permit = await locker.semaphore(key, { permits: 2 }).acquire({ ttlMs: 10_000 });
    const leading = await locker.election(key).campaign('host-a:1', { ttlMs: 10_000 });
    const k = backend.electionKeysOf(key);
    expect(k.leader).toBe(`${prefix}:{${key}}:election:leader`);
    // A node that granted after the vote was decided (with a term of its own) is settled to the
    // leader's term in the background.
    const shown = { owner: leading.owner, term: String(leading.term), value: 'host-a:1' };
    await until(async () =>
      (await Promise.all(admins.map((a) => a.hgetall(k.leader)))).every(
        (h) => JSON.stringify(h) === JSON.stringify(shown),
      ),
    );
    const counters: string[] = [];
    for (const admin of admins) {
      const pttl = await admin.pttl(k.leader);
      expect(pttl).toBeGreaterThan(5_000);
      expect(pttl).toBeLessThanOrEqual(10_000);
      // At least the leader's term (a late node keeps its own, higher, counter).
      const counter = (await admin.get(k.term))!;
      expect(BigInt(counter)).toBeGreaterThanOrEqual(leading.term);
      counters.push(counter);
      // The term counter never expires (a lock's does, 5 s after its last TTL).
      expect(await admin.pttl(k.term)).toBe(-1);
    }
    // Proclaim and resign end at a majority: the last nodes answer a moment later.
    await leading.proclaim('host-a:2');
    await until(async () =>
      (await Promise.all(admins.map((a) => a.hget(k.leader, 'value')))).every(
        (v) => v === 'host-a:2',
      ),
    );

    // The lock and the permit of the same key are as they were; list shows them, not the election.
    const info = await backend.inspect(key);
    expect(info.holder).toMatchObject({ owner: lock.owner, fencingToken: lock.fencingToken });
    const page = await backend.list({ prefix: key, cursor: null, pageSize: 100 });
    expect(page.entries.map((e) => [e.key, e.mode]).sort()).toEqual([
      [key, 'permits'],
      [key, 'write'],
    ]);
    expect(await leading.resign()).toBe('released');
    await until(async () =>
      (await Promise.all(admins.map((a) => a.exists(k.leader)))).every((n) => n === 0),
    );
    for (const admin of admins) {
      expect(await admin.get(backend.keysOf(key).lock)).toBe(`${lock.owner}:${lock.fencingToken}`);
    }
    expect(await lock.release()).toBe('released');
    expect(await permit.release()).toBe('released');
    // Releasing the lock leaves the election's counter alone.
    expect(await Promise.all(admins.map((a) => a.get(k.term)))).toEqual(counters);
  });

  it('answers a repeated campaign (a lost reply) with the same term, and keeps a proclaimed value', async () => {
    const { backend } = redlock();
    const request = candidate('lost-reply', 'first');
    const granted = await backend.attempt(request);
    expect(granted.granted).toBe(true);
    const term = (granted as { token: bigint }).token;
    const lease = { key: request.key, owner: request.owner, fencingToken: term, election: true };
    expect(await backend.proclaim(lease, 'second')).toBe('proclaimed');
    expect(await backend.proclaim(lease, 'second')).toBe('proclaimed');
    const again = await backend.attempt(request);
    expect(again).toMatchObject({ granted: true, token: term });
    expect(await backend.leader(request.key)).toMatchObject({ term, value: 'second' });
    // An older term of the same owner is refused by the compare-and-set.
    expect(await backend.proclaim({ ...lease, fencingToken: term - 1n }, 'stale')).toBe(
      'not-owner',
    );
    expect(await backend.release(lease)).toBe('released');
    expect(await backend.leader(request.key)).toBeNull();
  });
});

describe('Redlock election candidates', () => {
  it('counts the candidates a majority of the nodes shows, not an entry whose time ran out', async () => {
    const { locker, backend } = redlock();
    const key = `candidates-${randomBytes(3).toString('hex')}`;
    const leading = await locker.election(key).campaign('leader', { ttlMs: 30_000 });
    const k = backend.electionKeysOf(key);
    /** Put `owner` in the line of the nodes of `on`, its entry live for `leftMs` (< 0: ran out). */
    const lineUp = async (on: readonly Redis[], owner: string, ticket: number, leftMs: number) => {
      for (const admin of on) {
        const [seconds, micros] = await admin.time();
        const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
        await admin.zadd(k.queue, ticket, owner);
        await admin.hset(k.waiters, owner, nowMs + leftMs);
      }
    };
    // On every node one live candidate and one that vanished; a third on two nodes only.
    await lineUp(admins, 'a'.repeat(32), 1, 60_000);
    await lineUp(admins, 'b'.repeat(32), 2, -1_000);
    await lineUp(admins.slice(0, 2), 'c'.repeat(32), 3, 60_000);
    expect((await backend.leader(key))?.candidates).toBe(2);
    // On every node: counted, whichever majority answers first (the read ends once a majority
    // shows the leader, so an entry on only some of the nodes may or may not be counted).
    await lineUp(admins.slice(2), 'c'.repeat(32), 3, 60_000);
    expect((await backend.leader(key))?.candidates).toBe(3);
    for (const admin of admins) await admin.del(k.queue, k.waiters);
    expect((await backend.leader(key))?.candidates).toBe(1);
    await leading.resign();
  });
});

describe('Redlock election terms', () => {
  it('rise past a counter lost on two nodes and left stale on three (restarts), and past a clock behind the counter', async () => {
    const { backend } = redlock();
    const key = 'terms';
    const k = backend.electionKeysOf(key);
    const first = candidate(key, 'a');
    const one = (await backend.attempt(first)) as { token: bigint };
    await backend.release({ key, owner: first.owner, fencingToken: one.token, election: true });
    // Two nodes restarted empty; three restored from a snapshot older than that grant.
    await admins[0]!.del(k.term);
    await admins[1]!.del(k.term);
    for (const admin of admins.slice(2)) await admin.set(k.term, String(one.token - 5_000_000n));
    // The clock condition: the grants are further apart than the nodes' clocks (whole ms).
    await delay(5);
    const second = candidate(key, 'b');
    const two = (await backend.attempt(second)) as { token: bigint };
    expect(two.token).toBeGreaterThan(one.token);
    await backend.release({ key, owner: second.owner, fencingToken: two.token, election: true });
    // The counter ahead of every clock (a clock that stepped back): it still counts up.
    const ahead = two.token + 10n ** 12n;
    for (const admin of admins) await admin.set(k.term, String(ahead));
    const third = candidate(key, 'c');
    const three = (await backend.attempt(third)) as { token: bigint };
    expect(three.token).toBe(ahead + 1n);
    await backend.release({ key, owner: third.owner, fencingToken: three.token, election: true });
  });
});

describe('Redlock election with nodes down', () => {
  it('campaigns, proclaims, reads and resigns with two of five nodes refused; three refused is a QuorumError', async () => {
    const { locker, backend } = redlock('proxies');
    const watcher = redlock('proxies');
    const key = 'down';
    proxies[3]!.cut();
    proxies[4]!.cut();
    let woken = 0;
    const watch = await watcher.backend.watchElection(key, () => {
      woken += 1;
    });
    const leading = await locker.election(key).campaign('a', { ttlMs: 10_000 });
    await leading.proclaim('b');
    expect(await backend.leader(key)).toMatchObject({ owner: leading.owner, value: 'b' });
    await delay(100);
    expect(woken).toBeGreaterThanOrEqual(2);

    proxies[2]!.cut();
    const read = await backend.leader(key).catch((e: unknown) => e);
    expect(read).toBeInstanceOf(QuorumError);
    const answered = (read as QuorumError).nodes.filter(
      (n) => n.outcome !== 'error' && n.outcome !== 'timeout',
    );
    expect(answered).toHaveLength(2);
    const other = redlock('proxies');
    await expect(other.locker.election(key).tryCampaign('c')).rejects.toBeInstanceOf(QuorumError);
    await expect(other.backend.watchElection(key, () => undefined)).rejects.toBeInstanceOf(
      QuorumError,
    );
    await proxies[2]!.restore();
    await until(async () => (await backend.leader(key)) !== null);
    expect(await leading.resign()).toBe('released');
    watch.stop();
  });

  it('answers a proclaim stored on fewer than a majority with a QuorumError, rolling nothing back', async () => {
    const { locker, backend } = redlock('proxies');
    const key = 'proclaim-minority';
    proxies[3]!.cut();
    proxies[4]!.cut();
    const leading = await locker.election(key).campaign('old', { ttlMs: 10_000 });
    // Node 3 sits on the proclaim: stored on nodes 1 and 2 only, unknown on node 3.
    proxies[2]!.blackhole();
    const failed = await leading.proclaim('new').catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(QuorumError);
    expect(leading.value).toBe('old');
    expect(leading.signal.aborted).toBe(false);
    const k = backend.electionKeysOf(key);
    expect(await admins[0]!.hget(k.leader, 'value')).toBe('new');
    expect(await admins[2]!.hget(k.leader, 'value')).toBe('old');
    // Node 3 gets the proclaim late: the new value is on a majority after all (as after any
    // lost reply); proclaiming again is idempotent.
    await proxies[2]!.restore();
    await until(async () => (await admins[2]!.hget(k.leader, 'value')) === 'new');
    expect(await backend.leader(key)).toMatchObject({ term: leading.term, value: 'new' });
    await leading.proclaim('new');
    expect(leading.value).toBe('new');
    expect(await leading.resign()).toBe('released');
  });

  it('refuses a paused leader’s proclaim once a successor leads on a majority', async () => {
    const { locker } = redlock();
    const other = redlock();
    const key = 'paused';
    const lapsing = await locker
      .election(key)
      .campaign('lapsing', { ttlMs: 300, autoRenew: false });
    const next = await other.locker.election(key).campaign('next', { waitMs: 5_000 });
    await expect(lapsing.proclaim('stale')).rejects.toBeInstanceOf(LockLostError);
    expect(
      await other.backend.proclaim(
        { key, owner: lapsing.owner, fencingToken: lapsing.term, election: true },
        'stale',
      ),
    ).toBe('not-owner');
    expect(await other.backend.leader(key)).toMatchObject({ owner: next.owner, value: 'next' });
    await next.resign();
  });
});

describe('Redlock election watch', () => {
  it('is woken through any node, is silent after stop(), and leaves no subscription after stop() or close()', async () => {
    const { backend } = redlock();
    const key = 'watch';
    const channel = backend.electionKeysOf(key).changed;
    let a = 0;
    let b = 0;
    const watchA = await backend.watchElection(key, () => {
      a += 1;
    });
    const watchB = await backend.watchElection(key, () => {
      b += 1;
    });
    expect(watchA.recheckAfterMs).toBe(1_000);
    // Armed on a majority; the other nodes confirm a moment later.
    await until(async () => (await subscribersOf(channel)).every((n) => n === 1));
    // One node's message is enough.
    await admins[4]!.publish(channel, 'granted');
    await delay(100);
    expect([a, b]).toEqual([1, 1]);
    watchA.stop();
    watchA.stop();
    await admins[0]!.publish(channel, 'granted');
    await delay(100);
    expect([a, b]).toEqual([1, 2]);
    expect(await subscribersOf(channel)).toEqual([1, 1, 1, 1, 1]);
    watchB.stop();
    await admins[0]!.publish(channel, 'granted');
    await delay(100);
    expect([a, b]).toEqual([1, 2]);
    // The last watch's stop quits the subscriber connections.
    await until(async () => (await subscribersOf(channel)).every((n) => n === 0));

    // A watch still live at close(): no callback after it, nothing left subscribed.
    let c = 0;
    await backend.watchElection(key, () => {
      c += 1;
    });
    await until(async () => (await subscribersOf(channel)).every((n) => n === 1));
    await backend.close();
    await until(async () => (await subscribersOf(channel)).every((n) => n === 0));
    await admins[0]!.publish(channel, 'granted');
    await delay(100);
    expect(c).toBe(0);
  });

  it('is armed with two of five nodes refused, and woken by a grant there', async () => {
    const { backend } = redlock('proxies');
    const candidateSide = redlock('proxies');
    const key = 'watch-down';
    proxies[0]!.cut();
    proxies[1]!.cut();
    let woken = 0;
    const watch = await backend.watchElection(key, () => {
      woken += 1;
    });
    const leading = await candidateSide.locker.election(key).campaign('x', { ttlMs: 10_000 });
    await delay(100);
    expect(woken).toBeGreaterThan(0);
    expect(await backend.leader(key)).toMatchObject({ owner: leading.owner, value: 'x' });
    const before = woken;
    await leading.resign();
    await delay(100);
    expect(woken).toBeGreaterThan(before);
    watch.stop();
  });
});
