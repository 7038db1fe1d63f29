/**
 * Semaphores on ZooKeeper (permit-line.ts, backend.ts): the nodes a semaphore keeps, who watches
 * whom while waiting, and the permit-count check.
 *
 * A semaphore's contenders are `/<namespace>/semaphores/<encoded key>/_c_<owner>-p<N>-<sequence>`
 * (`backend.semaphoreDirOf(key)`), apart from the key's lock nodes. A contender with fewer than N
 * nodes ahead holds a permit; the first waiter watches the N holders, each later waiter its
 * predecessor only, and a waiter granted with nodes behind it writes its node once so that its
 * successor counts again. Each waiter here has its own backend (its own client and session),
 * built on a native client class that records the requests the backend makes.
 */
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import { CREATE_MODE } from '../../../packages/fencelock/src/backends/zookeeper/native.js';
import type {
  NativeZooKeeper,
  NativeZooKeeperClass,
} from '../../../packages/fencelock/src/backends/zookeeper/session.js';
import {
  createLocker,
  type Lease,
  type Locker,
  PermitsMismatchError,
} from '../../../packages/fencelock/src/index.js';
import { ZK_CONTAINER_CHECK_MS } from '../../helpers/engines.js';
import { children, sleep, useNamespace, ZK_HOSTS } from './support.js';

const require = createRequire(import.meta.url);
const NativeClient = require('zookeeper') as NativeZooKeeperClass;

const ns = useNamespace('semaphore');

/** What one backend's native client asked the ensemble (the heartbeat on `/` left out). */
interface Requests {
  /** Paths of `aw_exists` calls (the watches set), in order. */
  readonly watched: string[];
  /** Paths of `a_create` calls. */
  readonly created: string[];
  /** Paths of `a_set` calls. */
  readonly written: string[];
  /** Paths of nodes deleted by `a_delete_` calls, as their replies came. */
  readonly deleted: string[];
  /** Attempts the backend answered or failed. */
  attempts: number;
}

/** One request held back by the test: sent to the ensemble once `open()` is called. */
interface Gate {
  /** Whether to hold the request on `path` (only the first that `picks` names). */
  readonly holds: (path: string) => boolean;
  /** Resolves once the held request was made. */
  readonly reached: Promise<void>;
  /** Resolves once `open()` was called. */
  readonly opened: Promise<void>;
  readonly open: () => void;
}

/** A promise and its resolve (Node 20 has no `Promise.withResolvers`). */
function signalled(): { promise: Promise<void>; resolve: () => void } {
  let resolve = (): void => undefined;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A gate for the first request on a path that `picks` names. */
function gate(picks: (path: string) => boolean): Gate {
  const reached = signalled();
  const opened = signalled();
  let used = false;
  return {
    holds: (path) => {
      if (used || !picks(path)) return false;
      used = true;
      reached.resolve();
      return true;
    },
    reached: reached.promise,
    opened: opened.promise,
    open: () => opened.resolve(),
  };
}

/** What a recording backend holds back: its first watch on a path, its first contender create. */
interface Holds {
  readonly watch?: Gate;
  /** Run before the contender create it names goes out. */
  readonly beforeCreate?: (path: string) => Promise<void> | undefined;
}

/** A backend on a native client class that records its requests, holding back what `holds` says. */
function recordingBackend(holds: Holds = {}): { backend: ZookeeperBackend; requests: Requests } {
  const requests: Requests = { watched: [], created: [], written: [], deleted: [], attempts: 0 };
  const Client = class extends NativeClient {
    override a_create(...args: Parameters<NativeZooKeeper['a_create']>) {
      requests.created.push(args[0]);
      const before = holds.beforeCreate?.(args[0]);
      if (before === undefined) return super.a_create(...args);
      void before.then(() => super.a_create(...args));
      return undefined;
    }
    override a_delete_(...[path, version, cb]: Parameters<NativeZooKeeper['a_delete_']>) {
      return super.a_delete_(path, version, (rc, error) => {
        if (rc === 0) requests.deleted.push(path);
        cb(rc, error);
      });
    }
    override a_set(...args: Parameters<NativeZooKeeper['a_set']>) {
      requests.written.push(args[0]);
      return super.a_set(...args);
    }
    override aw_exists(...args: Parameters<NativeZooKeeper['aw_exists']>) {
      requests.watched.push(args[0]);
      const { watch } = holds;
      if (watch === undefined || !watch.holds(args[0])) return super.aw_exists(...args);
      void watch.opened.then(() => super.aw_exists(...args));
      return undefined;
    }
  };
  const backend = ns.track(
    new ZookeeperBackend(Client, {
      connect: ZK_HOSTS,
      namespace: ns.namespace,
      connectTimeoutMs: 10_000,
      suspended: 'lose',
    }),
  );
  const attempt = backend.attempt.bind(backend);
  backend.attempt = (request) => {
    requests.attempts += 1;
    return attempt(request);
  };
  return { backend, requests };
}

/** A locker on its own recording backend. */
function recordingLocker(holds?: Holds): { locker: Locker; requests: Requests } {
  const { backend, requests } = recordingBackend(holds);
  return { locker: ns.track(createLocker(backend, { ttlMs: 30_000 })), requests };
}

/** A semaphore contender node as the ensemble has it. */
interface PermitNode {
  readonly name: string;
  readonly path: string;
  readonly owner: string;
  readonly permits: number;
  readonly czxid: bigint;
}

const PERMIT_NODE = /^_c_([0-9a-f]+)-p(\d+)-\d{10}$/;

/** The nodes under a semaphore's node, lowest sequence first; throws on any other child. */
async function permitNodes(dir: string): Promise<PermitNode[]> {
  const names = (await children(ns.admin, dir)).sort((a, b) =>
    a.slice(-10).localeCompare(b.slice(-10)),
  );
  const nodes: PermitNode[] = [];
  for (const name of names) {
    const m = PERMIT_NODE.exec(name);
    if (m === null) throw new Error(`unexpected child ${name} under ${dir}`);
    const path = `${dir}/${name}`;
    const stat = await ns.admin.exists(path, false);
    nodes.push({ name, path, owner: m[1]!, permits: Number(m[2]), czxid: BigInt(stat.czxid) });
  }
  return nodes;
}

/** Poll until `dir` has `count` nodes; throws after `timeoutMs`. */
async function waitForNodes(dir: string, count: number, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while ((await children(ns.admin, dir)).length !== count) {
    if (performance.now() > deadline) throw new Error(`${dir}: no ${count} nodes in time`);
    await sleep(5);
  }
}

/** Poll until `check()` is true; throws after `timeoutMs`. */
async function waitUntil(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`not in time: ${what}`);
    await sleep(5);
  }
}

/** Resolves once the ensemble's leader has deleted the emptied container `dir` (its check runs every ZK_CONTAINER_CHECK_MS). */
async function untilContainerDeleted(dir: string): Promise<void> {
  const deadline = performance.now() + 2 * ZK_CONTAINER_CHECK_MS + 10_000;
  while (await exists(dir)) {
    if (performance.now() > deadline) throw new Error(`${dir} was not deleted`);
    await sleep(100);
  }
}

/** Whether `path` exists (only "no node" means no). */
async function exists(path: string): Promise<boolean> {
  await ns.admin.sync(path);
  return ns.admin.exists(path, false).then(
    () => true,
    (error: unknown) => {
      if (error instanceof Error && /^-101\b/.test(error.message)) return false;
      throw error;
    },
  );
}

describe('ZooKeeper semaphores', () => {
  it('keeps its nodes under /semaphores, apart from the lock, with the count in the name; the idle node goes', async () => {
    const backend = ns.backend();
    const locker = ns.track(createLocker(backend, { ttlMs: 10_000 }));
    const key = 'layout.k';
    const lease = await locker.acquire(key);
    const permits = await Promise.all([
      locker.semaphore(key, { permits: 2 }).acquire(),
      locker.semaphore(key, { permits: 2 }).acquire(),
    ]);
    const dir = backend.semaphoreDirOf(key);
    expect(dir).toBe(`/${ns.namespace}/semaphores/layout%2Ek`);
    expect(backend.dirOf(key)).toBe(`/${ns.namespace}/locks/layout%2Ek`);
    const nodes = await permitNodes(dir);
    expect(nodes.map((n) => [n.owner, n.permits, n.czxid])).toEqual(
      [...permits]
        .sort((a, b) => (a.fencingToken < b.fencingToken ? -1 : 1))
        .map((p) => [p.owner, 2, p.fencingToken]),
    );
    expect((await children(ns.admin, backend.dirOf(key))).length).toBe(1);
    for (const permit of permits) expect(await permit.release()).toBe('released');
    expect(await lease.release()).toBe('released');
    // The semaphore's node is a container: the leader deletes it once empty.
    await untilContainerDeleted(dir);
    expect(await exists(`/${ns.namespace}/semaphores`)).toBe(true);
  });

  it('no herd: a release wakes the first waiter only, and its grant the next one', async () => {
    const key = 'herd';
    const permits = 3;
    const holderLocker = ns.locker({ ttlMs: 30_000 });
    const holders: Lease[] = [];
    for (let i = 0; i < permits; i++) {
      holders.push(await holderLocker.semaphore(key, { permits }).acquire());
    }
    const dir = ns.backend().semaphoreDirOf(key);
    const waiters: { requests: Requests; granted: Promise<Lease> }[] = [];
    for (let i = 0; i < 6; i++) {
      const { locker, requests } = recordingLocker();
      const granted = locker.semaphore(key, { permits }).acquire({ waitMs: 60_000 });
      // Awaited below; a failed assertion before that must not leave an unhandled rejection.
      granted.catch(() => undefined);
      waiters.push({ requests, granted });
      await waitForNodes(dir, permits + i + 1);
      await waitUntil(() => requests.watched.length > 0, `waiter ${i} watches`);
    }
    const line = await permitNodes(dir);
    const paths = line.map((n) => n.path);
    expect(line.slice(0, permits).map((n) => n.czxid)).toEqual(holders.map((h) => h.fencingToken));
    // The first waiter watches the three holders; every later one its predecessor only.
    expect(waiters.map((w) => w.requests.watched)).toEqual([
      paths.slice(0, 3),
      [paths[3]],
      [paths[4]],
      [paths[5]],
      [paths[6]],
      [paths[7]],
    ]);
    expect(waiters.map((w) => w.requests.attempts)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(waiters.flatMap((w) => w.requests.written)).toEqual([]);

    expect(await holders[0]!.release()).toBe('released');
    const first = await waiters[0]!.granted;
    expect(first.fencingToken).toBe(line[3]!.czxid);
    // The next waiter counts again (its predecessor was written) and watches the holders now.
    await waitUntil(() => waiters[1]!.requests.watched.length === 4, 'the next waiter rewatches');
    await sleep(300);
    expect(waiters.map((w) => w.requests.attempts)).toEqual([2, 2, 1, 1, 1, 1]);
    expect(waiters[0]!.requests.written).toEqual([paths[3]]);
    expect(waiters[1]!.requests.watched).toEqual([paths[3], paths[1], paths[2], paths[3]]);
    expect(waiters.slice(2).map((w) => w.requests.watched)).toEqual([
      [paths[4]],
      [paths[5]],
      [paths[6]],
      [paths[7]],
    ]);

    // The rest pass in line order, each its own permit and a larger token.
    const rest = [holders[1]!, holders[2]!, first];
    for (const lease of rest) expect(await lease.release()).toBe('released');
    const granted: Lease[] = [];
    for (const waiter of waiters.slice(1)) {
      const lease = await waiter.granted;
      granted.push(lease);
      expect(await lease.release()).toBe('released');
    }
    expect(granted.map((l) => l.fencingToken)).toEqual(line.slice(4).map((n) => n.czxid));
    expect(await children(ns.admin, dir)).toEqual([]);
  }, 60_000);

  it('N holders released at once let the N waiters in, in line order', async () => {
    const key = 'all-at-once';
    const permits = 3;
    const holderLocker = ns.locker({ ttlMs: 30_000 });
    const semaphore = holderLocker.semaphore(key, { permits });
    const holders = [
      await semaphore.acquire(),
      await semaphore.acquire(),
      await semaphore.acquire(),
    ];
    const dir = ns.backend().semaphoreDirOf(key);
    const order: number[] = [];
    const granted: Promise<Lease>[] = [];
    for (let i = 0; i < permits; i++) {
      const locker = ns.locker({ ttlMs: 30_000 });
      granted.push(
        locker
          .semaphore(key, { permits })
          .acquire({ waitMs: 20_000 })
          .then((lease) => {
            order.push(i);
            return lease;
          }),
      );
      await waitForNodes(dir, permits + i + 1);
    }
    await sleep(100);
    const releasedAt = performance.now();
    await Promise.all(holders.map((h) => h.release()));
    const leases = await Promise.all(granted);
    expect(performance.now() - releasedAt).toBeLessThan(1_000);
    expect(leases.every((l) => l.isHeld)).toBe(true);
    expect(order).toEqual([0, 1, 2]);
    for (const lease of leases) expect(await lease.release()).toBe('released');
  });

  it('a waiter whose predecessor was granted before its watch was set counts again at once', async () => {
    // permits 2: H1 and H2 hold, P is the first waiter, W watches P. H1 goes: P is granted and
    // writes its node; W's watch on P is set only after that write (held by the test), so it
    // never fires for it. W must see the write in the watch's stat, count again and, now the
    // first waiter, watch H2 too: else H2's release would not wake it (until the 30 s recheck).
    const key = 'late-watch';
    const permits = 2;
    const holderLocker = ns.locker({ ttlMs: 30_000 });
    const semaphore = holderLocker.semaphore(key, { permits });
    const [h1, h2] = [await semaphore.acquire(), await semaphore.acquire()];
    const dir = ns.backend().semaphoreDirOf(key);
    const p = ns.locker({ ttlMs: 30_000 }).semaphore(key, { permits }).acquire({ waitMs: 20_000 });
    await waitForNodes(dir, 3);
    const [, , pNode] = await permitNodes(dir);
    const held = gate((path) => path === pNode!.path);
    const w = recordingLocker({ watch: held });
    const wGranted = w.locker.semaphore(key, { permits }).acquire({ waitMs: 5_000 });
    wGranted.catch(() => undefined);
    await held.reached;

    expect(await h1.release()).toBe('released');
    const pLease = await p;
    expect(pLease.fencingToken).toBe(pNode!.czxid);
    held.open();
    await waitUntil(() => w.requests.attempts === 2, 'W counts again');
    await waitUntil(() => w.requests.watched.length === 2, 'W watches H2');
    const h2Path = (await permitNodes(dir)).find((n) => n.czxid === h2.fencingToken)!.path;
    expect(w.requests.watched).toEqual([pNode!.path, h2Path]);

    const releasedAt = performance.now();
    expect(await h2.release()).toBe('released');
    const wLease = await wGranted;
    expect(performance.now() - releasedAt).toBeLessThan(1_000);
    expect(w.requests.attempts).toBe(3);
    expect(await wLease.release()).toBe('released');
    expect(await pLease.release()).toBe('released');
  });

  it('another count is refused without a write when the line shows it', async () => {
    const key = 'mismatch-read';
    const holder = await ns.locker({ ttlMs: 30_000 }).semaphore(key, { permits: 2 }).acquire();
    const { locker, requests } = recordingLocker();
    const refused = await locker
      .semaphore(key, { permits: 3 })
      .acquire({ waitMs: 2_000 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PermitsMismatchError);
    expect(refused).toMatchObject({ key, requested: 3, inUse: 2 });
    expect(requests.created).toEqual([]);
    expect(requests.written).toEqual([]);
    const second = await locker.semaphore(key, { permits: 2 }).tryAcquire();
    expect(second?.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await second!.release()).toBe('released');
    expect(await holder.release()).toBe('released');
  });

  it('a single attempt on a full semaphore writes nothing', async () => {
    const key = 'try-full';
    const holder = await ns.locker({ ttlMs: 30_000 }).semaphore(key, { permits: 1 }).acquire();
    const { locker, requests } = recordingLocker();
    expect(await locker.semaphore(key, { permits: 1 }).tryAcquire()).toBeNull();
    expect(requests.created).toEqual([]);
    expect(await holder.release()).toBe('released');
    const next = await locker.semaphore(key, { permits: 1 }).tryAcquire();
    expect(next?.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(requests.created).toEqual([`${ns.backend().semaphoreDirOf(key)}/_c_${next!.owner}-p1-`]);
    expect(await next!.release()).toBe('released');
  });

  it('another count that arrives between the read and the create: the node is deleted before the error', async () => {
    const key = 'mismatch-race';
    const dir = ns.backend().semaphoreDirOf(key);
    const foreignOwner = 'f'.repeat(32);
    // As the contender's create goes out (after its read of the line found it empty), another
    // user's contender (count 5, in the admin's session) gets in first, making the semaphore's
    // node (a container) as that user's attempt would.
    let armed = true;
    const { backend, requests } = recordingBackend({
      beforeCreate: (path) => {
        if (!armed || !path.startsWith(`${dir}/_c_`)) return undefined;
        armed = false;
        return (async () => {
          await ns.admin.create(dir, '', CREATE_MODE.container);
          await ns.admin.create(
            `${dir}/_c_${foreignOwner}-p5-`,
            '',
            CREATE_MODE.ephemeralSequential,
          );
        })();
      },
    });
    // An earlier semaphore of the key came and went: the leader deleted its emptied container
    // (CI run of 3fe1ebb: deleted at a random moment, between the read and the other user's
    // create, which then found no node).
    const first = await ns.locker().semaphore(key, { permits: 5 }).acquire();
    expect(await first.release()).toBe('released');
    await untilContainerDeleted(dir);
    const locker = ns.track(createLocker(backend, { ttlMs: 30_000 }));
    let deletedBeforeError: string[] = [];
    const refused = await locker
      .semaphore(key, { permits: 2 })
      .acquire({ waitMs: 2_000 })
      .catch((e: unknown) => {
        deletedBeforeError = [...requests.deleted];
        return e;
      });
    expect(refused).toBeInstanceOf(PermitsMismatchError);
    expect(refused).toMatchObject({ key, requested: 2, inUse: 5 });
    expect(armed).toBe(false);
    // Its node was made, and deleted before the error came (not by the withdrawal after it):
    // only the other user's is left.
    const made = requests.created.filter((path) => path.startsWith(`${dir}/_c_`));
    expect(made).toHaveLength(1);
    expect(deletedBeforeError).toHaveLength(1);
    expect(deletedBeforeError[0]!.startsWith(made[0]!)).toBe(true);
    expect((await permitNodes(dir)).map((n) => n.owner)).toEqual([foreignOwner]);
  });

  it('owner-addressed permits live in the granting locker: it renews them; any locker releases by name and token', async () => {
    // As for locks (docs/sidecar.md, "Stores and several sidecars"): the node is in the granting
    // locker's session and its TTL is kept by that process, so only it can renew the permit.
    const [a, b] = [ns.locker(), ns.locker()];
    const key = 'owner-addressed';
    const [first, second] = ['a'.repeat(32), 'b'.repeat(32)];
    const options = { ttlMs: 10_000, permits: 2 } as const;
    const one = await a.acquireForOwner(key, first, options);
    expect(one).toMatchObject({ key, owner: first, permits: 2 });
    expect((await a.acquireForOwner(key, first, options)).fencingToken).toBe(one.fencingToken);
    const two = await b.tryAcquireForOwner(key, second, options);
    expect(two?.fencingToken).toBeGreaterThan(one.fencingToken);
    expect(await b.tryAcquireForOwner(key, 'c'.repeat(32), options)).toBeNull();
    const ref = { key, owner: first, fencingToken: one.fencingToken, permits: 2 };
    expect(await b.renewForOwner(ref, 10_000)).toEqual({ outcome: 'not-owner' });
    expect(await a.renewForOwner(ref, 10_000)).toMatchObject({ outcome: 'renewed' });
    expect(await b.releaseForOwner(ref)).toBe('released');
    expect(await b.releaseForOwner(ref)).toBe('not-owner');
    const secondRef = { key, owner: second, fencingToken: two!.fencingToken, permits: 2 };
    expect(await a.releaseForOwner(secondRef)).toBe('released');
    expect(await a.releaseForOwner(secondRef)).toBe('not-held');
  });

  it("a holder's closed session lets the first waiter in at once", async () => {
    const key = 'session-end';
    const holderBackend = ns.backend();
    const holder = await ns
      .track(createLocker(holderBackend, { ttlMs: 30_000 }))
      .semaphore(key, { permits: 1 })
      .acquire();
    const waiting = ns.locker({ ttlMs: 30_000 }).semaphore(key, { permits: 1 }).acquire({
      waitMs: 20_000,
    });
    await waitForNodes(holderBackend.semaphoreDirOf(key), 2);
    const closedAt = performance.now();
    await holderBackend.close();
    // Closed: the server deletes the holder's node at once (not at its 30 s session timeout).
    const next = await waiting;
    expect(performance.now() - closedAt).toBeLessThan(2_000);
    expect(next.fencingToken).toBeGreaterThan(holder.fencingToken);
    expect(await next.release()).toBe('released');
  });
});
