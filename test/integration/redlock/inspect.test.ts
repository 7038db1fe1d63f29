/**
 * Redlock `inspect` grants nothing, so it waits longer than a vote's per-node timeout: a fresh
 * locker's first inspect, which also connects to every node, failed for want of a quorum on a
 * loaded machine (found by a new user running the flash-sale demo on Redlock).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_PORT_BASE } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const proxies: TcpProxy[] = [];

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
});

describe('Redlock inspect', () => {
  it('answers when every node replies slower than nodeTimeoutMs', async () => {
    for (let n = 1; n <= 5; n++) {
      const proxy = await startTcpProxy({ targetPort: REDLOCK_PORT_BASE + n });
      proxy.delayReplies(400);
      proxies.push(proxy);
    }
    const backend = createRedlockBackend({
      nodes: proxies.map((p) => p.url),
      prefix: `fencelock-it-inspect-${randomUUID().slice(0, 8)}`,
      nodeTimeoutMs: 200,
    });
    const locker = createLocker(backend);
    const info = await locker.inspect('cold');
    expect(info).toEqual({ key: 'cold', holder: null, lastFencingToken: 0n });
    await locker.close();
  });
});
