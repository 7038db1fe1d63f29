/**
 * Scenario T11 step 1 (ZooKeeper): no thundering herd on release. 50 waiters, each on its own
 * locker with its own backend (so its own ZooKeeper client and session), queue on a held key;
 * the holder releases and each new holder holds ~50 ms and releases, until all 50 have held it.
 *
 * Every engine request a waiter's client makes is counted at the client: each waiter's backend
 * gets a subclass of the native client class that logs every call of the callback API the
 * backend uses (`a_create`, `a_exists`, `aw_exists`, `a_get_children`, `a_get`, `a_delete_`,
 * `a_set`) with its path. The session heartbeat (one `a_exists('/')` every third of the session
 * timeout, and the C client's own pings, which never reach JavaScript) is not lock traffic: it
 * runs whatever the lock does, so requests on path `/` are not counted. On top, each waiter's
 * backend `attempt` is wrapped to count attempts, and each client's watches are tracked: a watch
 * counts as held from its `aw_exists` call until it fires with a node event (a reply that
 * set no watch ends it at once; a "no node" reply leaves a watch set on the path's creation,
 * which never fires here, and keeps counting).
 *
 * Per release (from the start of holder h−1's release to the start of holder h's release), only
 * the successor h and at most one spurious waiter may issue a request; each client holds at most
 * one watch at a time, on its predecessor; grants follow queue order; the totals are linear in
 * the waiter count.
 */
import { createRequire } from 'node:module';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type {
  NativeZooKeeper,
  NativeZooKeeperClass,
} from '../../../packages/fencelock/src/backends/zookeeper/session.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { openAdmin, type ZkAdmin } from '../../helpers/zookeeper.js';
import {
  contenders,
  countChildren,
  removeNamespace,
  sleep,
  uniqueNamespace,
  waitForCount,
  ZK_HOSTS,
  zkUrl,
} from './support.js';

const require = createRequire(import.meta.url);
const NativeClient = require('zookeeper') as NativeZooKeeperClass;

const namespace = uniqueNamespace('herd');
const WAITERS = 50;
const HOLD_MS = 50;
/** ZooKeeper's session-event type: delivered to watchers without ending their watch. */
const SESSION_EVENT = -1;
/** Reply codes after which `aw_exists` left a watch set: ok, and no node (a creation watch). */
const WATCH_SET = new Set([0, -101]);
let admin: ZkAdmin;
const lockers: Locker[] = [];
const backends: ZookeeperBackend[] = [];

interface RequestEvent {
  readonly waiter: number;
  readonly at: number;
  readonly what: string;
  readonly path: string;
}

/**
 * A native client class whose requests are logged as `waiter`'s, with its peak number of
 * watches held at once and the paths it watched.
 */
function countingClass(
  waiter: number,
  log: RequestEvent[],
): { Client: NativeZooKeeperClass; peak: () => number; watched: string[] } {
  let active = 0;
  let peak = 0;
  const watched: string[] = [];
  const record = (what: string, path: string) =>
    log.push({ waiter, at: performance.now(), what, path });
  const Client = class extends NativeClient {
    override a_create(...args: Parameters<NativeZooKeeper['a_create']>) {
      record('a_create', args[0]);
      return super.a_create(...args);
    }
    override a_exists(...args: Parameters<NativeZooKeeper['a_exists']>) {
      record('a_exists', args[0]);
      return super.a_exists(...args);
    }
    override aw_exists(...[path, watchCb, statCb]: Parameters<NativeZooKeeper['aw_exists']>) {
      record('aw_exists', path);
      watched.push(path);
      active += 1;
      peak = Math.max(peak, active);
      let ended = false;
      const end = () => {
        if (ended) return;
        ended = true;
        active -= 1;
      };
      return super.aw_exists(
        path,
        (type, state, watchedPath) => {
          if (type !== SESSION_EVENT) end();
          watchCb(type, state, watchedPath);
        },
        (rc, error, stat) => {
          if (!WATCH_SET.has(rc)) end();
          statCb(rc, error, stat);
        },
      );
    }
    override a_get_children(...args: Parameters<NativeZooKeeper['a_get_children']>) {
      record('a_get_children', args[0]);
      return super.a_get_children(...args);
    }
    override a_get(...args: Parameters<NativeZooKeeper['a_get']>) {
      record('a_get', args[0]);
      return super.a_get(...args);
    }
    override a_delete_(...args: Parameters<NativeZooKeeper['a_delete_']>) {
      record('a_delete_', args[0]);
      return super.a_delete_(...args);
    }
    override a_set(...args: Parameters<NativeZooKeeper['a_set']>) {
      record('a_set', args[0]);
      return super.a_set(...args);
    }
  };
  return { Client, peak: () => peak, watched };
}

beforeAll(async () => {
  admin = await openAdmin();
});

afterAll(async () => {
  await Promise.allSettled(lockers.map((l) => l.close()));
  await Promise.allSettled(backends.map((b) => b.close()));
  try {
    await removeNamespace(admin, namespace);
  } finally {
    admin.close();
  }
});

describe('ZooKeeper: no thundering herd (T11 step 1)', () => {
  it('the counting client class sees lock requests and the heartbeat on "/"', async () => {
    // The counters hook the calls the backend really makes (else the herd test proves nothing).
    const log: RequestEvent[] = [];
    const { Client } = countingClass(0, log);
    const backend = new ZookeeperBackend(Client, {
      connect: ZK_HOSTS,
      namespace,
      connectTimeoutMs: 10_000,
      suspended: 'lose',
    });
    backends.push(backend);
    const locker = createLocker(backend, { ttlMs: 1000 });
    lockers.push(locker);
    const lease = await locker.acquire('herd:probe');
    await sleep(800);
    expect(await lease.release()).toBe('released');
    const kinds = new Set(log.filter((e) => e.path !== '/').map((e) => e.what));
    for (const kind of ['a_create', 'a_get_children', 'a_delete_']) expect(kinds).toContain(kind);
    // A 1 s session beats every ~333 ms: at least one heartbeat in 800 ms.
    expect(log.filter((e) => e.path === '/' && e.what === 'a_exists').length).toBeGreaterThan(0);
    await locker.close();
  });

  it('50 queued waiters: per release only the successor (+≤1) asks the engine', async () => {
    const key = 'herd:resource';
    const holderLocker = createLocker(zkUrl(namespace), { ttlMs: 30_000 });
    lockers.push(holderLocker);
    const holder = await holderLocker.acquire(key);
    const dir = ((await holderLocker.backend()) as ZookeeperBackend).dirOf(key);

    const log: RequestEvent[] = [];
    const attempts = new Array<number>(WAITERS).fill(0);
    const peaks: (() => number)[] = [];
    const watchedPaths: string[][] = [];
    const grantedAt = new Array<number>(WAITERS).fill(Number.NaN);
    const releaseStartedAt = new Array<number>(WAITERS).fill(Number.NaN);
    const tokens = new Array<bigint>(WAITERS).fill(0n);
    const order: number[] = [];
    const done: Promise<void>[] = [];

    for (let i = 0; i < WAITERS; i++) {
      const { Client, peak, watched } = countingClass(i, log);
      peaks.push(peak);
      watchedPaths.push(watched);
      const backend = new ZookeeperBackend(Client, {
        connect: ZK_HOSTS,
        namespace,
        connectTimeoutMs: 10_000,
        suspended: 'lose',
      });
      backends.push(backend);
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
    // Queued: one attempt each, nobody granted, each watching only the node just ahead of it.
    expect(order).toEqual([]);
    expect(attempts.every((n) => n === 1)).toBe(true);
    const line = await contenders(admin, dir);
    expect(line).toHaveLength(WAITERS + 1);
    expect(line[0]!.czxid).toBe(holder.fencingToken);
    // A watch is set just after its node is created: wait for the last ones before comparing.
    for (let tries = 0; watchedPaths.some((w) => w.length === 0) && tries < 200; tries++) {
      await sleep(10);
    }
    expect(watchedPaths).toEqual(line.slice(0, WAITERS).map((predecessor) => [predecessor.path]));

    const lockRequests = () => log.filter((e) => e.path !== '/');
    const queuePhaseRequests = lockRequests().length;
    const holderReleaseAt = performance.now();
    expect(await holder.release()).toBe('released');
    await Promise.all(done);
    const handoffPhaseMs = performance.now() - holderReleaseAt;

    // Grants follow queue order; tokens strictly increase and are the nodes' czxids.
    expect(order).toEqual(Array.from({ length: WAITERS }, (_, i) => i));
    expect(tokens[0]!).toBeGreaterThan(holder.fencingToken);
    for (let i = 1; i < WAITERS; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    expect(tokens).toEqual(line.slice(1).map((n) => n.czxid));

    // Per release h (of holder h−1; −1 is the first holder): who issued lock requests in
    // [start of h−1's release, start of h's release), other than the releaser h−1 itself.
    const traffic = lockRequests();
    const perRelease: { successor: number; issuers: number[] }[] = [];
    for (let h = 0; h < WAITERS; h++) {
      const from = h === 0 ? holderReleaseAt : releaseStartedAt[h - 1]!;
      const to = h + 1 < WAITERS ? releaseStartedAt[h]! : Number.POSITIVE_INFINITY;
      const issuers = new Set<number>();
      for (const event of traffic) {
        if (event.at >= from && event.at < to && event.waiter !== h - 1) issuers.add(event.waiter);
      }
      perRelease.push({ successor: h, issuers: [...issuers].sort((a, b) => a - b) });
    }
    const crowded = perRelease.filter((r) => r.issuers.length > 2);
    const silentSuccessor = perRelease.filter((r) => !r.issuers.includes(r.successor));
    const spurious = perRelease.reduce((n, r) => n + r.issuers.length - 1, 0);
    const maxIssuers = Math.max(...perRelease.map((r) => r.issuers.length));

    const handoffRequests = traffic.length - queuePhaseRequests;
    const heartbeats = log.length - traffic.length;
    const totalAttempts = attempts.reduce((a, b) => a + b, 0);
    const gaps = order.slice(1).map((i) => grantedAt[i]! - releaseStartedAt[i - 1]!);
    const byKind = new Map<string, number>();
    for (const e of traffic.slice(queuePhaseRequests))
      byKind.set(e.what, (byKind.get(e.what) ?? 0) + 1);
    console.info(
      `zookeeper herd: ${WAITERS} waiters, handoffs took ${Math.round(handoffPhaseMs)} ms; ` +
        `issuers per release max ${maxIssuers}, spurious total ${spurious}; ` +
        `requests: queue phase ${queuePhaseRequests}, handoff phase ${handoffRequests} ` +
        `(${[...byKind].map(([k, v]) => `${k} ${v}`).join(', ')}); heartbeats on / (not ` +
        `counted) ${heartbeats}; attempts ${totalAttempts}; watch peak ` +
        `${Math.max(...peaks.map((p) => p()))}; handoff gap median ` +
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
    // Queue phase, per waiter: create, children, stat (token), watch (+ slack).
    expect(queuePhaseRequests).toBeLessThanOrEqual(6 * WAITERS);
    // Handoff phase, per waiter: children (the attempt that grants), delete (the release), plus
    // slack for a spurious wake-up; a herd would be ~WAITERS²/2 = 1250 requests.
    expect(handoffRequests).toBeLessThanOrEqual(4 * WAITERS);
    expect(await countChildren(admin, dir)).toBe(0);
  }, 90_000);

  it('a waiter that re-reads the line after 30 s of silence still holds one watch', async () => {
    // The backend asks waiters to re-read the children every 30 s (`recheckAfterMs`) in case a
    // watch was missed; the watch it set before has not fired (its predecessor is still there),
    // so setting another one each time would pile up watches (and callbacks) for as long as the
    // waiter waits. This test waits for one such re-read (~30 s).
    const key = 'herd:recheck';
    const holderLocker = createLocker(zkUrl(namespace), { ttlMs: 30_000 });
    lockers.push(holderLocker);
    const holder = await holderLocker.acquire(key);
    const dir = ((await holderLocker.backend()) as ZookeeperBackend).dirOf(key);
    const log: RequestEvent[] = [];
    const { Client, peak, watched } = countingClass(0, log);
    const backend = new ZookeeperBackend(Client, {
      connect: ZK_HOSTS,
      namespace,
      connectTimeoutMs: 10_000,
      suspended: 'lose',
    });
    backends.push(backend);
    const locker = createLocker(backend, { ttlMs: 30_000 });
    lockers.push(locker);
    const waiting = locker.acquire(key, { waitMs: 120_000 });
    waiting.catch(() => undefined);
    await waitForCount(admin, dir, 2);
    const [holderNode] = await contenders(admin, dir);

    // Wait for the re-read (a second read of the children), then for its reply to be handled.
    const reads = () => log.filter((e) => e.what === 'a_get_children').length;
    const deadline = performance.now() + 45_000;
    while (reads() < 2 && performance.now() < deadline) await sleep(100);
    expect(reads(), 'the waiter re-read the children').toBeGreaterThanOrEqual(2);
    await sleep(500);
    console.info(
      `zookeeper recheck: ${log.filter((e) => e.path !== '/').length} lock requests in ` +
        `${Math.round(performance.now() - (deadline - 45_000))} ms of waiting; ` +
        `watches set ${watched.length}, peak held ${peak()}`,
    );
    // Still only watching its predecessor, and still one watch at a time.
    expect(new Set(watched)).toEqual(new Set([holderNode!.path]));
    expect(peak(), 'watches held at once by the waiter').toBeLessThanOrEqual(1);

    expect(await holder.release()).toBe('released');
    const lease = await waiting;
    expect(lease.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await lease.release()).toBe('released');
    expect(await countChildren(admin, dir)).toBe(0);
  }, 75_000);
});
