import { describe, expect, it } from 'vitest';
import {
  BackendError,
  createLocker,
  FencelockError,
  InvalidArgumentError,
  LockLostError,
  LockTimeoutError,
  NotLockOwnerError,
  QuorumError,
  StaleTokenError,
} from '../../packages/fencelock/src/index.js';

describe('errors', () => {
  it('carry a name, a stable code, context and a domain-prefixed message', () => {
    const cause = new Error('ECONNREFUSED');
    const cases: [FencelockError, string, string][] = [
      [
        new InvalidArgumentError('ttlMs', 'a number', -1),
        'InvalidArgumentError',
        'ERR_INVALID_ARGUMENT',
      ],
      [new LockTimeoutError('k', 12.3), 'LockTimeoutError', 'ERR_LOCK_TIMEOUT'],
      [new LockLostError('k', 7n, 'expired', { cause }), 'LockLostError', 'ERR_LOCK_LOST'],
      [new NotLockOwnerError('k', 'extend', 'released'), 'NotLockOwnerError', 'ERR_NOT_LOCK_OWNER'],
      [
        new QuorumError('k', 'acquire', [{ node: 'a', outcome: 'error', error: cause }]),
        'QuorumError',
        'ERR_QUORUM',
      ],
      [new BackendError('redis', 'renew', cause), 'BackendError', 'ERR_BACKEND'],
      [new StaleTokenError('stock', 3n, 5n), 'StaleTokenError', 'ERR_STALE_TOKEN'],
    ];
    for (const [error, name, code] of cases) {
      expect(error).toBeInstanceOf(FencelockError);
      expect(error).toBeInstanceOf(Error);
      expect(error.name).toBe(name);
      expect(error.code).toBe(code);
      expect(error.message.startsWith('fencelock: ')).toBe(true);
    }
    expect(new BackendError('redis', 'renew', cause).cause).toBe(cause);
    expect(new LockLostError('k', 7n, 'expired').message).toContain('"k"');
    expect(new StaleTokenError('stock', 3n, 5n).message).toContain('3 is older than 5');
  });
});

describe('a bad store URL', () => {
  // Found by trying to break it: the library's own errors echoed the URL, password included.
  it.each([
    'postgres://app:S3cretPw@db:99999/app',
    'postgres://app:S3cretPw@db/app#frag',
    `postgres://app@pgb:6432/app?pooler=transaction&listenUrl=${encodeURIComponent('postgres://app:S3cretPw@db:99999/app')}`,
    'redis://:S3cretPw@cache:99999',
    'redis://u:S3cretPw@cache/x',
    'etcd://root:S3cretPw@e1:2379/a/b',
    'postgres:app:S3cretPw@db/app?host=/tmp',
    'redis:default:S3cretPw@127.0.0.1:6390',
    'etcd://root:S3c"retPw@127.0.0.1:23791,127.0.0.1:99999',
  ])('%s is refused without its password in the error', (store) => {
    let error: unknown;
    try {
      createLocker(store);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).not.toMatch(/retPw/);
    expect(String((error as InvalidArgumentError).received)).not.toMatch(/retPw/);
  });
});
