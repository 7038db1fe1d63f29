/**
 * Redlock renewal batching with mixed TTLs: each lease is voted on with its own per-node timeout
 * (a tenth of its TTL at most). Before, a batch used the shortest TTL's timeout for every lease,
 * so a short lease renewed in the same turn made a long one fail its renewal on slow nodes.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import type { LeaseRef } from '../../../packages/fencelock/src/core/backend.js';
import { REDLOCK_NODE_URLS, REDLOCK_PORT_BASE } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const prefix = `fencelock-it-queue-${randomBytes(4).toString('hex')}`;
const owner = (n: number) => randomBytes(15).toString('hex') + String(n).padStart(2, '0');
const proxies: TcpProxy[] = [];

afterAll(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  for (const url of REDLOCK_NODE_URLS) {
    const admin = new Redis(url);
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
});

describe('Redlock renewal batching, mixed TTLs', () => {
  it('a long-TTL lease renewed in the same turn as a short-TTL one is judged by its own timeout', async () => {
    for (let n = 1; n <= 5; n++)
      proxies.push(await startTcpProxy({ targetPort: REDLOCK_PORT_BASE + n }));
    const backend = createRedlockBackend({
      nodes: proxies.map((p) => p.url),
      prefix,
      nodeTimeoutMs: 500,
    });
    const leases: LeaseRef[] = [];
    for (let n = 0; n < 2; n++) {
      const request = {
        key: `k${n}`,
        owner: owner(n),
        ttlMs: 30_000,
        mode: 'write' as const,
        autoRenew: false,
      };
      const result = await backend.attempt(request);
      if (!result.granted) throw new Error('not granted');
      leases.push({ key: request.key, owner: request.owner, fencingToken: result.token });
    }
    // Every node now answers 40 ms late: well within the long lease's own per-node timeout
    // (min(500, 30000/10) = 500 ms), beyond the short one's (60/10 = 6 ms).
    for (const p of proxies) p.delayReplies(40);
    const alone = await backend.renew(leases[0]!, 30_000);
    expect(alone).toEqual({ ok: true, ttlMs: 30_000 });
    // Same lease, same TTL, but in one turn with a renewal asking for 60 ms.
    const [long, short] = await Promise.allSettled([
      backend.renew(leases[0]!, 30_000),
      backend.renew(leases[1]!, 60),
    ]);
    for (const p of proxies) await p.restore();
    await backend.close();
    expect(short.status).toBe('rejected'); // fine: 60 ms cannot be voted on at 40 ms latency
    expect(long).toEqual({ status: 'fulfilled', value: { ok: true, ttlMs: 30_000 } });
  });
});
