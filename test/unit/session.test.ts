/**
 * `openSession` on a store without sessions, and its input checks: typed errors before any
 * engine call. (Sessions themselves are tested on etcd, the engine that has them.)
 */
import { describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError } from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

describe('openSession', () => {
  it('rejects on a store without sessions, naming the store, without an engine call', async () => {
    const backend = new MemoryBackend();
    const locker = createLocker(backend);
    const error = await locker.openSession().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(String((error as Error).message)).toMatch(/store.*sessions.*memory/s);
    expect(Object.values(backend.calls).reduce((a, b) => a + b, 0)).toBe(0);
    await locker.close();
  });

  it('rejects a bad ttlMs and unknown options first', async () => {
    const locker = createLocker(new MemoryBackend());
    await expect(locker.openSession({ ttlMs: 0 })).rejects.toThrow(InvalidArgumentError);
    await expect(locker.openSession({ ttlMs: 2 })).rejects.toThrow(
      'invalid ttlMs: expected a number of milliseconds from 100 to',
    );
    await expect(locker.openSession({ ttlMs: 2 })).rejects.toThrow('received 2');
    await expect(locker.openSession('5s' as never)).rejects.toThrow(InvalidArgumentError);
    await expect(locker.openSession({ ttlMs: 5000, x: 1 } as never)).rejects.toThrow(/options\.x/);
    await locker.close();
    await expect(locker.openSession()).rejects.toThrow(InvalidArgumentError);
  });
});
