/**
 * The Redis fencing guard on the standalone Redis: an older token is refused with both tokens,
 * an equal token is accepted (the same holder writing again), a newer one advances; 20 writers
 * racing with interleaved tokens leave the highest token, and every older write that came after
 * a newer one is refused. Tokens are compared exactly, also beyond 2^53.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { RedisFence } from '../../../src/fencing/index.js';
import { InvalidArgumentError, StaleTokenError } from '../../../src/index.js';
import { REDIS_PORT } from '../../helpers/engines.js';

const prefix = `fencelock-it-fence-${randomBytes(3).toString('hex')}`;
const client = new Redis(REDIS_PORT, '127.0.0.1');
const fence = new RedisFence(client, prefix);

afterAll(async () => {
  const keys = await client.keys(`${prefix}:*`);
  if (keys.length > 0) await client.del(...keys);
  client.disconnect();
});

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

  it('rejects bad input before any Redis call', async () => {
    await expect(fence.write('', 1n, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fence.write('r', -1n, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(fence.write('r', 1 as never, 'x')).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(() => new RedisFence({} as never)).toThrow(InvalidArgumentError);
  });
});
