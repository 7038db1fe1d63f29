/**
 * Each Lua script of `packages/fencelock/src/backends/redlock/scripts/` run directly on one Redlock node of
 * `scripts/services.sh`, through the typed loader of `packages/fencelock/src/backends/redis/scripts.ts` (the shape
 * of redis-semaphore's direct script tests).
 *
 * No clock-skew case: the scripts take no time from the client (no `now` argument). Expiry is
 * Redis's own `PX`/`PEXPIRE` and remaining time is its own `PTTL`, and the token's clock part is
 * the node's own `TIME`, so there is no client clock to skew; the expiry case below checks that
 * the engine alone frees the key.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  readWriteLockKeys as keysOf,
  type ReadWriteLockKeys,
} from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import {
  grantOnNodeScript,
  releaseOnNodeScript,
  settleTokenScript,
  withdrawOnNodeScript,
} from '../../../packages/fencelock/src/backends/redlock/scripts.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const run = `fencelock-redlock-lua-${randomBytes(4).toString('hex')}`;
let client: Redis;
let subscriber: Redis | undefined;

beforeAll(() => {
  client = new Redis(REDLOCK_NODE_URLS[0]!, { maxRetriesPerRequest: 2 });
});

afterEach(async () => {
  vi.restoreAllMocks();
  if (subscriber !== undefined) {
    await subscriber.quit();
    subscriber = undefined;
  }
});

afterAll(async () => {
  const keys = await client.keys(`${run}:*`);
  if (keys.length > 0) await client.del(...keys);
  await client.quit();
});

/** The Redis keys of a fresh lock, named as the backend names them (one hash slot). */
function lockKeys(label: string): ReadWriteLockKeys {
  return keysOf(run, `${label}:${randomBytes(4).toString('hex')}`);
}
type Keys = ReadWriteLockKeys;

function owner(): string {
  return randomBytes(16).toString('hex');
}

/** Subscribe a separate connection to `channel` and collect its messages. */
async function listen(channel: string): Promise<string[]> {
  subscriber = client.duplicate();
  const messages: string[] = [];
  subscriber.on('message', (from: string, message: string) => {
    if (from === channel) messages.push(message);
  });
  await subscriber.subscribe(channel);
  return messages;
}

/** Lifetime of the fence counter the tests give the grant and settle scripts, ms. */
const FENCE_TTL_MS = 20_000;

/** Lifetime of a line entry the tests give the grant script, ms. */
const ENTRY_TTL_MS = 2_000;

/**
 * Grant on the node: `[1, token]` or `[0, ms]`; `ticket` '0' is a single attempt, any other a
 * waiter whose entry lives `entryTtlMs`.
 */
function grant(k: Keys, who: string, ttlMs: number, ticket = '0', entryTtlMs = ENTRY_TTL_MS) {
  return grantOnNodeScript.run(
    client,
    [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
    [who, ttlMs, FENCE_TTL_MS, ticket, entryTtlMs],
  );
}

/** Release on the node: 1 released, 0 not held, -1 not owner. */
function release(k: Keys, who: string, token: string) {
  return releaseOnNodeScript.run(
    client,
    [k.lock, k.queue, k.waiters, k.channel, k.readers, k.readerTokens],
    [who, token],
  );
}

/**
 * Withdraw on the node (`keep`: `grant` leaves the line only, `place` deletes the grant only and
 * stands in line with `ticket`).
 */
function withdraw(k: Keys, who: string, keep?: 'grant' | 'place', ticket = '0') {
  return withdrawOnNodeScript.run(
    client,
    [k.lock, k.queue, k.waiters, k.channel, k.readers, k.readerTokens],
    [who, keep === 'grant' ? '1' : '0', keep === 'place' ? '1' : '0', ticket, ENTRY_TTL_MS, '0'],
  );
}

/** The node's line of `k`, head first. */
function lineOf(k: Keys): Promise<string[]> {
  return client.zrange(k.queue, '0', '-1');
}

/** Settle `token` on the node: 1 settled, 0 not this owner's key. */
function settleToken(k: Keys, who: string, token: string) {
  return settleTokenScript.run(
    client,
    [k.lock, k.fence, k.readers, k.readerTokens],
    [who, token, FENCE_TTL_MS],
  );
}

/** The token of a granting reply (fails on a refusal). */
function tokenOf(reply: [1, string] | [0, number]): string {
  expect(reply[0]).toBe(1);
  return String(reply[1]);
}

/** The node's clock (TIME) in µs. */
async function nodeClockUs(): Promise<bigint> {
  const [seconds, micros] = (await client.time()) as [number, number];
  return BigInt(seconds) * 1_000_000n + BigInt(micros);
}

/** Wait until `messages` has `count` entries (or 2 s pass), then a little more for extras. */
async function settle(messages: string[], count: number): Promise<void> {
  for (let i = 0; i < 100 && messages.length < count; i++) await delay(20);
  await delay(100);
}

describe('grant-on-node.lua', () => {
  it("grants a free key with the node's clock (whole ms, in µs), then counts on, with PX expiries", async () => {
    const k = lockKeys('acquire-free');
    const first = owner();
    const before = await nodeClockUs();
    const token = tokenOf(await grant(k, first, 10_000));
    expect(token).toMatch(/^[1-9][0-9]{15}$/);
    expect(BigInt(token) % 1_000n).toBe(0n);
    expect(BigInt(token)).toBeGreaterThanOrEqual(before - (before % 1_000n));
    expect(BigInt(token)).toBeLessThanOrEqual(await nodeClockUs());
    expect(await client.get(k.lock)).toBe(`${first}:${token}`);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    // The fence counter expires too, fenceTtlMs after the grant.
    expect(await client.get(k.fence)).toBe(token);
    expect(await client.pttl(k.fence)).toBeGreaterThan(FENCE_TTL_MS - 1_000);
    expect(await client.pttl(k.fence)).toBeLessThanOrEqual(FENCE_TTL_MS);

    // While the counter lives, the next token is the next integer (nodes of a quorum agree).
    expect(await release(k, first, token)).toBe(1);
    const second = owner();
    const next = tokenOf(await grant(k, second, 2_000));
    expect(next).toBe(String(BigInt(token) + 1n));
    expect(await client.get(k.lock)).toBe(`${second}:${next}`);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(2_000);
    expect(await client.get(k.fence)).toBe(next);
  });

  it('counts on from a counter ahead of the clock, and above a small counter of an earlier version', async () => {
    const ahead = lockKeys('counter-ahead');
    const future = (await nodeClockUs()) + 60_000_000n;
    await client.set(ahead.fence, String(future));
    expect(tokenOf(await grant(ahead, owner(), 1_000))).toBe(String(future + 1n));

    const legacy = lockKeys('legacy-counter');
    await client.set(legacy.fence, '41'); // INCR's count, no TTL
    const holder = owner();
    expect(tokenOf(await grant(legacy, holder, 1_000))).toBe('42');
    expect(await client.pttl(legacy.fence)).toBeGreaterThan(0);
    // Once that counter is gone (expired, or the node restarted empty), the clock takes over.
    expect(await release(legacy, holder, '42')).toBe(1);
    await client.del(legacy.fence);
    expect(BigInt(tokenOf(await grant(legacy, owner(), 1_000)))).toBeGreaterThanOrEqual(
      (await nodeClockUs()) - 60_000_000n,
    );
  });

  it('answers another owner with [0, holder PTTL] and changes nothing', async () => {
    const k = lockKeys('acquire-held');
    const holder = owner();
    const token = tokenOf(await grant(k, holder, 5_000));
    const reply = await grant(k, owner(), 60_000);
    expect(reply[0]).toBe(0);
    expect(reply[1]).toBeGreaterThan(0);
    expect(reply[1]).toBeLessThanOrEqual(5_000);
    expect(await client.get(k.lock)).toBe(`${holder}:${token}`);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(5_000);
    expect(await client.get(k.fence)).toBe(token);
  });

  it('answers the same owner again with its token and refreshes the TTL (lost reply)', async () => {
    const k = lockKeys('acquire-again');
    const me = owner();
    const token = tokenOf(await grant(k, me, 1_000));
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(1_000);
    expect(await grant(k, me, 60_000)).toEqual([1, token]);
    expect(await client.pttl(k.lock)).toBeGreaterThan(30_000);
    expect(await client.get(k.lock)).toBe(`${me}:${token}`);
    expect(await client.get(k.fence)).toBe(token);
  });

  it('is freed by Redis expiry alone; the next grant gets a higher token', async () => {
    const k = lockKeys('acquire-expired');
    const token = tokenOf(await grant(k, owner(), 50));
    await delay(150);
    expect(await client.exists(k.lock)).toBe(0);
    expect(BigInt(tokenOf(await grant(k, owner(), 5_000)))).toBeGreaterThan(BigInt(token));
  });
});

describe('release-on-node.lua', () => {
  it('compare-and-deletes by owner and token, and publishes nothing with an empty line', async () => {
    const k = lockKeys('release');
    const messages = await listen(k.channel);
    const me = owner();
    const token = tokenOf(await grant(k, me, 10_000));

    expect(await release(k, me, String(BigInt(token) + 1n))).toBe(-1);
    expect(await release(k, owner(), token)).toBe(-1);
    expect(await client.get(k.lock)).toBe(`${me}:${token}`);

    expect(await release(k, me, token)).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe(token);

    // Missing key: not held, nothing created.
    expect(await release(k, me, token)).toBe(0);
    expect(await client.exists(k.lock)).toBe(0);

    // With nobody in the line, a release or withdrawal publishes nothing.
    await settle(messages, 1);
    expect(messages).toEqual([]);
  });
});

describe('withdraw-on-node.lua', () => {
  it("deletes only the given owner's key, whatever its token, and publishes nothing with an empty line", async () => {
    const k = lockKeys('abandon');
    const messages = await listen(k.channel);
    const holder = owner();
    const token = tokenOf(await grant(k, holder, 10_000));

    expect(await withdraw(k, owner())).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:${token}`);

    expect(await withdraw(k, holder)).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe(token);
    expect(await withdraw(k, holder)).toBe(0);

    // With nobody in the line, a release or withdrawal publishes nothing.
    await settle(messages, 1);
    expect(messages).toEqual([]);
  });
});

describe('the line of waiters (line.lua)', () => {
  it('orders waiters by ticket, not arrival; a release wakes the head, which alone is granted', async () => {
    const k = lockKeys('line-order');
    const messages = await listen(k.channel);
    const holder = owner();
    const [early, late] = [owner(), owner()];
    const token = tokenOf(await grant(k, holder, 10_000));

    // `late` reaches this node first, but `early` started waiting before it.
    const [refused, ttl] = await grant(k, late, 10_000, '2000');
    expect(refused).toBe(0);
    expect(ttl).toBeGreaterThan(9_000);
    expect((await grant(k, early, 10_000, '1000'))[0]).toBe(0);
    expect(await lineOf(k)).toEqual([early, late]);
    // A waiter's attempt again keeps its place.
    expect((await grant(k, late, 10_000, '2000'))[0]).toBe(0);
    expect(await lineOf(k)).toEqual([early, late]);

    expect(await release(k, holder, token)).toBe(1);
    await settle(messages, 1);
    expect(messages).toEqual([early]);

    // The key is free, but only the head may take it: the others are told how long its entry
    // may still block them; a single attempt does not join the line.
    const [lateAgain, left] = await grant(k, late, 10_000, '2000');
    expect(lateAgain).toBe(0);
    expect(left).toBeGreaterThan(1_000);
    expect(left).toBeLessThanOrEqual(ENTRY_TTL_MS);
    const single = owner();
    expect((await grant(k, single, 10_000))[0]).toBe(0);
    expect(await lineOf(k)).toEqual([early, late]);
    const next = tokenOf(await grant(k, early, 10_000, '1000'));
    expect(BigInt(next)).toBe(BigInt(token) + 1n);
    // The head keeps its entry while it holds the key (its vote may fail on the other nodes);
    // its release takes it out and wakes the next.
    expect(await lineOf(k)).toEqual([early, late]);
    expect(await client.pttl(k.queue)).toBeGreaterThan(1_000);
    expect(await release(k, early, next)).toBe(1);
    expect(await lineOf(k)).toEqual([late]);
    expect(await client.hkeys(k.waiters)).toEqual([late]);
    await settle(messages, 2);
    expect(messages).toEqual([early, late]);
  });

  it('a waiter this node had not seen is placed by its ticket, ahead of later ones', async () => {
    const k = lockKeys('line-missed');
    const [first, second] = [owner(), owner()];
    // `second` stands in line on this node; `first`, with an earlier ticket, was never seen here.
    const holder = owner();
    const token = tokenOf(await grant(k, holder, 10_000));
    expect((await grant(k, second, 10_000, '2000'))[0]).toBe(0);
    expect(await release(k, holder, token)).toBe(1);
    expect((await grant(k, first, 10_000, '1000'))[0]).toBe(1);
    expect(await lineOf(k)).toEqual([first, second]);
  });

  it('skips an entry whose owner stopped attempting once its time runs out', async () => {
    const k = lockKeys('line-expiry');
    const holder = owner();
    const [gone, next] = [owner(), owner()];
    const token = tokenOf(await grant(k, holder, 10_000));
    expect((await grant(k, gone, 10_000, '1000', 100))[0]).toBe(0);
    expect((await grant(k, next, 10_000, '2000'))[0]).toBe(0);
    expect(await release(k, holder, token)).toBe(1);
    expect((await grant(k, next, 10_000, '2000'))[0]).toBe(0);
    await delay(150);
    tokenOf(await grant(k, next, 10_000, '2000'));
    expect(await lineOf(k)).toEqual([next]);
    expect(await client.hkeys(k.waiters)).toEqual([next]);
  });

  it('a lost vote keeps the place; giving up leaves the line and wakes the next', async () => {
    const k = lockKeys('line-withdraw');
    const messages = await listen(k.channel);
    const [head, next] = [owner(), owner()];
    // `next` was granted here on an empty line but lost its vote on the other nodes: it keeps
    // waiting, and now stands in line by its ticket. `head`, with an earlier ticket, goes first.
    expect((await grant(k, next, 10_000, '2000'))[0]).toBe(1);
    expect(await withdraw(k, next, 'place', '2000')).toBe(1);
    expect(await lineOf(k)).toEqual([next]);
    expect((await grant(k, head, 10_000, '1000'))[0]).toBe(1);
    expect(await lineOf(k)).toEqual([head, next]);
    expect((await grant(k, next, 10_000, '2000'))[0]).toBe(0);

    // `head` lost its vote too: its grant goes, it keeps its place and wakes nobody (it is the
    // head itself); the key stays free for it alone.
    expect(await withdraw(k, head, 'place', '1000')).toBe(1);
    expect(await lineOf(k)).toEqual([head, next]);
    expect((await grant(k, next, 10_000, '2000'))[0]).toBe(0);
    await delay(150);
    expect(messages).toEqual([]);
    // It gives up: it leaves the line and the next one is woken.
    expect(await withdraw(k, head)).toBe(0);
    await settle(messages, 1);
    expect(messages).toEqual([next]);
    expect(await lineOf(k)).toEqual([next]);
    const nextToken = tokenOf(await grant(k, next, 10_000, '2000'));
    expect(await release(k, next, nextToken)).toBe(1);
    expect(await lineOf(k)).toEqual([]);

    // Giving up leaves the line; where it was the head of a free key, the next one is woken.
    const third = owner();
    expect((await grant(k, owner(), 10_000))[0]).toBe(1);
    expect((await grant(k, head, 10_000, '1000'))[0]).toBe(0);
    expect((await grant(k, third, 10_000, '3000'))[0]).toBe(0);
    await client.del(k.lock);
    expect(await withdraw(k, head)).toBe(0);
    expect(await lineOf(k)).toEqual([third]);
    await settle(messages, 2);
    expect(messages).toEqual([next, third]);
  });

  it('leaving the line keeps a grant; a release clears the entry a lost attempt left', async () => {
    const k = lockKeys('line-leave');
    const holder = owner();
    const waiter = owner();
    const token = tokenOf(await grant(k, holder, 10_000));
    expect((await grant(k, waiter, 10_000, '1000'))[0]).toBe(0);
    expect(await withdraw(k, holder, 'grant')).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:${token}`);
    expect(await withdraw(k, waiter, 'grant')).toBe(0);
    expect(await lineOf(k)).toEqual([]);

    // `waiter` won its vote on the other nodes while this one refused it and queued it.
    expect((await grant(k, waiter, 10_000, '1000'))[0]).toBe(0);
    expect(await release(k, waiter, '1')).toBe(-1);
    expect(await lineOf(k)).toEqual([]);
  });
});

describe('settle-token.lua', () => {
  it("writes the combined token into this owner's key (expiry kept) and raises the counter", async () => {
    const k = lockKeys('settle');
    const me = owner();
    const granted = BigInt(tokenOf(await grant(k, me, 10_000)));
    // The combined token of a quorum where another node's clock ran a minute ahead.
    const combined = String(granted + 60_000_000n);

    expect(await settleToken(k, me, combined)).toBe(1);
    expect(await client.get(k.lock)).toBe(`${me}:${combined}`);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    expect(await client.get(k.fence)).toBe(combined);
    expect(await client.pttl(k.fence)).toBeGreaterThan(FENCE_TTL_MS - 1_000);
    expect(await client.pttl(k.fence)).toBeLessThanOrEqual(FENCE_TTL_MS);

    // A lower token never lowers the counter; the next grant counts past the settled token,
    // although this node's clock is a minute behind it.
    const lower = String(granted + 1n);
    expect(await settleToken(k, me, lower)).toBe(1);
    expect(await client.get(k.fence)).toBe(combined);
    expect(await release(k, me, lower)).toBe(1);
    expect(tokenOf(await grant(k, owner(), 5_000))).toBe(String(BigInt(combined) + 1n));
  });

  it('changes nothing when another owner holds the key, or nobody does', async () => {
    const k = lockKeys('settle-other');
    const holder = owner();
    const future = String((await nodeClockUs()) + 60_000_000n);
    expect(await settleToken(k, holder, future)).toBe(0);
    expect(await client.exists(k.lock, k.fence)).toBe(0);

    const token = tokenOf(await grant(k, holder, 10_000));
    expect(await settleToken(k, owner(), future)).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:${token}`);
    expect(await client.get(k.fence)).toBe(token);
  });
});

describe('defineScript loader (scripts of another folder)', () => {
  it('hashes each script as Redis does', async () => {
    for (const script of [
      grantOnNodeScript,
      releaseOnNodeScript,
      withdrawOnNodeScript,
      settleTokenScript,
    ]) {
      expect(await client.script('LOAD', script.source)).toBe(script.sha1);
    }
  });
});
