/**
 * Semaphores on etcd, read behind fencelock's back with a test-only client: what a permit stores
 * (a key under the semaphore's own folder, bound to the session's lease, valued with the permit
 * count), what a refused or single attempt writes (nothing), keys of another shape in the folder
 * (ignored), and waiting without a herd: the first waiter watches the folder and is granted by a
 * holder's deletion with no further attempt, later waiters each watch their predecessor only, and
 * a release wakes the waiter it lets in and the one that moves up, nobody behind them.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  createLocker,
  type Lease,
  type Locker,
  PermitsMismatchError,
} from '../../../packages/fencelock/src/index.js';
import {
  instrumentedClient,
  type RequestEvent,
  sleep,
  useNamespace,
  waitForCount,
} from './support.js';

const fixture = useNamespace('semaphore');
const clients: Etcd3[] = [];
const ownLockers: Locker[] = [];

afterAll(async () => {
  await Promise.allSettled(ownLockers.map((l) => l.close()));
  for (const client of clients) client.close();
});

/** The keys under `dir` with their values, oldest first. */
async function keysUnder(dir: string): Promise<IKeyValue[]> {
  return (await fixture.admin.getAll().prefix(dir).sort('Create', 'Ascend').exec()).kvs;
}

/** Every event under `dir` while `run` runs (replayed by a watch from the revision before it). */
async function eventsDuring(dir: string, run: () => Promise<unknown>): Promise<string[]> {
  const before = BigInt((await fixture.admin.getAll().prefix(dir).exec()).header.revision);
  await run();
  // A marker written after `run` ends the replay.
  const marker = `${fixture.namespace}/marker`;
  await fixture.admin.put(marker).value('after');
  const watcher = await fixture.admin
    .watch()
    .prefix(`${fixture.namespace}/`)
    .startRevision(String(before + 1n))
    .create();
  const events: string[] = [];
  await new Promise<void>((resolve) => {
    const on = (type: 'put' | 'delete') => (kv: IKeyValue) => {
      const key = kv.key.toString();
      if (key === marker) resolve();
      else if (key.startsWith(dir)) events.push(`${type} ${key.slice(dir.length)}`);
    };
    watcher.on('put', on('put'));
    watcher.on('delete', on('delete'));
  });
  await watcher.cancel();
  return events;
}

/** A locker on its own instrumented client: its requests are logged as `waiter`'s. */
function instrumentedLocker(
  waiter: number,
  log: RequestEvent[],
): { locker: Locker; peak: () => number; watched: string[]; attempts: () => number } {
  const { client, peak, watched } = instrumentedClient(waiter, log);
  clients.push(client);
  const backend = createEtcdBackend({ client, namespace: fixture.namespace });
  let attempts = 0;
  const attempt = backend.attempt.bind(backend);
  backend.attempt = (request) => {
    attempts += 1;
    return attempt(request);
  };
  const locker = createLocker(backend, { ttlMs: 30_000 });
  ownLockers.push(locker);
  return { locker, peak, watched, attempts: () => attempts };
}

describe('etcd semaphore: what is stored', () => {
  it('a permit is a key under the semaphore folder, valued with the count, apart from the lock', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const key = 'stored:report';
    const semDir = backend.semaphoreDirOf(key);
    expect(semDir).toBe(`${fixture.namespace}/semaphores/${encodeURIComponent(key)}/`);
    expect(backend.dirOf(key)).toBe(`${fixture.namespace}/locks/${encodeURIComponent(key)}/`);

    const lock = await locker.acquire(key);
    const permit = await locker.semaphore(key, { permits: 2 }).acquire();
    const [stored] = await keysUnder(semDir);
    expect(stored?.key.toString()).toMatch(new RegExp(`^${semDir}p-[0-9a-f]+-${permit.owner}$`));
    expect(stored?.value.toString()).toBe('2');
    expect(stored?.lease).not.toBe('0');
    expect(BigInt(stored!.create_revision)).toBe(permit.fencingToken);
    expect((await keysUnder(semDir)).length).toBe(1);
    expect((await keysUnder(backend.dirOf(key))).map((kv) => kv.value.toString())).toEqual([
      // A lock's key is written with its mode.
      'write',
    ]);

    expect(await permit.release()).toBe('released');
    expect(await lock.release()).toBe('released');
    expect(await keysUnder(semDir)).toEqual([]);
    expect(await keysUnder(backend.dirOf(key))).toEqual([]);
  });

  it('a permit without the watchdog moves to a lease of its own and keeps its count', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const key = 'stored:own-lease';
    const semaphore = locker.semaphore(key, { permits: 2 });
    const renewed = await semaphore.acquire();
    const single = await semaphore.acquire({ autoRenew: false });
    const [first, second] = await keysUnder(backend.semaphoreDirOf(key));
    expect(BigInt(second!.create_revision)).toBe(single.fencingToken);
    expect(second!.value.toString()).toBe('2');
    expect(second!.lease).not.toBe(first!.lease);
    // Its count still answers for the line.
    const refused = await fixture
      .locker()
      .semaphore(key, { permits: 3 })
      .tryAcquire({ ttlMs: 10_000 })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(PermitsMismatchError);
    expect(refused).toMatchObject({ requested: 3, inUse: 2 });
    expect(await single.release()).toBe('released');
    expect(await renewed.release()).toBe('released');
  });
});

describe('etcd semaphore: attempts that write nothing', () => {
  it('a mismatched count writes nothing, while holders and waiters are there', async () => {
    const key = 'nothing:mismatch';
    const [a, b, c] = [fixture.locker(), fixture.locker(), fixture.locker()];
    const dir = ((await a.backend()) as EtcdBackend).semaphoreDirOf(key);
    const held = await a.semaphore(key, { permits: 1 }).acquire({ ttlMs: 10_000 });
    const waiting = b.semaphore(key, { permits: 1 }).acquire({ ttlMs: 10_000, waitMs: 20_000 });
    await waitForCount(fixture.admin, dir, 2);
    const other = c.semaphore(key, { permits: 4 });
    const events = await eventsDuring(dir, async () => {
      for (const attempt of [() => other.tryAcquire(), () => other.acquire({ waitMs: 2_000 })]) {
        const refused = await attempt().catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(PermitsMismatchError);
        expect(refused).toMatchObject({ key, requested: 4, inUse: 1 });
      }
    });
    expect(events).toEqual([]);
    expect(await held.release()).toBe('released');
    expect(await (await waiting).release()).toBe('released');
  });

  it('tryAcquire on a semaphore with every permit held writes nothing', async () => {
    const key = 'nothing:full';
    const [a, b] = [fixture.locker(), fixture.locker()];
    const dir = ((await a.backend()) as EtcdBackend).semaphoreDirOf(key);
    const held = await Promise.all(
      [1, 2].map(() => a.semaphore(key, { permits: 2 }).acquire({ ttlMs: 10_000 })),
    );
    const events = await eventsDuring(dir, async () => {
      expect(await b.semaphore(key, { permits: 2 }).tryAcquire({ ttlMs: 10_000 })).toBeNull();
    });
    expect(events).toEqual([]);
    for (const permit of held) expect(await permit.release()).toBe('released');
  });

  it('keys of another shape under the folder neither hold, wait nor count', async () => {
    const key = 'nothing:foreign';
    const a = fixture.locker();
    const dir = ((await a.backend()) as EtcdBackend).semaphoreDirOf(key);
    const owner = 'ab'.repeat(16);
    await fixture.admin.put(`${dir}notes`).value('9');
    await fixture.admin.put(`${dir}p-1f-${owner}`).value('9'); // a contender's name, no lease
    const semaphore = a.semaphore(key, { permits: 1 });
    const permit = await semaphore.tryAcquire({ ttlMs: 10_000 });
    expect(permit).not.toBeNull();
    expect(await semaphore.tryAcquire({ ttlMs: 10_000 })).toBeNull();
    expect(await permit!.release()).toBe('released');
    // A waiter joins past them too (its first put's compare sees keys of another value).
    const again = await semaphore.acquire({ ttlMs: 10_000, waitMs: 5_000 });
    expect(await again.release()).toBe('released');
    expect((await keysUnder(dir)).map((kv) => kv.key.toString().slice(dir.length))).toEqual([
      'notes',
      `p-1f-${owner}`,
    ]);
  });
});

describe('etcd semaphore: waiting without a herd', () => {
  it('2 permits, 6 waiters: a release wakes the waiter it lets in and the next; nobody else asks', async () => {
    const key = 'herd:pool';
    const holderLocker = fixture.locker({ ttlMs: 30_000 });
    const dir = ((await holderLocker.backend()) as EtcdBackend).semaphoreDirOf(key);
    const holders = [
      await holderLocker.semaphore(key, { permits: 2 }).acquire(),
      await holderLocker.semaphore(key, { permits: 2 }).acquire(),
    ];
    const log: RequestEvent[] = [];
    const waiters = Array.from({ length: 6 }, (_, i) => instrumentedLocker(i, log));
    const granted: Lease[] = [];
    const order: number[] = [];
    const done: Promise<void>[] = [];
    for (const [i, waiter] of waiters.entries()) {
      done.push(
        waiter.locker
          .semaphore(key, { permits: 2 })
          .acquire({ waitMs: 60_000 })
          .then((permit) => {
            order.push(i);
            granted[i] = permit;
          }),
      );
      await waitForCount(fixture.admin, dir, holders.length + i + 1);
    }
    const line = (await keysUnder(dir)).map((kv) => kv.key.toString());
    // Wait until every waiter watches (the last one's watch is created after its answer).
    for (let tries = 0; waiters.some((w) => w.watched.length === 0) && tries < 500; tries++) {
      await sleep(10);
    }
    // The first waiter watches the folder; each later one its predecessor's key only.
    expect(waiters.map((w) => w.watched)).toEqual([
      [dir],
      ...line.slice(2, 7).map((predecessor) => [predecessor]),
    ]);

    const releasedAt = performance.now();
    expect(await holders[0]!.release()).toBe('released');
    await done[0];
    // Waiter 1 is woken by waiter 0's announcement and moves up to the folder watch.
    for (let tries = 0; waiters[1]!.watched.length < 2 && tries < 500; tries++) await sleep(10);
    expect(waiters[1]!.watched).toEqual([line[2], dir]);
    await sleep(300);
    const askedAfterRelease = new Set(log.filter((e) => e.at >= releasedAt).map((e) => e.waiter));
    expect([...askedAfterRelease].sort()).toEqual([0, 1]);
    // The first waiter's grant came with the deletion event: one attempt in all.
    expect(waiters[0]!.attempts()).toBe(1);
    expect(order).toEqual([0]);

    // The rest go through.
    expect(await holders[1]!.release()).toBe('released');
    for (let i = 0; i < waiters.length; i++) {
      await done[i];
      expect(await granted[i]!.release()).toBe('released');
    }
    await Promise.all(done);
    // Arrival order, but two permits can be granted at once, and the two acquires then resolve
    // in either order: nobody is granted before a waiter more than one place ahead of it.
    expect([...order].sort()).toEqual([0, 1, 2, 3, 4, 5]);
    expect(order.filter((waiter, place) => waiter > place + 1)).toEqual([]);
    // Each waiter made at most two watches: its predecessor's key, then (once it moved up to
    // first waiter) the folder. The first's cancel may still be in flight when the second is
    // made, so at most two are attached at once.
    for (const [i, waiter] of waiters.entries()) {
      expect(waiter.watched[0]).toBe(i === 0 ? dir : line[i + 1]);
      expect(waiter.watched.slice(1)).toEqual(i === 0 ? [] : waiter.watched.slice(1, 2));
      expect(waiter.watched.slice(1).every((watched) => watched === dir)).toBe(true);
      expect(waiter.peak()).toBeLessThanOrEqual(2);
    }
    const tokens = granted.map((permit) => permit.fencingToken);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    expect(await keysUnder(dir)).toEqual([]);
  });

  it('3 permits freed at once let the first 3 waiters in, and only them', async () => {
    const key = 'herd:burst';
    const holderLocker = fixture.locker({ ttlMs: 30_000 });
    const dir = ((await holderLocker.backend()) as EtcdBackend).semaphoreDirOf(key);
    const semaphore = holderLocker.semaphore(key, { permits: 3 });
    const holders = [
      await semaphore.acquire(),
      await semaphore.acquire(),
      await semaphore.acquire(),
    ];
    const granted: number[] = [];
    const permits: Lease[] = [];
    const done: Promise<void>[] = [];
    for (let i = 0; i < 5; i++) {
      const locker = fixture.locker({ ttlMs: 30_000 });
      done.push(
        locker
          .semaphore(key, { permits: 3 })
          .acquire({ waitMs: 60_000 })
          .then((permit) => {
            granted.push(i);
            permits[i] = permit;
          }),
      );
      await waitForCount(fixture.admin, dir, 3 + i + 1);
    }
    await sleep(200);
    const startedAt = performance.now();
    await Promise.all(holders.map((permit) => permit.release()));
    await Promise.all(done.slice(0, 3));
    const letInMs = performance.now() - startedAt;
    await sleep(300);
    expect([...granted].sort()).toEqual([0, 1, 2]);
    // Far under the 30 s recheck: each was woken, not polling.
    expect(letInMs).toBeLessThan(5_000);
    for (const i of [0, 1, 2]) expect(await permits[i]!.release()).toBe('released');
    await Promise.all(done);
    expect(granted).toEqual(expect.arrayContaining([3, 4]));
    for (const i of [3, 4]) expect(await permits[i]!.release()).toBe('released');
  });
});
