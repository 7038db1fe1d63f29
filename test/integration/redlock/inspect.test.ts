/**
 * Redlock `inspect` grants nothing, so it waits longer than a vote's per-node timeout: a fresh
 * locker's first inspect, which also connects to every node, failed for want of a quorum on a
 * loaded machine (found by a new user running the flash-sale demo on Redlock). Its last token is
 * the highest counter a majority of the nodes reached, not one node's outlier.
 */
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS, REDLOCK_PORT_BASE } from '../../helpers/engines.js';
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

describe('Redlock inspect, last token', () => {
  it('is the highest counter a majority reached, above a minority that counted further', async () => {
    const prefix = `fencelock-it-inspect-${randomUUID().slice(0, 8)}`;
    const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
    const locker = createLocker(backend);
    const admins = REDLOCK_NODE_URLS.map((url) => new Redis(url));
    try {
      const lease = await locker.acquire('last', { ttlMs: 10_000 });
      expect(await lease.release()).toBe('released');
      // Every node at the token (a node that granted after the vote was decided may have read a
      // later millisecond; that is what is emulated next, on two of them).
      const fence = backend.keysOf('last').fence;
      await Promise.all(admins.map((a) => a.set(fence, String(lease.fencingToken), 'PX', 10_000)));
      // Two nodes (a minority) counted past the token.
      const further = lease.fencingToken + 5_000n;
      await Promise.all(admins.slice(3).map((a) => a.set(fence, String(further), 'PX', 10_000)));
      expect((await locker.inspect('last')).lastFencingToken).toBe(lease.fencingToken);
      // A third one (a majority now): the majority's counter is that far.
      await admins[2]!.set(fence, String(further), 'PX', 10_000);
      expect((await locker.inspect('last')).lastFencingToken).toBe(further);
      const next = await locker.acquire('last', { ttlMs: 10_000 });
      expect(next.fencingToken).toBeGreaterThan(further);
      expect(await next.release()).toBe('released');
    } finally {
      await locker.close();
      for (const admin of admins) admin.disconnect();
    }
  });
});
