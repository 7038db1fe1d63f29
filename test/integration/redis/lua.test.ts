/**
 * Lua scripts of `packages/fencelock/src/backends/redis/scripts/` run directly, through the typed loader of
 * `scripts.ts`, against the real Redis of `scripts/services.sh` (the shape of redis-semaphore's
 * direct script tests). The queued scripts have their own cases in `fairness.test.ts`; the
 * Redlock scripts theirs in `test/integration/redlock/lua.test.ts`.
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
  inspectScript,
  queuedAcquireScript,
  queuedReleaseScript,
  renewManyScript,
  renewScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import { REDIS_URL } from '../../helpers/engines.js';

const run = `fencelock-lua-${randomBytes(4).toString('hex')}`;
let client: Redis;

beforeAll(() => {
  client = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
});

afterEach(() => {
  vi.restoreAllMocks();
});

afterAll(async () => {
  const keys = await client.keys(`${run}:*`);
  if (keys.length > 0) await client.del(...keys);
  await client.quit();
});

/** The Redis keys of one lock, laid out as the backend lays them out (one hash slot). */
function lockKeys(label: string) {
  const base = `${run}:{${label}:${randomBytes(4).toString('hex')}}`;
  return {
    lock: `${base}:lock`,
    fence: `${base}:fence`,
    channel: `${base}:released`,
    queue: `${base}:queue`,
    waiters: `${base}:waiters`,
  };
}

/** A single attempt (never queued) by `who`, for `ttlMs`: `[1, token]` or `[0, ms]`. */
function grant(k: ReturnType<typeof lockKeys>, who: string, ttlMs: number) {
  return queuedAcquireScript.run(client, [k.lock, k.fence, k.queue, k.waiters], [who, ttlMs, 0]);
}

/** Release by owner and token: 1 released, 0 not held, -1 not owner. */
function release(k: ReturnType<typeof lockKeys>, who: string, token: string) {
  return queuedReleaseScript.run(client, [k.lock, k.channel, k.queue, k.waiters], [who, token]);
}

function owner(): string {
  return randomBytes(16).toString('hex');
}

describe('queued-acquire.lua (a single attempt)', () => {
  it('is freed by Redis expiry alone; the next grant gets the next token', async () => {
    const k = lockKeys('acquire-expired');
    expect(await grant(k, owner(), 50)).toEqual([1, '1']);
    await delay(150);
    expect(await client.exists(k.lock)).toBe(0);
    expect(await grant(k, owner(), 5_000)).toEqual([1, '2']);
  });
});

describe('renew.lua', () => {
  it('extends only when owner and token match; never re-creates a vanished key', async () => {
    const k = lockKeys('renew');
    const me = owner();
    await grant(k, me, 1_000);

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

describe('inspect.lua', () => {
  it('returns holder, PTTL and last token in one step', async () => {
    const k = lockKeys('inspect');
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, null]);

    const me = owner();
    await grant(k, me, 10_000);
    const [value, pttl, last] = await inspectScript.run(client, [k.lock, k.fence], []);
    expect(value).toBe(`${me}:1`);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    expect(last).toBe('1');

    await release(k, me, '1');
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, '1']);
  });
});

describe('defineScript loader', () => {
  it('hashes each script as Redis does', async () => {
    for (const script of [
      queuedAcquireScript,
      renewScript,
      renewManyScript,
      queuedReleaseScript,
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
    expect(await grant(k, me, 5_000)).toEqual([1, '1']);
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([
      `${me}:1`,
      expect.any(Number),
      '1',
    ]);
    expect(evalsha).toHaveBeenCalledTimes(3);
    // queued-acquire.lua was flushed too, so it fell back once; inspect did not fall back again.
    expect(evalSpy).toHaveBeenCalledTimes(2);
  });

  it('surfaces script errors other than NOSCRIPT without retrying', async () => {
    const k = lockKeys('error');
    await client.sadd(k.fence, 'x'); // a fence key of the wrong type: INCR fails in the script
    const evalSpy = vi.spyOn(client, 'eval');
    await expect(grant(k, owner(), 1_000)).rejects.toThrow(/WRONGTYPE|wrong kind/i);
    expect(evalSpy).not.toHaveBeenCalled();
  });
});
