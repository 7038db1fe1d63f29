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
import { afterAll, describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  CHANNELS,
  createLocker,
  type Lease,
  type Locker,
  LockLostError,
  type LostEvent,
  type RenewEvent,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_CLIENT_PORT_BASE, ETCD_ENDPOINTS } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { etcdUrl, sleep, useNamespace } from './support.js';

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

describe('etcd: many leases behind a slow network', () => {
  const proxies: TcpProxy[] = [];
  afterAll(async () => {
    await Promise.all(proxies.map((proxy) => proxy.close()));
  });

  /**
   * The renewals of one turn used to go to etcd one transaction after another: on a loaded
   * machine a turn of 1,000-2,000 renewals (8-16 transactions) took 6-12 s, and the leases at its
   * tail got their answer after their validity had run out, while the locker's etcd lease and
   * every key were still there (the bench's 10,000-lease hold lost them as `expired`). Answers
   * delayed by 400 ms stand in for that load: 2,048 renewals in one turn are 16 transactions, 6.4 s
   * one after another, more than a 6 s lease has left. Now a turn's transactions are in flight
   * together.
   */
  it('keeps every lease when a turn of 2,048 renewals is answered 400 ms late', async () => {
    const count = 2048;
    const ttlMs = 6000;
    const delayMs = 400;
    for (let n = 1; n <= 3; n++) {
      proxies.push(await startTcpProxy({ targetPort: ETCD_CLIENT_PORT_BASE + n }));
    }
    const hosts = proxies.map((proxy) => `127.0.0.1:${proxy.port}`).join(',');
    const namespace = `${ns.namespace}-slow`;
    const locker: Locker = createLocker(etcdUrl(namespace, hosts), { ttlMs });
    const lost: string[] = [];
    const onLost = (message: unknown) => {
      const event = message as LostEvent;
      if (event.key.startsWith('slow:')) lost.push(`${event.key}: ${event.reason}`);
    };
    subscribe(CHANNELS.lost, onLost);
    try {
      const leases: Lease[] = [];
      for (let i = 0; i < count; i += 64) {
        leases.push(
          ...(await Promise.all(
            Array.from({ length: 64 }, (_, j) => locker.acquire(`slow:${i + j}`)),
          )),
        );
      }
      for (const proxy of proxies) proxy.delayReplies(delayMs);
      // Every lease renewed in the same turn: one batch of renewals, 16 transactions.
      const startedAt = performance.now();
      const extended = await Promise.allSettled(leases.map((lease) => lease.extend(ttlMs)));
      const tookMs = performance.now() - startedAt;
      for (const proxy of proxies) await proxy.restore();

      expect(extended.filter((outcome) => outcome.status === 'rejected')).toHaveLength(0);
      expect(lost.slice(0, 5)).toEqual([]);
      expect(leases.filter((lease) => !lease.isHeld)).toHaveLength(0);
      // Inside the leases' validity (16 transactions one after another take 6.4 s or more).
      expect(tookMs).toBeLessThan(ttlMs);
      // The engine still holds every key, all in the locker's one etcd lease, still alive.
      const kvs = (await ns.admin.getAll().prefix(`${namespace}/locks/`).exec()).kvs;
      expect(kvs).toHaveLength(count);
      const holding = new Set(kvs.map((kv) => kv.lease));
      expect(holding.size).toBe(1);
      const [leaseId] = [...holding];
      const { TTL } = await ns.admin.leaseClient.leaseTimeToLive({ ID: leaseId! });
      expect(Number(TTL)).toBeGreaterThan(0);
      await Promise.all(leases.map((lease) => lease.release()));
    } finally {
      unsubscribe(CHANNELS.lost, onLost);
      await locker.close();
      await ns.admin.delete().prefix(`${namespace}/`);
    }
  }, 120_000);
});
