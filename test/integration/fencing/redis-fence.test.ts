/**
 * The Redis fencing guard on the standalone Redis: an older token is refused with both tokens,
 * an equal token is accepted (the same holder writing again), a newer one advances; 20 writers
 * racing with interleaved tokens leave the highest token, and every older write that came after
 * a newer one is refused. Tokens are compared exactly, also beyond 2^53. The same for the fenced
 * compare-and-set, which also refuses (without writing the value, but recording a newer token)
 * when the value is not the expected one, and checks the token first. Redis errors come back as
 * BackendError with the engine's error as cause.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  type CompareAndSetResult,
  RedisFence,
} from '../../../packages/fencelock/src/fencing/index.js';
import {
  BackendError,
  InvalidArgumentError,
  StaleTokenError,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_PORT } from '../../helpers/engines.js';

const prefix = `fencelock-it-fence-${randomBytes(3).toString('hex')}`;
const client = new Redis(REDIS_PORT, '127.0.0.1');
const fence = new RedisFence(client, prefix);

afterAll(async () => {
  const keys = await client.keys(`${prefix}:*`);
  if (keys.length > 0) await client.del(...keys);
  client.disconnect();
});

type CasOutcome = CompareAndSetResult | { stale: [bigint, bigint] };

/** The result of a compare-and-set, or the tokens of its StaleTokenError. */
async function cas(
  f: RedisFence,
  resource: string,
  token: bigint,
  expected: string | null,
  value: string,
): Promise<CasOutcome> {
  try {
    return await f.compareAndSet(resource, token, expected, value);
  } catch (error) {
    if (error instanceof StaleTokenError) {
      expect(error.resource).toBe(resource);
      return { stale: [error.attemptedToken, error.currentToken] };
    }
    throw error;
  }
}

describe('RedisFence', () => {
  it('refuses an older token, accepts an equal one, advances on a newer one', async () => {
    await fence.write('r', 5n, 'five');
    await fence.write('r', 5n, 'five again');
    expect(await fence.read('r')).toEqual({ token: 5n, value: 'five again' });
    const error = await fence.write('r', 4n, 'four').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect((error as StaleTokenError).attemptedToken).toBe(4n);
    expect((error as StaleTokenError).currentToken).toBe(5n);
    await fence.write('r', 6n, 'six');
    expect(await fence.read('r')).toEqual({ token: 6n, value: 'six' });
    expect(await fence.read('never-written')).toBeNull();
  });

  it('compares tokens exactly beyond 2^53 (Sentinel epochs)', async () => {
    const big = (1n << 60n) + 1n;
    await fence.write('big', big, 'a');
    await expect(fence.write('big', big - 1n, 'b')).rejects.toBeInstanceOf(StaleTokenError);
    await fence.write('big', big + 1n, 'c');
    expect((await fence.read('big'))?.token).toBe(big + 1n);
    await expect(fence.write('big', 999n, 'd')).rejects.toBeInstanceOf(StaleTokenError);
  });

  it('20 racing writers: the highest token stays, every write after a newer one is refused', async () => {
    const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 7) % 20) + 1));
    const outcomes = await Promise.all(
      tokens.map((t) =>
        fence.write('race', t, String(t)).then(
          () => 'ok' as const,
          (e: unknown) => (e instanceof StaleTokenError ? ('stale' as const) : e),
        ),
      ),
    );
    expect(await fence.read('race')).toEqual({ token: 20n, value: '20' });
    // Redis runs the scripts one at a time, in the order they arrived: a write succeeds exactly
    // when its token is at least every token written before it.
    let highest = 0n;
    const expected = tokens.map((t) => {
      const ok = t >= highest;
      if (ok) highest = t;
      return ok ? 'ok' : 'stale';
    });
    expect(outcomes).toEqual(expected);
  });

  it('compareAndSet: token rule first, then the expected value; a refusal writes no value', async () => {
    // Never written: only `expected: null` matches.
    expect(await cas(fence, 'c', 5n, 'x', 'a')).toEqual({ applied: false, current: null });
    expect(await fence.read('c')).toBeNull();
    expect(await cas(fence, 'c', 5n, null, 'a')).toEqual({ applied: true });
    expect(await fence.read('c')).toEqual({ token: 5n, value: 'a' });
    // Written: null no longer matches; the current write comes back for a retry.
    expect(await cas(fence, 'c', 5n, null, 'b')).toEqual({
      applied: false,
      current: { token: 5n, value: 'a' },
    });
    // Equal token, matching value: the same holder again.
    expect(await cas(fence, 'c', 5n, 'a', 'b')).toEqual({ applied: true });
    // Older token: stale, whether or not the value matches.
    expect(await cas(fence, 'c', 4n, 'b', 'old')).toEqual({ stale: [4n, 5n] });
    expect(await cas(fence, 'c', 4n, 'zzz', 'old')).toEqual({ stale: [4n, 5n] });
    expect(await fence.read('c')).toEqual({ token: 5n, value: 'b' });
    // Newer token, wrong value: refused, the value kept, and the newer token recorded.
    expect(await cas(fence, 'c', 7n, 'b', 'seven')).toEqual({ applied: true });
    expect(await cas(fence, 'c', 9n, 'a', 'nine')).toEqual({
      applied: false,
      current: { token: 9n, value: 'seven' },
    });
    expect(await fence.read('c')).toEqual({ token: 9n, value: 'seven' });
    expect(await cas(fence, 'c', 8n, 'seven', 'eight')).toEqual({ stale: [8n, 9n] });
    expect(await cas(fence, 'c', 9n, 'seven', 'nine')).toEqual({ applied: true });
    expect(await fence.read('c')).toEqual({ token: 9n, value: 'nine' });
    // An empty string is a value, not absence.
    await fence.write('empty', 1n, '');
    expect(await cas(fence, 'empty', 1n, null, 'x')).toEqual({
      applied: false,
      current: { token: 1n, value: '' },
    });
    expect(await cas(fence, 'empty', 1n, '', 'x')).toEqual({ applied: true });
  });

  it('compareAndSet compares tokens exactly beyond 2^53', async () => {
    const edge = (1n << 53n) + 1n;
    expect(await cas(fence, 'cbig', edge, null, 'a')).toEqual({ applied: true });
    expect(await cas(fence, 'cbig', edge - 1n, 'a', 'b')).toEqual({ stale: [edge - 1n, edge] });
    const big = 1n << 62n;
    expect(await cas(fence, 'cbig', big, 'a', 'c')).toEqual({ applied: true });
    expect(await cas(fence, 'cbig', 999n, 'c', 'd')).toEqual({ stale: [999n, big] });
    expect(await fence.read('cbig')).toEqual({ token: big, value: 'c' });
  });

  it('compareAndSet, 20 racing writers on one connection: every outcome is exactly the one of the arrival order', async () => {
    await fence.write('cas-race', 0n, 'v0');
    const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 7) % 20) + 1));
    // Writer i expects what writer i − 1 would have written.
    const writers = tokens.map((t, i) => ({
      token: t,
      expected: i === 0 ? 'v0' : `v${tokens[i - 1]}`,
      value: `v${t}`,
    }));
    const outcomes = await Promise.all(
      writers.map((w) => cas(fence, 'cas-race', w.token, w.expected, w.value)),
    );
    // One connection: Redis runs the scripts in the order they were sent.
    let state = { token: 0n, value: 'v0' };
    const expected = writers.map((w): CasOutcome => {
      if (w.token < state.token) return { stale: [w.token, state.token] };
      if (state.value !== w.expected) {
        // Refused on the value: the (newer or equal) token is recorded all the same.
        state = { token: w.token, value: state.value };
        return { applied: false, current: state };
      }
      state = { token: w.token, value: w.value };
      return { applied: true };
    });
    expect(outcomes).toEqual(expected);
    expect(await fence.read('cas-race')).toEqual(state);
    const count = (kind: 'applied' | 'mismatch' | 'stale') =>
      outcomes.filter((o) =>
        kind === 'stale' ? 'stale' in o : 'applied' in o && o.applied === (kind === 'applied'),
      ).length;
    // 1, 8, 15 apply; 16, 17, 18, 19, 20 see another value (and record their token); the 12
    // others are stale.
    expect([count('applied'), count('mismatch'), count('stale')]).toEqual([3, 5, 12]);
    expect(state).toEqual({ token: 20n, value: 'v15' });
  });

  it('compareAndSet, 20 writers on their own connections retrying on a changed value: no lost update, the highest token ends it', async () => {
    const clients = Array.from({ length: 20 }, () => new Redis(REDIS_PORT, '127.0.0.1'));
    try {
      const tokens = Array.from({ length: 20 }, (_, i) => BigInt(((i * 13) % 20) + 1));
      const log: { token: bigint; count: number }[] = [];
      const stale: { attempted: bigint; current: bigint }[] = [];
      let retries = 0;
      await Promise.all(
        tokens.map(async (token, i) => {
          const mine = new RedisFence(clients[i]!, prefix);
          for (;;) {
            const current = await mine.read('counter');
            const count = Number(current?.value ?? 0) + 1;
            const result = await cas(mine, 'counter', token, current?.value ?? null, `${count}`);
            if ('stale' in result) {
              stale.push({ attempted: result.stale[0], current: result.stale[1] });
              return;
            }
            if (result.applied) {
              log.push({ token, count });
              return;
            }
            retries += 1;
          }
        }),
      );
      const final = await fence.read('counter');
      // Each writer either added exactly one or was refused as stale.
      expect(log.length + stale.length).toBe(20);
      expect(final).toEqual({ token: 20n, value: String(log.length) });
      log.sort((a, b) => a.count - b.count);
      expect(log.map((l) => l.count)).toEqual(log.map((_, i) => i + 1));
      for (let i = 1; i < log.length; i++) expect(log[i]!.token).toBeGreaterThan(log[i - 1]!.token);
      expect(log.at(-1)!.token).toBe(20n);
      for (const s of stale) {
        expect(s.current).toBeGreaterThan(s.attempted);
        // A newer writer's token, recorded by its write or by its refused attempt.
        expect(tokens).toContain(s.current);
      }
      console.info(
        `redis CAS race: ${log.length} applied, ${stale.length} stale, ${retries} retries on a changed value`,
      );
    } finally {
      for (const c of clients) c.disconnect();
    }
  });

  it('compareAndSet refused on the value records a newer token: the stale holder can no longer write', async () => {
    // A holds token 5 and wrote; its lease ran out and B was granted token 6.
    expect(await cas(fence, 'b-then-a', 5n, null, 'a1')).toEqual({ applied: true });
    // B reaches the resource first, expecting a value it read elsewhere: refused on the value...
    const refused = await cas(fence, 'b-then-a', 6n, 'stale-read', 'b1');
    // ...but its token is recorded: A, paused until now, is refused whatever it writes.
    const late = await fence.compareAndSet('b-then-a', 5n, 'a1', 'a2').catch((e: unknown) => e);
    expect(late).toBeInstanceOf(StaleTokenError);
    expect([
      (late as StaleTokenError).attemptedToken,
      (late as StaleTokenError).currentToken,
    ]).toEqual([5n, 6n]);
    await expect(fence.write('b-then-a', 5n, 'a3')).rejects.toBeInstanceOf(StaleTokenError);
    expect(refused).toEqual({ applied: false, current: { token: 6n, value: 'a1' } });
    expect(await fence.read('b-then-a')).toEqual({ token: 6n, value: 'a1' });
    // B retries with the value it was shown.
    expect(await cas(fence, 'b-then-a', 6n, 'a1', 'b1')).toEqual({ applied: true });
    expect(await fence.read('b-then-a')).toEqual({ token: 6n, value: 'b1' });
  });

  it('compareAndSet refused on a never-written resource records the token, and null still matches', async () => {
    expect(await cas(fence, 'fresh', 6n, 'x', 'b')).toEqual({ applied: false, current: null });
    expect(await fence.read('fresh')).toBeNull();
    expect(await cas(fence, 'fresh', 5n, null, 'a')).toEqual({ stale: [5n, 6n] });
    expect(await cas(fence, 'fresh', 6n, null, 'b')).toEqual({ applied: true });
    expect(await fence.read('fresh')).toEqual({ token: 6n, value: 'b' });
  });

  it('wraps Redis errors in BackendError with the engine error as cause (WRONGTYPE)', async () => {
    await client.set(`${prefix}:not-a-hash`, 'plain string');
    const calls: [string, () => Promise<unknown>][] = [
      ['fenced write', () => fence.write('not-a-hash', 1n, 'x')],
      ['fenced compare-and-set', () => fence.compareAndSet('not-a-hash', 1n, null, 'x')],
      ['fenced read', () => fence.read('not-a-hash')],
    ];
    for (const [operation, call] of calls) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect((error as BackendError).backend).toBe('redis');
      expect((error as BackendError).operation).toBe(`${operation} of "not-a-hash"`);
      const cause = (error as BackendError).cause as Error;
      expect(cause.name).toBe('ReplyError');
      expect(cause.message).toMatch(/WRONGTYPE/);
      expect((error as BackendError).message).toMatch(/WRONGTYPE/);
    }
    expect(await client.get(`${prefix}:not-a-hash`)).toBe('plain string');
  });

  it('rejects bad input before any Redis call', async () => {
    await expect(fence.write('', 1n, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fence.write('r', -1n, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fence.write('r', 1 as never, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => new RedisFence({} as never)).toThrow(InvalidArgumentError);
    await expect(fence.compareAndSet('', 1n, null, 'x')).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(fence.compareAndSet('r', -1n, null, 'x')).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(fence.compareAndSet('r', 1n, 5 as never, 'x')).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(fence.compareAndSet('r', 1n, undefined as never, 'x')).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    await expect(fence.compareAndSet('r', 1n, null, 5 as never)).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(await fence.read('r')).toEqual({ token: 6n, value: 'six' });
  });
});
