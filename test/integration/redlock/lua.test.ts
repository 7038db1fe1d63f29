/**
 * Each Lua script of `packages/fencelock/src/backends/redlock/scripts/` run directly on one Redlock node of
 * `scripts/services.sh`, through the typed loader of `packages/fencelock/src/backends/redis/scripts.ts` (the shape
 * of redis-semaphore's direct script tests).
 *
 * No clock-skew case: the scripts take no time from the client (no `now` argument). Expiry is
 * Redis's own `PX`/`PEXPIRE` and remaining time is its own `PTTL`, so there is no client clock to
 * skew; the expiry case below checks that the engine alone frees the key.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
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

/**
 * The Redis keys of one lock, laid out as the backend lays them out (one hash slot), and the
 * release channel of the single-node backend, on which these scripts must publish nothing.
 */
function lockKeys(label: string) {
  const base = `${run}:{${label}:${randomBytes(4).toString('hex')}}`;
  return { lock: `${base}:lock`, fence: `${base}:fence`, channel: `${base}:released` };
}

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

/** Wait until `messages` has `count` entries (or 2 s pass), then a little more for extras. */
async function settle(messages: string[], count: number): Promise<void> {
  for (let i = 0; i < 100 && messages.length < count; i++) await delay(20);
  await delay(100);
}

describe('grant-on-node.lua', () => {
  it('grants a free key with token 1, then 2, with a PX expiry of at most ttlMs', async () => {
    const k = lockKeys('acquire-free');
    const first = owner();
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [first, 10_000])).toEqual([
      1,
      '1',
    ]);
    expect(await client.get(k.lock)).toBe(`${first}:1`);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    // The fencing counter never expires.
    expect(await client.pttl(k.fence)).toBe(-1);

    expect(await releaseOnNodeScript.run(client, [k.lock], [first, '1'])).toBe(1);
    const second = owner();
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [second, 2_000])).toEqual([
      1,
      '2',
    ]);
    expect(await client.get(k.lock)).toBe(`${second}:2`);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(2_000);
    expect(await client.get(k.fence)).toBe('2');
  });

  it('answers another owner with [0, holder PTTL] and changes nothing', async () => {
    const k = lockKeys('acquire-held');
    const holder = owner();
    await grantOnNodeScript.run(client, [k.lock, k.fence], [holder, 5_000]);
    const reply = await grantOnNodeScript.run(client, [k.lock, k.fence], [owner(), 60_000]);
    expect(reply[0]).toBe(0);
    expect(reply[1]).toBeGreaterThan(0);
    expect(reply[1]).toBeLessThanOrEqual(5_000);
    expect(await client.get(k.lock)).toBe(`${holder}:1`);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(5_000);
    expect(await client.get(k.fence)).toBe('1');
  });

  it('answers the same owner again with its token and refreshes the TTL (lost reply)', async () => {
    const k = lockKeys('acquire-again');
    const me = owner();
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [me, 1_000])).toEqual([1, '1']);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(1_000);
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [me, 60_000])).toEqual([1, '1']);
    expect(await client.pttl(k.lock)).toBeGreaterThan(30_000);
    expect(await client.get(k.lock)).toBe(`${me}:1`);
    expect(await client.get(k.fence)).toBe('1');
  });

  it('is freed by Redis expiry alone; the next grant gets the next token', async () => {
    const k = lockKeys('acquire-expired');
    await grantOnNodeScript.run(client, [k.lock, k.fence], [owner(), 50]);
    await delay(150);
    expect(await client.exists(k.lock)).toBe(0);
    const next = owner();
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [next, 5_000])).toEqual([1, '2']);
  });
});

describe('release-on-node.lua', () => {
  it('compare-and-deletes by owner and token, and publishes nothing', async () => {
    const k = lockKeys('release');
    const messages = await listen(k.channel);
    const me = owner();
    await grantOnNodeScript.run(client, [k.lock, k.fence], [me, 10_000]);

    expect(await releaseOnNodeScript.run(client, [k.lock], [me, '2'])).toBe(-1);
    expect(await releaseOnNodeScript.run(client, [k.lock], [owner(), '1'])).toBe(-1);
    expect(await client.get(k.lock)).toBe(`${me}:1`);

    expect(await releaseOnNodeScript.run(client, [k.lock], [me, '1'])).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe('1');

    // Missing key: not held, nothing created.
    expect(await releaseOnNodeScript.run(client, [k.lock], [me, '1'])).toBe(0);
    expect(await client.exists(k.lock)).toBe(0);

    // Nobody waits on a Redlock node's channel: a release or withdrawal announces nothing.
    await settle(messages, 1);
    expect(messages).toEqual([]);
  });
});

describe('withdraw-on-node.lua', () => {
  it("deletes only the given owner's key, whatever its token, and publishes nothing", async () => {
    const k = lockKeys('abandon');
    const messages = await listen(k.channel);
    const holder = owner();
    await grantOnNodeScript.run(client, [k.lock, k.fence], [holder, 10_000]);

    expect(await withdrawOnNodeScript.run(client, [k.lock], [owner()])).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:1`);

    expect(await withdrawOnNodeScript.run(client, [k.lock], [holder])).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe('1');
    expect(await withdrawOnNodeScript.run(client, [k.lock], [holder])).toBe(0);

    // Nobody waits on a Redlock node's channel: a release or withdrawal announces nothing.
    await settle(messages, 1);
    expect(messages).toEqual([]);
  });
});

describe('settle-token.lua', () => {
  it("writes the combined token into this owner's key (expiry kept) and raises the counter", async () => {
    const k = lockKeys('settle');
    const me = owner();
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [me, 10_000])).toEqual([1, '1']);

    expect(await settleTokenScript.run(client, [k.lock, k.fence], [me, '7'])).toBe(1);
    expect(await client.get(k.lock)).toBe(`${me}:7`);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    expect(await client.get(k.fence)).toBe('7');

    // A lower token never lowers the counter; the next grant counts past the settled token.
    expect(await settleTokenScript.run(client, [k.lock, k.fence], [me, '3'])).toBe(1);
    expect(await client.get(k.fence)).toBe('7');
    expect(await releaseOnNodeScript.run(client, [k.lock], [me, '3'])).toBe(1);
    expect(await grantOnNodeScript.run(client, [k.lock, k.fence], [owner(), 5_000])).toEqual([
      1,
      '8',
    ]);
  });

  it('changes nothing when another owner holds the key, or nobody does', async () => {
    const k = lockKeys('settle-other');
    const holder = owner();
    expect(await settleTokenScript.run(client, [k.lock, k.fence], [holder, '5'])).toBe(0);
    expect(await client.exists(k.lock, k.fence)).toBe(0);

    await grantOnNodeScript.run(client, [k.lock, k.fence], [holder, 10_000]);
    expect(await settleTokenScript.run(client, [k.lock, k.fence], [owner(), '5'])).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:1`);
    expect(await client.get(k.fence)).toBe('1');
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
