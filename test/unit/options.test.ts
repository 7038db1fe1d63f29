import { describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError } from '../../packages/fencelock/src/index.js';
import {
  DEFAULT_LOCK_OPTIONS,
  resolveLockOptions,
  validateKey,
  validateTtl,
} from '../../packages/fencelock/src/options.js';
import { MemoryBackend } from './memory-backend.js';

function invalid(fn: () => unknown, argument: string): InvalidArgumentError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    const e = error as InvalidArgumentError;
    expect(e.code).toBe('ERR_INVALID_ARGUMENT');
    expect(e.argument).toBe(argument);
    return e;
  }
  throw new Error('expected an InvalidArgumentError');
}

describe('validation', () => {
  it.each([0, -1, 99, Number.NaN, Number.POSITIVE_INFINITY, '1000', 2 ** 53, null, {}])(
    'rejects ttlMs %s naming the argument and the range',
    (ttl) => {
      const e = invalid(() => validateTtl(ttl), 'ttlMs');
      expect(e.message).toContain('ttlMs');
      expect(e.message).toContain('from 100 to 2147483647');
    },
  );

  it('rounds a fractional ttlMs up to the next millisecond', () => {
    expect(validateTtl(123.45)).toBe(124);
    expect(validateTtl(100)).toBe(100);
  });

  it.each(['', 'x'.repeat(1025), 42, undefined])('rejects key %s', (key) => {
    invalid(() => validateKey(key), 'key');
  });

  it('rejects keys with NUL, which PostgreSQL text cannot hold', () => {
    invalid(() => validateKey('a\u0000b'), 'key');
    expect(validateKey('a\u0001b')).toBe('a\u0001b');
  });

  it('rejects keys with lone surrogates, which engines would alias to U+FFFD', () => {
    invalid(() => validateKey('job:\uD800'), 'key');
    invalid(() => validateKey('job:\uDFFF'), 'key');
    expect(validateKey('job:\uD83D\uDE00')).toBe('job:😀');
  });

  it('accepts a 1024-byte key and counts bytes, not characters', () => {
    expect(validateKey('k'.repeat(1024))).toHaveLength(1024);
    invalid(() => validateKey('é'.repeat(513)), 'key');
  });

  it('rejects unknown and mistyped options', () => {
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { ttl: 5 }), 'options.ttl');
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { waitMs: -1 }), 'waitMs');
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { autoRenew: 'yes' }), 'autoRenew');
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { maxHoldMs: 0 }), 'maxHoldMs');
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { signal: {} }), 'signal');
    invalid(
      () =>
        resolveLockOptions(DEFAULT_LOCK_OPTIONS, {
          retry: { initialDelayMs: 100, maxDelayMs: 10 },
        }),
      'retry.maxDelayMs',
    );
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, 'fast'), 'options');
  });

  it('rejects unknown retry keys and lets a large initialDelayMs raise the default maximum', () => {
    invalid(() => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { retry: { delay: 5 } }), 'retry.delay');
    const o = resolveLockOptions(DEFAULT_LOCK_OPTIONS, { retry: { initialDelayMs: 1000 } });
    expect(o.retry).toEqual({ initialDelayMs: 1000, maxDelayMs: 1000, factor: 2 });
  });

  it('rejects a default ttlMs within the drift allowance when the locker is created', () => {
    invalid(() => createLocker(new MemoryBackend(), { ttlMs: 2 }), 'ttlMs');
    invalid(() => createLocker(new MemoryBackend(), { ttlMs: 4, driftFactor: 0.5 }), 'ttlMs');
  });

  it('keeps objects out of InvalidArgumentError.received', () => {
    const e = invalid(
      () => resolveLockOptions(DEFAULT_LOCK_OPTIONS, { signal: { huge: 'x' } }),
      'signal',
    );
    expect(e.received).toBe('an object');
  });

  it('rejects malformed etcd URLs with InvalidArgumentError, never a URIError', () => {
    invalid(() => createLocker('etcd://h:1/%E0%A4%A'), 'store');
    invalid(() => createLocker('etcd://us%ZZer:pw@h:1'), 'store');
    // Namespaces must not nest inside each other.
    invalid(() => createLocker('etcd://h:1/a/locks/b'), 'store');
    invalid(() => createLocker('etcd://h:1,h:99999'), 'store');
    invalid(() => createLocker('etcd://h:1?bogus=1'), 'store parameter bogus');
    expect(() => createLocker('etcd://h:1,h2:2/ns').close()).not.toThrow();
  });

  it('rejects a sqlite path with "#" and reports the text of a bad parameter', () => {
    invalid(() => createLocker('sqlite:./hash#1.db'), 'store');
    const e = invalid(
      () => createLocker('sqlite:x.db?busyTimeoutMs=abc'),
      'store parameter busyTimeoutMs',
    );
    expect(e.received).toBe('abc');
  });

  it('keeps defaults where an option is not given and accepts waitMs Infinity', () => {
    const o = resolveLockOptions(DEFAULT_LOCK_OPTIONS, {
      ttlMs: 1000,
      waitMs: Number.POSITIVE_INFINITY,
    });
    expect(o.ttlMs).toBe(1000);
    expect(o.autoRenew).toBe(true);
    expect(o.reentrant).toBe(false);
    expect(o.maxHoldMs).toBeUndefined();
    expect(o.waitMs).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('createLocker input', () => {
  it.each([
    'not a url',
    'ftp://host',
    'redis://',
    'redis://h:99999',
    'redis://h:1/x',
    'redis://h?bogus=1',
  ])('rejects store %s before any connection', (url) => {
    invalid(() => createLocker(url), `store${url.includes('bogus') ? ' parameter bogus' : ''}`);
  });

  it('rejects a non-backend object and bad locker options', () => {
    invalid(() => createLocker({} as never), 'store');
    invalid(() => createLocker(new MemoryBackend(), { driftFactor: 2 }), 'driftFactor');
    invalid(() => createLocker(new MemoryBackend(), { ttlMs: -5 }), 'ttlMs');
  });

  it('rejects bad lock input with no backend call', async () => {
    const backend = new MemoryBackend();
    const locker = createLocker(backend);
    invalid(() => locker.lock(''), 'key');
    invalid(() => locker.lock('k', { ttlMs: Number.NaN }), 'ttlMs');
    await expect(locker.acquire('k', { ttlMs: 0 })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(locker.withLock('k', 'nope' as never)).rejects.toBeInstanceOf(
      InvalidArgumentError,
    );
    expect(backend.totalCalls).toBe(0);
    await locker.close();
  });
});
