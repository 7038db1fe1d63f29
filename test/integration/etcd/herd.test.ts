/**
 * Scenario T11 step 1 (etcd): no thundering herd on release. 50 waiters, each on its own locker
 * with its own etcd3 client, queue on a held key; the holder releases and each new holder holds
 * ~50 ms and releases, until all 50 have held it.
 *
 * Every engine request a waiter's client makes is counted at the client: each unary RPC
 * (`ConnectionPool.exec`: KV txn/range/delete, lease grant/revoke/…), each watch stream opened,
 * each watch created or cancelled on it. Lease keepalives of the locker's session are not lock
 * traffic (they run at TTL/3 whatever the lock does) and are not counted. On top, each waiter's
 * backend `attempt` is wrapped to count attempts.
 *
 * Per release (from the start of holder h−1's release to the start of holder h's release), only
 * the successor h and at most one spurious waiter may issue a request; each client holds at most
 * one watch at a time; grants follow queue order; the totals are linear in the waiter count.
 */
import type { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import {
  adminClient,
  etcdUrl,
  instrumentedClient,
  type RequestEvent,
  sleep,
  uniqueNamespace,
  waitForCount,
} from './support.js';

const namespace = uniqueNamespace('herd');
const WAITERS = 50;
const HOLD_MS = 50;
let admin: Etcd3;
const lockers: Locker[] = [];
const clients: Etcd3[] = [];

beforeAll(() => {
  admin = adminClient();
});

afterAll(async () => {
  await Promise.allSettled(lockers.map((l) => l.close()));
  for (const c of clients) c.close();
  await admin.delete().prefix(`${namespace}/`);
  admin.close();
});

describe('etcd: no thundering herd (T11 step 1)', () => {
  it('50 queued waiters: per release only the successor (+≤1) asks the engine', async () => {
    const key = 'herd:resource';
    const holderLocker = createLocker(etcdUrl(namespace), { ttlMs: 30_000 });
    lockers.push(holderLocker);
    const holder = await holderLocker.acquire(key);
    const dir = ((await holderLocker.backend()) as EtcdBackend).dirOf(key);

    const log: RequestEvent[] = [];
    const attempts = new Array<number>(WAITERS).fill(0);
    const peaks: (() => number)[] = [];
    const watchedKeys: string[][] = [];
    const grantedAt = new Array<number>(WAITERS).fill(Number.NaN);
    const releaseStartedAt = new Array<number>(WAITERS).fill(Number.NaN);
    const tokens = new Array<bigint>(WAITERS).fill(0n);
    const order: number[] = [];
    const done: Promise<void>[] = [];

    for (let i = 0; i < WAITERS; i++) {
      const { client, peak, watched } = instrumentedClient(i, log);
      clients.push(client);
      peaks.push(peak);
      watchedKeys.push(watched);
      const backend = createEtcdBackend({ client, namespace });
      const attempt = backend.attempt.bind(backend);
      backend.attempt = (request) => {
        attempts[i]! += 1;
        return attempt(request);
      };
      const locker = createLocker(backend, { ttlMs: 30_000 });
      lockers.push(locker);
      done.push(
        locker.acquire(key, { waitMs: 120_000 }).then(async (lease) => {
          grantedAt[i] = performance.now();
          tokens[i] = lease.fencingToken;
          order.push(i);
          await sleep(HOLD_MS);
          releaseStartedAt[i] = performance.now();
          expect(await lease.release()).toBe('released');
        }),
      );
      await waitForCount(admin, dir, i + 2);
    }
    // Queued: one attempt each, nobody granted, each watching only the key just ahead of it.
    expect(order).toEqual([]);
    expect(attempts.every((n) => n === 1)).toBe(true);
    const line = (await admin.getAll().prefix(dir).sort('Create', 'Ascend').keys()).map(String);
    expect(line).toHaveLength(WAITERS + 1);
    expect(watchedKeys).toEqual(line.slice(0, WAITERS).map((predecessor) => [predecessor]));

    const queuePhaseRequests = log.length;
    const startedAt = performance.now();
    const holderReleaseAt = performance.now();
    expect(await holder.release()).toBe('released');
    await Promise.all(done);
    const handoffPhaseMs = performance.now() - startedAt;

    // Grants follow queue order; tokens strictly increase.
    expect(order).toEqual(Array.from({ length: WAITERS }, (_, i) => i));
    expect(tokens[0]!).toBeGreaterThan(holder.fencingToken);
    for (let i = 1; i < WAITERS; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);

    // Per release h (of holder h−1; −1 is the first holder): who issued requests in
    // [start of h−1's release, start of h's release), other than the releaser h−1 itself.
    const perRelease: { successor: number; issuers: number[] }[] = [];
    for (let h = 0; h < WAITERS; h++) {
      const from = h === 0 ? holderReleaseAt : releaseStartedAt[h - 1]!;
      const to = h + 1 < WAITERS ? releaseStartedAt[h]! : Number.POSITIVE_INFINITY;
      const issuers = new Set<number>();
      for (const event of log) {
        if (event.at >= from && event.at < to && event.waiter !== h - 1) issuers.add(event.waiter);
      }
      perRelease.push({ successor: h, issuers: [...issuers].sort((a, b) => a - b) });
    }
    const crowded = perRelease.filter((r) => r.issuers.length > 2);
    const silentSuccessor = perRelease.filter((r) => !r.issuers.includes(r.successor));
    const spurious = perRelease.reduce((n, r) => n + r.issuers.length - 1, 0);
    const maxIssuers = Math.max(...perRelease.map((r) => r.issuers.length));

    const handoffRequests = log.length - queuePhaseRequests;
    const totalAttempts = attempts.reduce((a, b) => a + b, 0);
    const gaps = order.slice(1).map((i) => grantedAt[i]! - releaseStartedAt[i - 1]!);
    const byKind = new Map<string, number>();
    for (const e of log.slice(queuePhaseRequests))
      byKind.set(e.what, (byKind.get(e.what) ?? 0) + 1);
    console.info(
      `etcd herd: ${WAITERS} waiters, handoffs took ${Math.round(handoffPhaseMs)} ms; ` +
        `issuers per release max ${maxIssuers}, spurious total ${spurious}; ` +
        `requests: queue phase ${queuePhaseRequests}, handoff phase ${handoffRequests} ` +
        `(${[...byKind].map(([k, v]) => `${k} ${v}`).join(', ')}); attempts ${totalAttempts}; ` +
        `watch peak ${Math.max(...peaks.map((p) => p()))}; handoff gap median ` +
        `${Math.round(gaps.sort((a, b) => a - b)[Math.floor(gaps.length / 2)]!)} ms, max ${Math.round(gaps.at(-1)!)} ms`,
    );

    expect(crowded, 'releases where more than 2 waiters asked the engine').toEqual([]);
    expect(silentSuccessor, 'releases whose successor made no request').toEqual([]);
    // Each client holds at most one watch (on its predecessor) at a time.
    for (let i = 0; i < WAITERS; i++)
      expect(peaks[i]!(), `watch peak of waiter ${i}`).toBeLessThanOrEqual(1);
    // Linear, not quadratic: about 2 attempts per waiter (queue, then the grant).
    expect(Math.max(...attempts)).toBeLessThanOrEqual(3);
    expect(totalAttempts).toBeLessThanOrEqual(3 * WAITERS);
    // Per waiter in the handoff phase: cancel its watch, attempt, release (+ slack for a
    // spurious wake-up); a herd would be ~WAITERS²/2 = 1250 requests.
    expect(handoffRequests).toBeLessThanOrEqual(6 * WAITERS);
    expect(await admin.getAll().prefix(dir).count()).toBe(0);
  }, 90_000);
});
