/**
 * Failure scenarios (as in test/integration/handed/) on etcd:
 * - T04: a holder cut off from the cluster past its lease must learn it lost the lock; the
 *   waiter gets it within the lease TTL + 3 s; the stale holder's late release touches nothing;
 *   no key and no library lease is left behind.
 * - T07 (etcd part): lease TTLs are whole seconds on etcd, rounded up, with the server's minimum
 *   applied, and the lease reports the TTL the server granted.
 */
import type { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import { EtcdSession } from '../../../packages/fencelock/src/backends/etcd/session.js';
import {
  createLocker,
  InvalidArgumentError,
  type Lease,
  type Locker,
  LockLostError,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_CLIENT_PORT_BASE } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import {
  adminClient,
  contenders,
  etcdUrl,
  sleep,
  uniqueNamespace,
  waitForCount,
} from './support.js';

const namespace = uniqueNamespace('handed');
let admin: Etcd3;
const lockers: Locker[] = [];
/** Lease IDs (decimal) of every session fencelock opened in this file. */
const libraryLeases: string[] = [];

beforeAll(() => {
  admin = adminClient();
  // Record the etcd lease of every session the backends open (shared or single-use).
  for (const method of ['openShared', 'openSingleUse'] as const) {
    const original = EtcdSession[method].bind(EtcdSession);
    vi.spyOn(EtcdSession, method).mockImplementation(async (...args) => {
      const session = await original(...args);
      libraryLeases.push(session.leaseId);
      return session;
    });
  }
});

afterEach(async () => {
  await Promise.allSettled(lockers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  vi.restoreAllMocks();
  await admin.delete().prefix(`${namespace}/`);
  admin.close();
});

function newLocker(store: string, ttlMs: number): Locker {
  const locker = createLocker(store, { ttlMs });
  lockers.push(locker);
  return locker;
}

async function leaseIds(): Promise<Set<string>> {
  const { leases } = await admin.leaseClient.leaseLeases();
  return new Set(leases.map((l) => String(l.ID)));
}

describe('T04: a holder cut off past its lease learns it lost the lock (etcd)', () => {
  let proxy: TcpProxy | undefined;

  afterEach(async () => {
    await proxy?.close();
    proxy = undefined;
  });

  it('B gets k within TTL + 3 s of the cut, after A knows; A’s late release touches nothing', async () => {
    const TTL_MS = 4000;
    const k = 't04:k';
    const baseline = await leaseIds();
    const before = libraryLeases.length;
    // A reaches the cluster only through the proxy, in front of one member.
    proxy = await startTcpProxy({ targetPort: ETCD_CLIENT_PORT_BASE + 1 });
    const lockerA = newLocker(etcdUrl(namespace, `127.0.0.1:${proxy.port}`), TTL_MS);
    const lockerB = newLocker(etcdUrl(namespace), 10_000);
    const dir = ((await lockerB.backend()) as EtcdBackend).dirOf(k);

    const a = await lockerA.acquire(k);
    expect(a.ttlMs).toBe(TTL_MS);
    let aLostAt: number | undefined;
    a.signal.addEventListener('abort', () => {
      aLostAt = performance.now();
    });
    let bGrantedAt: number | undefined;
    let aAbortedAtBGrant: boolean | undefined;
    const waiting = lockerB.acquire(k, { waitMs: 30_000 }).then((lease: Lease) => {
      bGrantedAt = performance.now();
      aAbortedAtBGrant = a.signal.aborted;
      return lease;
    });
    await waitForCount(admin, dir, 2);

    const cutAt = performance.now();
    proxy.cut();
    const b = await waiting;
    const bWaitMs = bGrantedAt! - cutAt;
    console.info(
      `etcd T04: A lost its lease ${Math.round(aLostAt! - cutAt)} ms after the cut; ` +
        `B granted ${Math.round(bWaitMs)} ms after the cut (lease TTL ${TTL_MS} ms)`,
    );
    expect(bWaitMs).toBeLessThanOrEqual(TTL_MS + 3000);
    // A's signal aborted (with LockLostError) no later than B's grant.
    expect(aAbortedAtBGrant).toBe(true);
    expect(aLostAt).toBeLessThanOrEqual(bGrantedAt!);
    expect(a.signal.reason).toBeInstanceOf(LockLostError);
    expect(a.isHeld).toBe(false);
    expect(b.fencingToken).toBeGreaterThan(a.fencingToken);

    // The cut lasts 10 s; then A, reconnected, releases late.
    await sleep(10_000 - (performance.now() - cutAt));
    await proxy.restore();
    expect(['not-held', 'not-owner']).toContain(await a.release());
    // B's key is untouched: still the only contender, with B's token, and B still holds.
    const guardB = ((await lockerB.backend()) as EtcdBackend).ownerCompare(b)!;
    const left = await contenders(admin, dir);
    expect(left.map((c) => [c.key, c.createRevision])).toEqual([[guardB.key, b.fencingToken]]);
    expect(b.isHeld).toBe(true);

    expect(await b.release()).toBe('released');
    expect(await admin.getAll().prefix(dir).count()).toBe(0);

    // Both lockers closed: every lease fencelock opened here is gone from the cluster.
    const mine = libraryLeases.slice(before);
    expect(mine.length).toBeGreaterThanOrEqual(2);
    await Promise.all([lockerA.close(), lockerB.close()]);
    const after = await leaseIds();
    const added = [...after].filter((id) => !baseline.has(id));
    console.info(
      `etcd T04: leases before ${baseline.size}, after ${after.size}; fencelock opened ` +
        `${mine.length}, of which still present: ${mine.filter((id) => after.has(id)).length}`,
    );
    expect(mine.filter((id) => after.has(id))).toEqual([]);
    expect(added.filter((id) => mine.includes(id))).toEqual([]);
  }, 60_000);
});

describe('T07: TTL units and granularity (etcd)', () => {
  async function grantedTtlOf(dir: string): Promise<{ granted: number; remaining: number }> {
    const [first] = await contenders(admin, dir);
    expect(first, `a key under ${dir}`).toBeDefined();
    const ttl = await admin.leaseClient.leaseTimeToLive({ ID: first!.lease });
    return { granted: Number(ttl.grantedTTL), remaining: Number(ttl.TTL) };
  }

  for (const autoRenew of [true, false]) {
    it(`ttlMs 1500 (autoRenew ${autoRenew}) is granted as 2 s, reported as 2000 ms`, async () => {
      const k = `t07:1500:${autoRenew}`;
      const locker = newLocker(etcdUrl(namespace), 30_000);
      const dir = ((await locker.backend()) as EtcdBackend).dirOf(k);
      const startedAt = performance.now();
      const lease = await locker.acquire(k, { ttlMs: 1500, autoRenew });
      const { granted, remaining } = await grantedTtlOf(dir);
      expect(granted).toBe(2);
      expect(remaining).toBeGreaterThan(0);
      expect(remaining).toBeLessThanOrEqual(2);
      expect(lease.ttlMs).toBe(2000);
      // Validity is measured from the attempt with the effective TTL, minus drift.
      expect(lease.expiresAt).toBeLessThanOrEqual(startedAt + 2000 + 1);
      expect(lease.expiresAt - startedAt).toBeGreaterThan(1500);
      expect(lease.isHeld).toBe(true);
      expect(await lease.release()).toBe('released');
    });
  }

  it('ttlMs 300 gets the engine minimum, reported as the effective TTL (never 0)', async () => {
    const k2 = 't07:300';
    const locker = newLocker(etcdUrl(namespace), 30_000);
    const dir = ((await locker.backend()) as EtcdBackend).dirOf(k2);
    let lease: Lease;
    try {
      lease = await locker.acquire(k2, { ttlMs: 300 });
    } catch (error) {
      // The other allowed answer: rejected up front, naming ttlMs.
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(String(error)).toContain('ttlMs');
      expect(await admin.getAll().prefix(dir).count()).toBe(0);
      return;
    }
    const { granted } = await grantedTtlOf(dir);
    console.info(`etcd T07: ttlMs 300 granted as ${granted} s; lease.ttlMs ${lease.ttlMs}`);
    expect(granted).toBeGreaterThanOrEqual(1);
    expect(lease.ttlMs).toBe(granted * 1000);
    expect(lease.ttlMs).toBeGreaterThanOrEqual(2000);
    expect(lease.remainingMs).toBeGreaterThan(300);
    // The watchdog renews it at a third of the effective TTL: it is still held after 1 s.
    await sleep(1000);
    expect(lease.isHeld).toBe(true);
    expect(await lease.release()).toBe('released');
  });
});
