/**
 * `locker.list()` in the core (core/listing.ts): options checked at the call, before the store is
 * asked anything; pages fetched one at a time as the caller iterates, short and empty pages
 * followed to the end, `limit` and `pageSize`, the caller's signal, a store that cannot list.
 * The in-memory backend built from the contract walks `pageSize` keys per page.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type ListedLock,
  type Locker,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const lockers: Locker[] = [];
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

/** A locker on a memory backend that lists, holding `held` and `others` (outside `jobs:`). */
async function lockerHolding(held: string[], others: string[] = []) {
  const backend = new MemoryBackend();
  backend.capabilities = Object.freeze({ ...backend.capabilities, list: true });
  const locker = createLocker(backend);
  lockers.push(locker);
  for (const key of [...held, ...others]) await locker.acquire(key, { ttlMs: 60_000 });
  return { locker, backend };
}

async function keysOf(iterable: AsyncIterable<ListedLock>): Promise<string[]> {
  const keys: string[] = [];
  for await (const entry of iterable) keys.push(entry.key);
  return keys;
}

describe('locker.list()', () => {
  it('follows short and empty pages to the end, reading one page per step', async () => {
    // Walking 2 keys a page: the `a…` keys come first and fill pages with nothing under `jobs:`.
    const held = ['jobs:1', 'jobs:2', 'jobs:3'];
    const { locker, backend } = await lockerHolding(held, ['a1', 'a2', 'a3', 'a4', 'z']);
    const iterator = locker.list({ prefix: 'jobs:', pageSize: 2 })[Symbol.asyncIterator]();
    expect(backend.calls.list).toBeUndefined();
    const first = await iterator.next();
    expect(first.value?.key).toBe('jobs:1');
    // Two empty pages (a1 a2, a3 a4), then jobs:1 jobs:2.
    expect(backend.calls.list).toBe(3);
    expect(await keysOf({ [Symbol.asyncIterator]: () => iterator })).toEqual(['jobs:2', 'jobs:3']);
    expect(await keysOf(locker.list({ prefix: 'jobs:', pageSize: 1_000 }))).toEqual(held);
    expect(await keysOf(locker.list())).toEqual(['a1', 'a2', 'a3', 'a4', ...held, 'z']);
  });

  it('stops at limit, asking for no more than it still needs', async () => {
    const { locker, backend } = await lockerHolding(['k1', 'k2', 'k3', 'k4', 'k5']);
    expect(await keysOf(locker.list({ limit: 3, pageSize: 2 }))).toEqual(['k1', 'k2', 'k3']);
    // Pages of 2, then of 1 (the one entry still wanted).
    expect(backend.calls.list).toBe(2);
  });

  it("ends with the signal's reason once it aborts, before or between entries", async () => {
    const { locker } = await lockerHolding(['k1', 'k2', 'k3']);
    const stop = new Error('stop');
    await expect(keysOf(locker.list({ signal: AbortSignal.abort(stop) }))).rejects.toBe(stop);
    const controller = new AbortController();
    const seen: string[] = [];
    const run = async () => {
      for await (const entry of locker.list({ signal: controller.signal, pageSize: 10 })) {
        seen.push(entry.key);
        controller.abort(stop);
      }
    };
    await expect(run()).rejects.toBe(stop);
    expect(seen).toEqual(['k1']);
  });

  it('refuses bad options at the call, before the store is asked anything', async () => {
    const { locker, backend } = await lockerHolding([]);
    const cases: [unknown, string][] = [
      ['jobs:', 'options'],
      [{ prefix: 7 }, 'prefix'],
      [{ prefix: 'a\u0000' }, 'prefix'],
      [{ prefix: 'x'.repeat(1025) }, 'prefix'],
      [{ limit: 0 }, 'limit'],
      [{ limit: Number.POSITIVE_INFINITY }, 'limit'],
      [{ pageSize: 1_001 }, 'pageSize'],
      [{ pageSize: 2.5 }, 'pageSize'],
      [{ signal: {} }, 'signal'],
      [{ cursor: 'l:a' }, 'options.cursor'],
    ];
    for (const [options, argument] of cases) {
      let error: unknown;
      try {
        locker.list(options as never);
      } catch (e) {
        error = e;
      }
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, argument).toBe(argument);
    }
    expect(backend.calls.list).toBeUndefined();
  });

  it('a store that cannot list is refused at the first iteration, naming the store', async () => {
    const backend = new MemoryBackend();
    const locker = createLocker(backend);
    lockers.push(locker);
    const iterable = locker.list();
    const error = await keysOf(iterable).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'store', received: 'memory' });
    expect(backend.calls.list).toBeUndefined();
  });

  it('a closed locker refuses list() at once', async () => {
    const { locker } = await lockerHolding([]);
    await locker.close();
    expect(() => locker.list()).toThrow(InvalidArgumentError);
  });

  it('listPage hands out one page and its cursor, to resume with', async () => {
    const { locker, backend } = await lockerHolding(['k1', 'k2', 'k3']);
    const first = await locker.listPage({ pageSize: 2 });
    expect(first.entries.map((e) => e.key)).toEqual(['k1', 'k2']);
    expect(first.cursor).toBe('k2');
    const second = await locker.listPage({ pageSize: 2, cursor: first.cursor });
    expect(second.entries.map((e) => e.key)).toEqual(['k3']);
    expect(second.cursor).toBeNull();
    expect(backend.calls.list).toBe(2);
    for (const [options, argument] of [
      [{ cursor: '' }, 'cursor'],
      [{ cursor: 42 }, 'cursor'],
      [{ cursor: 'x'.repeat(8 * 1024 + 1) }, 'cursor'],
      [{ limit: 3 }, 'options.limit'],
      [{ pageSize: 0 }, 'pageSize'],
    ] as const) {
      const error = await locker.listPage(options as never).catch((e: unknown) => e);
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, argument).toBe(argument);
    }
    expect(backend.calls.list).toBe(2);
  });
});
