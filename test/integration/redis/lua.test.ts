/**
 * Each Lua script of `src/backends/redis/scripts/` run directly, through the typed loader of
 * `scripts.ts`, against the real Redis of `scripts/services.sh` (redis-semaphore's
 * `test/src/semaphore/acquire/internal.test.ts` shape).
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
  abandonScript,
  acquireScript,
  inspectScript,
  releaseScript,
  renewScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { REDIS_URL } from '../../helpers/engines.js';

const run = `fencelock-lua-${randomBytes(4).toString('hex')}`;
let client: Redis;
let subscriber: Redis | undefined;

beforeAll(() => {
  client = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
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

/** The Redis keys of one lock, laid out as the backend lays them out (one hash slot). */
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

describe('acquire.lua', () => {
  it('grants a free key with token 1, then 2, with a PX expiry of at most ttlMs', async () => {
    const k = lockKeys('acquire-free');
    const first = owner();
    expect(await acquireScript.run(client, [k.lock, k.fence], [first, 10_000])).toEqual([1, '1']);
    expect(await client.get(k.lock)).toBe(`${first}:1`);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    // The fencing counter never expires.
    expect(await client.pttl(k.fence)).toBe(-1);

    expect(await releaseScript.run(client, [k.lock, k.channel], [first, '1'])).toBe(1);
    const second = owner();
    expect(await acquireScript.run(client, [k.lock, k.fence], [second, 2_000])).toEqual([1, '2']);
    expect(await client.get(k.lock)).toBe(`${second}:2`);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(2_000);
    expect(await client.get(k.fence)).toBe('2');
  });

  it('answers another owner with [0, holder PTTL] and changes nothing', async () => {
    const k = lockKeys('acquire-held');
    const holder = owner();
    await acquireScript.run(client, [k.lock, k.fence], [holder, 5_000]);
    const reply = await acquireScript.run(client, [k.lock, k.fence], [owner(), 60_000]);
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
    expect(await acquireScript.run(client, [k.lock, k.fence], [me, 1_000])).toEqual([1, '1']);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(1_000);
    expect(await acquireScript.run(client, [k.lock, k.fence], [me, 60_000])).toEqual([1, '1']);
    expect(await client.pttl(k.lock)).toBeGreaterThan(30_000);
    expect(await client.get(k.lock)).toBe(`${me}:1`);
    expect(await client.get(k.fence)).toBe('1');
  });

  it('is freed by Redis expiry alone; the next grant gets the next token', async () => {
    const k = lockKeys('acquire-expired');
    await acquireScript.run(client, [k.lock, k.fence], [owner(), 50]);
    await delay(150);
    expect(await client.exists(k.lock)).toBe(0);
    const next = owner();
    expect(await acquireScript.run(client, [k.lock, k.fence], [next, 5_000])).toEqual([1, '2']);
  });
});

describe('renew.lua', () => {
  it('extends only when owner and token match; never re-creates a vanished key', async () => {
    const k = lockKeys('renew');
    const me = owner();
    await acquireScript.run(client, [k.lock, k.fence], [me, 1_000]);

    expect(await renewScript.run(client, [k.lock], [me, '2', 60_000])).toBe(-1);
    expect(await renewScript.run(client, [k.lock], [owner(), '1', 60_000])).toBe(-1);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(1_000);

    expect(await renewScript.run(client, [k.lock], [me, '1', 60_000])).toBe(1);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(30_000);
    expect(pttl).toBeLessThanOrEqual(60_000);
    expect(await client.get(k.lock)).toBe(`${me}:1`);

    await client.del(k.lock);
    expect(await renewScript.run(client, [k.lock], [me, '1', 60_000])).toBe(0);
    expect(await client.exists(k.lock)).toBe(0);
  });
});

describe('release.lua', () => {
  it('compare-and-deletes by owner and token, and publishes the token once', async () => {
    const k = lockKeys('release');
    const messages = await listen(k.channel);
    const me = owner();
    await acquireScript.run(client, [k.lock, k.fence], [me, 10_000]);

    expect(await releaseScript.run(client, [k.lock, k.channel], [me, '2'])).toBe(-1);
    expect(await releaseScript.run(client, [k.lock, k.channel], [owner(), '1'])).toBe(-1);
    expect(await client.get(k.lock)).toBe(`${me}:1`);

    expect(await releaseScript.run(client, [k.lock, k.channel], [me, '1'])).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe('1');

    // Missing key: not held, nothing created.
    expect(await releaseScript.run(client, [k.lock, k.channel], [me, '1'])).toBe(0);
    expect(await client.exists(k.lock)).toBe(0);

    await settle(messages, 1);
    expect(messages).toEqual(['1']);
  });
});

describe('abandon.lua', () => {
  it("deletes only the given owner's key, whatever its token, and publishes", async () => {
    const k = lockKeys('abandon');
    const messages = await listen(k.channel);
    const holder = owner();
    await acquireScript.run(client, [k.lock, k.fence], [holder, 10_000]);

    expect(await abandonScript.run(client, [k.lock, k.channel], [owner()])).toBe(0);
    expect(await client.get(k.lock)).toBe(`${holder}:1`);

    expect(await abandonScript.run(client, [k.lock, k.channel], [holder])).toBe(1);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await client.get(k.fence)).toBe('1');
    expect(await abandonScript.run(client, [k.lock, k.channel], [holder])).toBe(0);

    await settle(messages, 1);
    expect(messages).toEqual(['1']);
  });
});

describe('inspect.lua', () => {
  it('returns holder, PTTL and last token in one step', async () => {
    const k = lockKeys('inspect');
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, null]);

    const me = owner();
    await acquireScript.run(client, [k.lock, k.fence], [me, 10_000]);
    const [value, pttl, last] = await inspectScript.run(client, [k.lock, k.fence], []);
    expect(value).toBe(`${me}:1`);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    expect(last).toBe('1');

    await releaseScript.run(client, [k.lock, k.channel], [me, '1']);
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, '1']);
  });
});

describe('defineScript loader', () => {
  it('hashes each script as Redis does', async () => {
    for (const script of [
      acquireScript,
      renewScript,
      releaseScript,
      abandonScript,
      inspectScript,
    ]) {
      expect(await client.script('LOAD', script.source)).toBe(script.sha1);
    }
  });

  it('falls back from EVALSHA to EVAL after SCRIPT FLUSH, then uses EVALSHA again', async () => {
    // SCRIPT FLUSH is server-wide; every fencelock caller goes through this same fallback.
    const k = lockKeys('fallback');
    const evalsha = vi.spyOn(client, 'evalsha');
    const evalSpy = vi.spyOn(client, 'eval');
    await client.script('FLUSH');
    expect(await client.script('EXISTS', inspectScript.sha1)).toEqual([0]);

    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, null]);
    expect(evalsha).toHaveBeenCalledTimes(1);
    expect(evalSpy).toHaveBeenCalledTimes(1);
    // EVAL left the script in Redis's cache: the next call needs no fallback.
    expect(await client.script('EXISTS', inspectScript.sha1)).toEqual([1]);
    const me = owner();
    expect(await acquireScript.run(client, [k.lock, k.fence], [me, 5_000])).toEqual([1, '1']);
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([
      `${me}:1`,
      expect.any(Number),
      '1',
    ]);
    expect(evalsha).toHaveBeenCalledTimes(3);
    // acquire.lua was flushed too, so it fell back once; inspect did not fall back again.
    expect(evalSpy).toHaveBeenCalledTimes(2);
  });

  it('surfaces script errors other than NOSCRIPT without retrying', async () => {
    const k = lockKeys('error');
    await client.sadd(k.fence, 'x'); // a fence key of the wrong type: INCR fails in the script
    const evalSpy = vi.spyOn(client, 'eval');
    await expect(acquireScript.run(client, [k.lock, k.fence], [owner(), 1_000])).rejects.toThrow(
      /WRONGTYPE|wrong kind/i,
    );
    expect(evalSpy).not.toHaveBeenCalled();
  });
});
