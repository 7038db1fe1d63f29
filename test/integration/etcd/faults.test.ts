/**
 * Fault tests on the real etcd cluster: a holder process killed with SIGKILL, a holder process
 * frozen with SIGSTOP past its TTL (its fenced write must then be rejected by the owner-key
 * guard), and the etcd leader killed while a lock is held (the lock survives the failover).
 *
 * The holders that die or freeze are child processes running the library compiled from its
 * sources (a private build), so the test process itself is never frozen. The cluster is left whole (3 healthy members).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { EtcdBackend } from '../../../packages/fencelock/src/backends/etcd/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS } from '../../helpers/engines.js';
import {
  endpointOf,
  killMember,
  leaderMember,
  MEMBERS,
  type Member,
  restoreCluster,
  startMember,
  waitForLeader,
  waitHealthy,
} from '../../helpers/etcd-cluster.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';
import {
  adminClient,
  contenders,
  etcdUrl,
  settledWithin,
  sleep,
  uniqueNamespace,
  waitForCount,
} from './support.js';

/** etcd3's connection pool (not re-exported by its index); the same module the backend uses. */
const { ConnectionPool } = createRequire(import.meta.url)('etcd3/lib/connection-pool.js') as {
  ConnectionPool: { new (...args: never[]): object; deterministicOrder: boolean };
};
/** The library's `index.js`, compiled from its sources (a private build shared by the run). */
let buildIndex: string;
const namespace = uniqueNamespace('faults');
const url = etcdUrl(namespace);
let admin: Etcd3;
const lockers: Locker[] = [];
const children: ChildProcess[] = [];
let killedMember: Member | undefined;

beforeAll(async () => {
  buildIndex = join((await privateBuild('etcd-faults')).dir, 'index.js');
  await waitHealthy(30_000);
  admin = adminClient();
}, 180_000);

afterEach(() => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await Promise.allSettled(lockers.map((l) => l.close()));
  if (killedMember !== undefined) await restoreCluster(60_000);
  await admin?.delete().prefix(`${namespace}/`);
  admin?.close();
}, 90_000);

/**
 * The holder process: acquires `FL_KEY`, prints its grant (token, effective TTL and the
 * `ownerCompare` guard), then on the stdin line `write` puts `FL_RESOURCE` inside an etcd txn
 * guarded by that compare, whether or not it still believes it holds the lock (a stale writer),
 * and prints whether the txn committed. Prints `lost` when its lease signal aborts.
 */
const HOLDER = `
import { createInterface } from 'node:readline';
import { Etcd3 } from 'etcd3';
const { createLocker } = await import(process.env.FL_DIST);
const env = process.env;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const locker = createLocker(env.FL_URL, { ttlMs: Number(env.FL_TTL_MS) });
const lease = await locker.acquire(env.FL_KEY);
const guard = (await locker.backend()).ownerCompare(lease);
const resource = new Etcd3({ hosts: env.FL_HOSTS.split(',') });
await resource.get(env.FL_RESOURCE).string();
lease.signal.addEventListener('abort', () =>
  out({ event: 'lost', reason: lease.signal.reason?.name ?? String(lease.signal.reason) }));
out({ event: 'granted', token: String(lease.fencingToken), ttlMs: lease.ttlMs, guard });
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== 'write') continue;
  const abortedBefore = lease.signal.aborted;
  try {
    const txn = await resource
      .if(guard.key, 'Create', '==', guard.createRevision)
      .then(resource.put(env.FL_RESOURCE).value('A:' + lease.fencingToken))
      .commit();
    out({ event: 'wrote', succeeded: txn.succeeded, abortedBefore });
  } catch (error) {
    out({ event: 'write-error', message: String(error) });
  }
}
`;

interface HolderEvent {
  readonly event: 'granted' | 'lost' | 'wrote' | 'write-error';
  readonly token?: string;
  readonly ttlMs?: number;
  readonly guard?: { key: string; createRevision: string };
  readonly reason?: string;
  readonly succeeded?: boolean;
  readonly abortedBefore?: boolean;
  readonly message?: string;
}

interface Holder {
  readonly child: ChildProcess;
  /** The next event named `name` (events already printed count), or a timeout error. */
  next(name: HolderEvent['event'], timeoutMs: number): Promise<HolderEvent>;
  /** `performance.now()` when each event arrived. */
  readonly seenAt: Map<string, number>;
}

function spawnHolder(key: string, ttlMs: number, resourceKey: string): Holder {
  const child = spawn(process.execPath, ['--input-type=module', '-e', HOLDER], {
    cwd: ROOT,
    env: {
      ...process.env,
      FL_DIST: buildIndex,
      FL_URL: url,
      FL_KEY: key,
      FL_TTL_MS: String(ttlMs),
      FL_HOSTS: ETCD_ENDPOINTS.join(','),
      FL_RESOURCE: resourceKey,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  const events: HolderEvent[] = [];
  const seenAt = new Map<string, number>();
  const waiters = new Set<() => void>();
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const event = JSON.parse(line) as HolderEvent;
    events.push(event);
    if (!seenAt.has(event.event)) seenAt.set(event.event, performance.now());
    for (const wake of waiters) wake();
  });
  const next = (name: HolderEvent['event'], timeoutMs: number) =>
    new Promise<HolderEvent>((resolve, reject) => {
      const check = () => {
        const found = events.find((e) => e.event === name);
        if (found === undefined) return false;
        clearTimeout(timer);
        waiters.delete(wake);
        resolve(found);
        return true;
      };
      const wake = () => void check();
      const timer = setTimeout(() => {
        waiters.delete(wake);
        reject(new Error(`holder printed no '${name}' within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      if (!check()) waiters.add(wake);
    });
  return { child, next, seenAt };
}

function newLocker(ttlMs: number, store = url): Locker {
  const locker = createLocker(store, { ttlMs });
  lockers.push(locker);
  return locker;
}

describe('etcd faults', () => {
  it('holder killed with SIGKILL: the next waiter is granted within TTL + 3 s, higher token', async () => {
    const key = 'faults:sigkill';
    const holder = spawnHolder(key, 2000, `${namespace}/resource/sigkill`);
    const granted = await holder.next('granted', 20_000);
    expect(granted.ttlMs).toBe(2000);

    const waiterLocker = newLocker(10_000);
    const dir = ((await waiterLocker.backend()) as EtcdBackend).dirOf(key);
    const waiting = waiterLocker.acquire(key, { waitMs: 30_000 });
    await waitForCount(admin, dir, 2);
    // While the holder lives (and renews), the waiter stays queued.
    expect(await settledWithin(waiting, 1000)).toBe(false);

    const killedAt = performance.now();
    holder.child.kill('SIGKILL');
    const lease = await waiting;
    const grantMs = performance.now() - killedAt;
    console.info(`etcd SIGKILL: waiter granted ${Math.round(grantMs)} ms after the kill`);
    expect(grantMs).toBeLessThanOrEqual(granted.ttlMs! + 3000);
    expect(lease.fencingToken).toBeGreaterThan(BigInt(granted.token!));
    // The dead holder's key went with its lease; only the new holder's remains.
    const left = await contenders(admin, dir);
    expect(left.map((c) => c.createRevision)).toEqual([lease.fencingToken]);
    expect(await lease.release()).toBe('released');
  });

  it('holder frozen by SIGSTOP past its TTL: its guarded write is rejected after SIGCONT', async () => {
    const key = 'faults:sigstop';
    const resourceKey = `${namespace}/resource/sigstop`;
    const holder = spawnHolder(key, 2000, resourceKey);
    const granted = await holder.next('granted', 20_000);
    const guardA = granted.guard!;
    expect(guardA.createRevision).toBe(granted.token);

    const waiterLocker = newLocker(10_000);
    const backend = (await waiterLocker.backend()) as EtcdBackend;
    const dir = backend.dirOf(key);
    const waiting = waiterLocker.acquire(key, { waitMs: 30_000 });
    await waitForCount(admin, dir, 2);
    expect(await settledWithin(waiting, 500)).toBe(false);

    const pausedAt = performance.now();
    holder.child.kill('SIGSTOP');
    const lease = await waiting;
    const grantMs = performance.now() - pausedAt;
    console.info(`etcd SIGSTOP: waiter granted ${Math.round(grantMs)} ms after the pause`);
    expect(grantMs).toBeLessThanOrEqual(granted.ttlMs! + 3000);
    expect(lease.fencingToken).toBeGreaterThan(BigInt(granted.token!));

    // The new holder's guarded write commits.
    const guardB = backend.ownerCompare(lease)!;
    expect(guardB.createRevision).toBe(String(lease.fencingToken));
    const txnB = await admin
      .if(guardB.key, 'Create', '==', guardB.createRevision)
      .then(admin.put(resourceKey).value(`B:${lease.fencingToken}`))
      .commit();
    expect(txnB.succeeded).toBe(true);

    // The frozen holder wakes up with a write already queued on its stdin: stale, rejected.
    holder.child.stdin!.write('write\n');
    holder.child.kill('SIGCONT');
    const wrote = await holder.next('wrote', 15_000);
    expect(wrote.succeeded).toBe(false);
    expect(await admin.get(resourceKey).string()).toBe(`B:${lease.fencingToken}`);
    // And it learns that it lost the lock.
    const lost = await holder.next('lost', 10_000);
    expect(lost.reason).toBe('LockLostError');
    console.info(
      `etcd SIGSTOP: after SIGCONT the holder ${wrote.abortedBefore ? 'already knew' : 'did not yet know'} it lost the lock when it wrote`,
    );

    // The new holder still holds, and its guard still passes.
    expect(lease.isHeld).toBe(true);
    const again = await admin
      .if(guardB.key, 'Create', '==', guardB.createRevision)
      .then(admin.put(resourceKey).value(`B2:${lease.fencingToken}`))
      .commit();
    expect(again.succeeded).toBe(true);
    expect(await lease.release()).toBe('released');
    // Released: the guard of the released lease no longer passes either.
    const afterRelease = await admin
      .if(guardB.key, 'Create', '==', guardB.createRevision)
      .then(admin.put(resourceKey).value('late'))
      .commit();
    expect(afterRelease.succeeded).toBe(false);
  });

  it('etcd leader killed while a lock is held: the lease and the queue survive, exclusion holds', async () => {
    const TTL_MS = 5000;
    const WAITERS = 3;
    const key = 'faults:leader';
    await waitHealthy(30_000);
    const leader = await waitForLeader();
    // While the lock and the queue are set up, every client tries the leader first (etcd3's
    // test switch: hosts in reverse list order instead of shuffled), so the holder's keepalive
    // stream and the waiters' watch streams all run through the member that dies. The switch
    // is off again before the kill: reconnection picks hosts as in production (shuffled).
    const hostsLeaderLast = [...MEMBERS.filter((n) => n !== leader), leader]
      .map((n) => endpointOf(n).replace('http://', ''))
      .join(',');
    const store = etcdUrl(namespace, hostsLeaderLast);
    // The switch is on the pool class the clients here actually use.
    expect((admin as unknown as { pool: object }).pool).toBeInstanceOf(ConnectionPool);
    ConnectionPool.deterministicOrder = true;

    const lostEvents: unknown[] = [];
    const onLost = (e: unknown) => lostEvents.push(e);
    subscribe('fencelock:lost', onLost);
    let sampler: NodeJS.Timeout | undefined;
    try {
      const holderLocker = newLocker(TTL_MS, store);
      const lease = await holderLocker.acquire(key);
      expect(lease.ttlMs).toBe(TTL_MS);
      const dir = ((await holderLocker.backend()) as EtcdBackend).dirOf(key);
      let lostAt: number | undefined;
      lease.signal.addEventListener('abort', () => {
        lostAt = performance.now();
      });

      // Waiters queue behind the holder, each on its own locker.
      const grants: { index: number; token: bigint; at: number }[] = [];
      const done: Promise<void>[] = [];
      for (let i = 0; i < WAITERS; i++) {
        const locker = newLocker(TTL_MS, store);
        done.push(
          locker.acquire(key, { waitMs: 60_000 }).then(async (granted) => {
            grants.push({ index: i, token: granted.fencingToken, at: performance.now() });
            expect(await granted.release()).toBe('released');
          }),
        );
        await waitForCount(admin, dir, i + 2);
      }
      // Reported by Promise.all below; never an unhandled rejection if the test fails first.
      for (const d of done) d.catch(() => undefined);
      const queued = await contenders(admin, dir);

      // Sample the holder session's validity bound to measure its longest keepalive gap.
      const session = await ((await holderLocker.backend()) as EtcdBackend).session(TTL_MS);
      let lastBound = session.validUntil;
      let lastMoveAt = performance.now();
      let longestGapMs = 0;
      sampler = setInterval(() => {
        const now = performance.now();
        if (session.validUntil !== lastBound) {
          lastBound = session.validUntil;
          longestGapMs = Math.max(longestGapMs, now - lastMoveAt);
          lastMoveAt = now;
        }
      }, 20);

      ConnectionPool.deterministicOrder = false;
      const killedAt = performance.now();
      await killMember(leader);
      killedMember = leader;
      const next = await waitForLeader((n) => n !== leader, 15_000);
      const electedMs = performance.now() - killedAt;

      // Another client cannot take the key during or after the failover.
      const other = newLocker(TTL_MS);
      expect(await other.tryAcquire(key)).toBeNull();

      // Hold through 2 × TTL after the kill: no loss, and the whole queue is still in place.
      await sleep(2 * TTL_MS - (performance.now() - killedAt));
      longestGapMs = Math.max(longestGapMs, performance.now() - lastMoveAt);
      console.info(
        `etcd leader kill: etcd${leader} killed, etcd${next} leads after ${Math.round(electedMs)} ms; ` +
          `longest keepalive gap of the holder's session ${Math.round(longestGapMs)} ms (TTL ${TTL_MS})`,
      );
      expect(lostAt, 'lease lost during the failover').toBeUndefined();
      expect(lostEvents).toEqual([]);
      expect(lease.isHeld).toBe(true);
      expect(grants).toEqual([]);
      expect(await other.tryAcquire(key)).toBeNull();
      expect(await contenders(admin, dir)).toEqual(queued);

      // The waiters' watches moved to a surviving member: the release still wakes them, in
      // order, promptly (not at the backend's 30 s recheck).
      const releasedAt = performance.now();
      expect(await lease.release()).toBe('released');
      await Promise.all(done);
      const handoffMs = grants.at(-1)!.at - releasedAt;
      console.info(
        `etcd leader kill: ${WAITERS} queued waiters granted in turn within ${Math.round(handoffMs)} ms of the release`,
      );
      expect(grants.map((g) => g.index)).toEqual([0, 1, 2]);
      expect(grants.map((g) => g.token)).toEqual(queued.slice(1).map((q) => q.createRevision));
      expect(handoffMs).toBeLessThan(5000);

      const after = await other.acquire(key, { waitMs: 10_000 });
      expect(after.fencingToken).toBeGreaterThan(grants.at(-1)!.token);
      expect(await after.release()).toBe('released');
    } finally {
      clearInterval(sampler);
      ConnectionPool.deterministicOrder = false;
      unsubscribe('fencelock:lost', onLost);
      if (killedMember !== undefined) {
        const started = performance.now();
        await startMember(killedMember, 60_000);
        await waitHealthy(30_000);
        console.info(
          `etcd leader kill: etcd${killedMember} restarted, healthy after ${Math.round(performance.now() - started)} ms`,
        );
        killedMember = undefined;
      }
    }
    expect(await leaderMember()).toBeDefined();
  }, 90_000);
});
