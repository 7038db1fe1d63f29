/**
 * Lua scripts of `packages/fencelock/src/backends/redis/scripts/` run directly, through the typed loader of
 * `scripts.ts`, against the real Redis of `scripts/services.sh` (the shape of redis-semaphore's
 * direct script tests). The queued scripts have their own cases in `fairness.test.ts`; the
 * Redlock scripts theirs in `test/integration/redlock/lua.test.ts`.
 *
 * No clock-skew case: the scripts take no time from the client (no `now` argument). Expiry is
 * Redis's own `PX`/`PEXPIRE` and remaining time is its own `PTTL`, and the token's clock part is
 * Redis's own `TIME`, so there is no client clock to skew; the expiry case below checks that the
 * engine alone frees the key.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  type ReadWriteLockKeys as LockKeys,
  readWriteLockKeys,
} from '../../../packages/fencelock/src/backends/redis/lock-keys.js';
import {
  inspectLockScript,
  inspectScript,
  queuedAcquireScript,
  queuedReleaseScript,
  readAcquireScript,
  readRenewScript,
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

/** The Redis keys of a fresh lock, laid out by the backend's own `readWriteLockKeys` (one hash slot). */
function keysFor(label: string) {
  return readWriteLockKeys(run, `${label}:${randomBytes(4).toString('hex')}`);
}

/** Lifetime of the fence counter the tests give the acquire script, ms. */
const FENCE_TTL_MS = 20_000;

/** A single attempt (never queued) by `who`, for `ttlMs`: `[1, token]` or `[0, ms]`. */
function grant(k: LockKeys, who: string, ttlMs: number) {
  return queuedAcquireScript.run(
    client,
    [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens],
    [who, ttlMs, 0, FENCE_TTL_MS],
  );
}

/** The token of a granting reply, as the script sent it (fails on a refusal). */
function tokenOf(reply: [1, string] | [0, number] | [-2]): string {
  expect(reply[0]).toBe(1);
  return String(reply[1]);
}

/** Redis's clock (TIME) in µs. */
async function serverClockUs(): Promise<bigint> {
  const [seconds, micros] = (await client.time()) as [number, number];
  return BigInt(seconds) * 1_000_000n + BigInt(micros);
}

/** Release by owner and token: 1 released, 0 not held, -1 not owner. */
function release(k: LockKeys, who: string, token: string) {
  return queuedReleaseScript.run(
    client,
    [k.lock, k.fence, k.channel, k.queue, k.waiters, k.readers, k.readerTokens],
    [who, token, 2_000, 5_000],
  );
}

function owner(): string {
  return randomBytes(16).toString('hex');
}

describe('queued-acquire.lua (a single attempt)', () => {
  it('is freed by Redis expiry alone; the next grant gets a higher token', async () => {
    const k = keysFor('acquire-expired');
    const first = tokenOf(await grant(k, owner(), 50));
    await delay(150);
    expect(await client.exists(k.lock)).toBe(0);
    const second = tokenOf(await grant(k, owner(), 5_000));
    expect(BigInt(second)).toBeGreaterThan(BigInt(first));
  });

  it("issues the server's clock in µs, every digit, and keeps the counter for fenceTtlMs", async () => {
    const k = keysFor('clock-token');
    const before = await serverClockUs();
    const token = tokenOf(await grant(k, owner(), 1_000));
    const after = await serverClockUs();
    // A plain decimal (no exponent, no rounding to 14 digits), within the clock readings.
    expect(token).toMatch(/^[1-9][0-9]{15}$/);
    expect(BigInt(token)).toBeGreaterThanOrEqual(before);
    expect(BigInt(token)).toBeLessThanOrEqual(after);
    expect(await client.get(k.fence)).toBe(token);
    const fencePttl = await client.pttl(k.fence);
    expect(fencePttl).toBeGreaterThan(FENCE_TTL_MS - 1_000);
    expect(fencePttl).toBeLessThanOrEqual(FENCE_TTL_MS);
    expect(await client.get(k.lock)).toMatch(new RegExp(`:${token}$`));
  });

  it('counts on from a counter ahead of the clock (the counter, not the clock, decides then)', async () => {
    const k = keysFor('counter-ahead');
    const ahead = (await serverClockUs()) + 60_000_000n;
    await client.set(k.fence, String(ahead));
    expect(tokenOf(await grant(k, owner(), 1_000))).toBe(String(ahead + 1n));
  });

  it('goes above a counter of an earlier version (small, no TTL) and gives it a TTL', async () => {
    const k = keysFor('legacy-counter');
    // What INCR left behind: a small count that never expires.
    await client.set(k.fence, '41');
    expect(await client.pttl(k.fence)).toBe(-1);
    const token = BigInt(tokenOf(await grant(k, owner(), 1_000)));
    expect(token).toBeGreaterThan(41n);
    expect(token).toBeGreaterThanOrEqual((await serverClockUs()) - 60_000_000n);
    expect(await client.pttl(k.fence)).toBeGreaterThan(0);
  });
});

describe('renew.lua', () => {
  it('extends only when owner and token match; never re-creates a vanished key', async () => {
    const k = keysFor('renew');
    const me = owner();
    const token = tokenOf(await grant(k, me, 1_000));
    const other = String(BigInt(token) + 1n);

    expect(await renewScript.run(client, [k.lock], [me, other, 60_000])).toBe(-1);
    expect(await renewScript.run(client, [k.lock], [owner(), token, 60_000])).toBe(-1);
    expect(await client.pttl(k.lock)).toBeLessThanOrEqual(1_000);

    expect(await renewScript.run(client, [k.lock], [me, token, 60_000])).toBe(1);
    const pttl = await client.pttl(k.lock);
    expect(pttl).toBeGreaterThan(30_000);
    expect(pttl).toBeLessThanOrEqual(60_000);
    expect(await client.get(k.lock)).toBe(`${me}:${token}`);

    await client.del(k.lock);
    expect(await renewScript.run(client, [k.lock], [me, token, 60_000])).toBe(0);
    expect(await client.exists(k.lock)).toBe(0);
  });
});

describe('inspect.lua', () => {
  it('returns holder, PTTL and last token in one step', async () => {
    const k = keysFor('inspect');
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, null]);

    const me = owner();
    const token = tokenOf(await grant(k, me, 10_000));
    const [value, pttl, last] = await inspectScript.run(client, [k.lock, k.fence], []);
    expect(value).toBe(`${me}:${token}`);
    expect(pttl).toBeGreaterThan(5_000);
    expect(pttl).toBeLessThanOrEqual(10_000);
    expect(last).toBe(token);

    await release(k, me, token);
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([null, -2, token]);
  });
});

describe('read scripts (read-acquire.lua, read-renew.lua, inspect-lock.lua; releases of readers)', () => {
  const acquireKeys = (k: LockKeys) =>
    [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens] as const;
  /** A read attempt by `who`: `waiterTtlMs` 0 never queues; `heldWriter` '' for none. */
  const read = (k: LockKeys, who: string, ttlMs: number, waiterTtlMs = 0, heldWriter = '') =>
    readAcquireScript.run(client, acquireKeys(k), [
      who,
      ttlMs,
      waiterTtlMs,
      ttlMs + 5_000,
      heldWriter,
    ]);
  const renewRead = (k: LockKeys, who: string, token: string, ttlMs: number) =>
    readRenewScript.run(client, [k.lock, k.readers, k.readerTokens], [who, token, ttlMs]);
  const inspectLock = (k: LockKeys) =>
    inspectLockScript.run(client, [k.lock, k.fence, k.readers, k.readerTokens], []);

  it("a reader's grant whose time ran out is not held: release and renew say not-held", async () => {
    const k = keysFor('read-expired');
    const me = owner();
    const token = tokenOf(await read(k, me, 50));
    await delay(120);
    // Redis's expiry of the readers' keys alone frees the lock.
    expect(await client.exists(k.readers, k.readerTokens)).toBe(0);
    expect(await renewRead(k, me, token, 10_000)).toBe(0);
    expect(await release(k, me, token)).toBe(0);
    expect(await client.exists(k.readers, k.readerTokens)).toBe(0);
  });

  it('a writer waits for live readers only; an expired reader among them is dropped', async () => {
    const k = keysFor('read-then-write');
    const [short, long] = [owner(), owner()];
    tokenOf(await read(k, short, 50));
    const longToken = tokenOf(await read(k, long, 1_000));
    await delay(120);
    const busy = await grant(k, owner(), 10_000);
    expect(busy[0]).toBe(0);
    expect(busy[1]).toBeGreaterThan(500);
    expect(busy[1]).toBeLessThanOrEqual(1_000);
    // The expired reader's entry is gone; the live one stays, its key living as long as it.
    expect(await client.zrange(k.readers, '0', '-1')).toEqual([long]);
    expect(await client.pttl(k.readers)).toBeLessThanOrEqual(1_000);
    // Its renewal compares the token, and extends the readers' keys with the grant.
    expect(await renewRead(k, long, String(BigInt(longToken) + 1n), 60_000)).toBe(-1);
    expect(await renewRead(k, long, longToken, 60_000)).toBe(1);
    expect(await client.pttl(k.readers)).toBeGreaterThan(30_000);
    expect(await client.pttl(k.readerTokens)).toBeGreaterThan(30_000);
    expect(await release(k, long, longToken)).toBe(1);
    expect(await client.exists(k.readers, k.readerTokens)).toBe(0);
    const writer = tokenOf(await grant(k, owner(), 1_000));
    expect(BigInt(writer)).toBeGreaterThan(BigInt(longToken));
  });

  it('a downgrade blocked by a waiting writer answers [-2] and leaves nothing', async () => {
    const k = keysFor('downgrade-blocked');
    const [writer, waiting, reader] = [owner(), owner(), owner()];
    const writerToken = tokenOf(await grant(k, writer, 10_000));
    const queued = await queuedAcquireScript.run(client, acquireKeys(k), [
      waiting,
      10_000,
      2_000,
      15_000,
    ]);
    expect(queued[0]).toBe(0);
    expect(await read(k, reader, 10_000, 2_000, writer)).toEqual([-2]);
    expect(await client.lrange(k.queue, 0, -1)).toEqual([waiting]);
    expect(await client.hexists(k.waiters, reader)).toBe(0);
    expect(await client.exists(k.readers)).toBe(0);
    // With no writer waiting, the same downgrade passes its own writer.
    await client.del(k.queue, k.waiters);
    const readToken = tokenOf(await read(k, reader, 10_000, 2_000, writer));
    expect(BigInt(readToken)).toBeGreaterThan(BigInt(writerToken));
    // A downgrade naming another writer than the holder is blocked too.
    expect(await read(k, owner(), 10_000, 2_000, owner())).toEqual([-2]);
    await client.del(k.lock, k.readers, k.readerTokens);
  });

  it('inspect-lock.lua: the writer first, else the earliest reader and the highest token', async () => {
    const k = keysFor('inspect-lock');
    expect(await inspectLock(k)).toEqual([null, -2, null, null, null, 0, null]);
    const [r1, r2] = [owner(), owner()];
    const t1 = tokenOf(await read(k, r1, 10_000));
    const t2 = tokenOf(await read(k, r2, 20_000));
    const [value, pttl, last, reader, readerToken, leftMs, highest] = await inspectLock(k);
    expect([value, pttl, last, reader, readerToken, highest]).toEqual([null, -2, t2, r1, t1, t2]);
    expect(leftMs).toBeGreaterThan(5_000);
    expect(leftMs).toBeLessThanOrEqual(10_000);
    await client.del(k.readers, k.readerTokens);
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
    const k = keysFor('fallback');
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
    const token = tokenOf(await grant(k, me, 5_000));
    expect(await inspectScript.run(client, [k.lock, k.fence], [])).toEqual([
      `${me}:${token}`,
      expect.any(Number),
      token,
    ]);
    expect(evalsha).toHaveBeenCalledTimes(3);
    // queued-acquire.lua was flushed too, so it fell back once; inspect did not fall back again.
    expect(evalSpy).toHaveBeenCalledTimes(2);
  });

  it('surfaces script errors other than NOSCRIPT without retrying', async () => {
    const k = keysFor('error');
    await client.sadd(k.fence, 'x'); // a fence key of the wrong type: GET fails in the script
    const evalSpy = vi.spyOn(client, 'eval');
    await expect(grant(k, owner(), 1_000)).rejects.toThrow(/WRONGTYPE|wrong kind/i);
    expect(evalSpy).not.toHaveBeenCalled();
  });
});
