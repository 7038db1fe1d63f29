/**
 * `close()` while a session is still connecting to a server that never answers returns at once:
 * it stops the connection attempts instead of waiting for `connectTimeoutMs` to run out, and the
 * operation waiting on that session rejects with it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { type SilentServer, startSilentServer } from '../../helpers/silent-server.js';

let silent: SilentServer;
beforeAll(async () => {
  silent = await startSilentServer();
});
afterAll(() => silent.close());

describe('zookeeper: close() while connecting', () => {
  it('returns within 300 ms with connectTimeoutMs at 10 s, and the pending inspect rejects', async () => {
    const locker = createLocker(`zk://127.0.0.1:${silent.port}?connectTimeoutMs=10000`);
    await locker.backend();
    const pending = locker.inspect('k').then(
      () => 'resolved',
      () => 'rejected',
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(silent.accepted).toBeGreaterThan(0);
    const startedAt = performance.now();
    await locker.close();
    expect(performance.now() - startedAt).toBeLessThan(300);
    const settled = await Promise.race([
      pending,
      new Promise((resolve) => setTimeout(() => resolve('pending'), 300)),
    ]);
    expect(settled).toBe('rejected');
  });
});
