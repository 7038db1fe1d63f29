/**
 * One process holding many leases on etcd. Every grant lives in the locker's shared etcd lease,
 * kept alive by one keepalive; a renewal only confirms that the lease's key still has its create
 * revision. Those confirmations used to be one transaction per lease: 10,000 leases of 30 s made
 * 1,000 requests a second, more than a loaded machine served, and the bench's 10,000-lease hold
 * lost 8,954 of them (renewals unanswered past the leases' validity). Now the renewals of one
 * turn are confirmed together, one read per key in one transaction of at most 128.
 *
 * Counted at the engine: etcd's own `grpc_server_started_total` of KV Txn, summed over the
 * members (test files run one at a time, so no other test's requests are counted).
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  CHANNELS,
  type Lease,
  LockLostError,
  type RenewEvent,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS } from '../../helpers/engines.js';
import { sleep, useNamespace } from './support.js';

const ns = useNamespace('many');
const LEASES = 300;
const TTL_MS = 3000;

/** Txn requests the members have started, summed (etcd's Prometheus metrics). */
async function txnRequests(): Promise<number> {
  const counts = await Promise.all(
    ETCD_ENDPOINTS.map(async (endpoint) => {
      const text = await (await fetch(`${endpoint}/metrics`)).text();
      const line = text
        .split('\n')
        .find(
          (l) =>
            l.startsWith('grpc_server_started_total{') &&
            l.includes('grpc_method="Txn"') &&
            l.includes('grpc_service="etcdserverpb.KV"'),
        );
      if (line === undefined) throw new Error(`no Txn counter at ${endpoint}/metrics`);
      return Number(line.slice(line.lastIndexOf(' ') + 1));
    }),
  );
  return counts.reduce((a, b) => a + b, 0);
}

describe('etcd: many leases in one process', () => {
  it('renews them in a few transactions per round, and a key deleted by hand still loses its lease alone', async () => {
    const locker = ns.locker({ ttlMs: TTL_MS });
    const leases: Lease[] = [];
    for (let i = 0; i < LEASES; i += 50) {
      leases.push(
        ...(await Promise.all(
          Array.from({ length: Math.min(50, LEASES - i) }, (_, j) =>
            locker.acquire(`many:${i + j}`),
          ),
        )),
      );
    }
    let renewed = 0;
    const onRenew = (message: unknown) => {
      const event = message as RenewEvent;
      if (event.ok && event.key.startsWith('many:')) renewed += 1;
    };
    subscribe(CHANNELS.renew, onRenew);
    try {
      const before = await txnRequests();
      // Three renew intervals (TTL / 3 each): every lease renews about three times.
      await sleep(TTL_MS);
      const txns = (await txnRequests()) - before;
      expect(leases.every((lease) => lease.isHeld)).toBe(true);
      expect(renewed).toBeGreaterThanOrEqual(2 * LEASES);
      // One transaction per renewal before; now at most 128 renewals share one (3 per round of
      // 300, several rounds where the leases fall due apart).
      expect(txns).toBeLessThan(renewed / 10);

      // A key deleted behind the locker's back: that lease alone is lost at its next renewal.
      const victim = leases[7]!;
      const dir = ((await locker.backend()) as EtcdBackend).dirOf(victim.key);
      expect(await ns.admin.delete().prefix(dir)).toBeDefined();
      const deadline = performance.now() + TTL_MS;
      while (!victim.signal.aborted && performance.now() < deadline) await sleep(20);
      expect(victim.signal.reason).toBeInstanceOf(LockLostError);
      expect((victim.signal.reason as LockLostError).reason).toBe('not-held');
      expect(leases.filter((lease) => !lease.isHeld)).toEqual([victim]);
    } finally {
      unsubscribe(CHANNELS.renew, onRenew);
    }
    await Promise.all(leases.map((lease) => lease.release()));
  });
});
