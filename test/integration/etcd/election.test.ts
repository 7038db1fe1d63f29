/**
 * Leader elections on etcd, read behind fencelock's back with a test-only client: what a
 * candidate stores (a key under the election's own folder, bound to its session's lease, valued
 * with the candidate's value, its create revision the term), that the lock and the semaphore of
 * the same key are untouched and `list` leaves the election out, that a repeated attempt (a lost
 * reply) keeps the candidate's key and term, that a proclaim is a compare-and-set on the term
 * which keeps the key's lease and that a move to another lease keeps a proclaimed value, a
 * leader whose session is revoked followed at once by the next candidate (and the observer seeing
 * it), terms above every earlier revision across a compaction, and the election watch: what it
 * notifies, nothing after `stop()`, no watcher left after `stop()` or `close()`, and a watch etcd
 * cancels (its resume revision compacted) armed again.
 */
import { randomBytes } from 'node:crypto';
import { Etcd3, type IKeyValue } from 'etcd3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import {
  type AttemptRequest,
  createLocker,
  type ElectionLeader,
  type LeaseRef,
  type Locker,
} from '../../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS } from '../../helpers/engines.js';
import { sleep, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('election');
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

/** Names (after `dir`), create and mod revisions of the keys under `dir`. */
async function snapshot(dir: string): Promise<string[]> {
  return (await keysUnder(dir)).map(
    (kv) => `${kv.key.toString().slice(dir.length)}@${kv.create_revision}/${kv.mod_revision}`,
  );
}

/** Poll until `test()` holds; throws after `timeoutMs`. */
async function until(test: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await test())) {
    if (performance.now() > deadline) throw new Error(`not within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/** The etcd3 watch internals the watch tests read and cut (plain JS properties at runtime). */
interface WatchInternals {
  watchManager: {
    watchers: unknown[];
    attach: (watcher: unknown) => void;
    establishStream: () => void;
    handleError: (error: Error) => void;
  };
}

/** A client of the test's own, and an etcd backend over it (the test closes the client). */
function ownBackend(): { client: Etcd3; backend: EtcdBackend; watchers: () => number } {
  const client = new Etcd3({ hosts: [...ETCD_ENDPOINTS], dialTimeout: 5000 });
  clients.push(client);
  const backend = createEtcdBackend({ client, namespace: fixture.namespace });
  const { watchManager } = client as unknown as WatchInternals;
  return { client, backend, watchers: () => watchManager.watchers.length };
}

function candidateRequest(key: string, value: string, owner: string): AttemptRequest {
  return {
    key,
    owner,
    ttlMs: 10_000,
    mode: 'write',
    autoRenew: true,
    willWait: true,
    election: { value },
  };
}

describe('etcd: leader elections', () => {
  it('a candidate key per candidate under the election folder, valued with its value; the lock and semaphore of the key untouched', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const other = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const name = 'layout:a';
    const dir = backend.electionDirOf(name);
    const lock = await other.acquire(name);
    const permit = await other.semaphore(name, { permits: 2 }).acquire();
    const lockBefore = await snapshot(backend.dirOf(name));
    const semaphoreBefore = await snapshot(backend.semaphoreDirOf(name));

    const leading = await locker.election(name).campaign('host-1:80');
    const waiting = other.election(name).campaign('host-2:80');
    waiting.catch(() => undefined);
    await waitForCount(fixture.admin, dir, 2);
    const [first, second] = await keysUnder(dir);
    expect(first!.key.toString()).toMatch(new RegExp(`^${dir}c-[0-9a-f]{1,16}-${leading.owner}$`));
    expect(second!.key.toString()).toMatch(new RegExp(`^${dir}c-[0-9a-f]{1,16}-[0-9a-f]{32,}$`));
    expect(first!.value.toString()).toBe('host-1:80');
    expect(second!.value.toString()).toBe('host-2:80');
    expect(BigInt(first!.create_revision)).toBe(leading.term);
    expect(first!.lease).not.toBe('0');
    // The waiting candidate is not the leader.
    expect(await other.election(name).leader()).toMatchObject({
      owner: leading.owner,
      term: leading.term,
      value: 'host-1:80',
    });

    await leading.proclaim('host-1:81');
    const [proclaimed] = await keysUnder(dir);
    expect(proclaimed!.value.toString()).toBe('host-1:81');
    expect(proclaimed!.create_revision).toBe(first!.create_revision);
    expect(proclaimed!.lease).toBe(first!.lease);

    // `list` reports the lock and the semaphore of the key, not the election.
    const listed: [string, string][] = [];
    for await (const entry of locker.list({ prefix: 'layout:' }))
      listed.push([entry.key, entry.mode]);
    expect(listed).toEqual([
      [name, 'write'],
      [name, 'permits'],
    ]);

    expect(await leading.resign()).toBe('released');
    const next = await waiting;
    expect(next.term).toBe(BigInt(second!.create_revision));
    expect(next.value).toBe('host-2:80');
    expect(await snapshot(backend.dirOf(name))).toEqual(lockBefore);
    expect(await snapshot(backend.semaphoreDirOf(name))).toEqual(semaphoreBefore);
    await next.resign();
    expect(await keysUnder(dir)).toEqual([]);
    await lock.release();
    await permit.release();
  });

  it('a lost reply is safe: a repeated attempt keeps the candidate key, its term and its place', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const name = 'repeat:a';
    const dir = backend.electionDirOf(name);
    const owner = randomBytes(16).toString('hex');
    const first = await backend.attempt(candidateRequest(name, 'v', owner));
    const again = await backend.attempt(candidateRequest(name, 'v', owner));
    expect(first.granted && again.granted).toBe(true);
    if (!first.granted || !again.granted) return;
    expect(again.token).toBe(first.token);
    expect((await keysUnder(dir)).length).toBe(1);

    // A waiting candidate asked twice keeps one key and its place in line.
    const waiter = randomBytes(16).toString('hex');
    const waiting = await backend.attempt(candidateRequest(name, 'w', waiter));
    const waitingAgain = await backend.attempt(candidateRequest(name, 'w', waiter));
    expect(waiting.granted || waitingAgain.granted).toBe(false);
    const keys = await keysUnder(dir);
    expect(keys.length).toBe(2);
    expect(keys[1]!.key.toString().endsWith(waiter)).toBe(true);

    await backend.abandon(candidateRequest(name, 'w', waiter));
    const lease: LeaseRef = { key: name, owner, fencingToken: first.token, election: true };
    expect(await backend.release(lease)).toBe('released');
    expect(await keysUnder(dir)).toEqual([]);
  });

  it('proclaim compares the term, keeps the lease of a grant without the watchdog, and a move to another lease keeps the proclaimed value', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as EtcdBackend;
    const elsewhere = (await fixture.locker().backend()) as EtcdBackend;
    const name = 'proclaim:a';
    const dir = backend.electionDirOf(name);
    const leading = await locker.election(name).campaign('v1', { ttlMs: 10_000, autoRenew: false });
    const [granted] = await keysUnder(dir);
    const lease: LeaseRef = {
      key: name,
      owner: leading.owner,
      fencingToken: leading.term,
      election: true,
    };

    // Another process's proclaim (the holder's backend does not know the new value).
    expect(await elsewhere.proclaim!(lease, 'v2')).toBe('proclaimed');
    const [proclaimed] = await keysUnder(dir);
    expect(proclaimed!.value.toString()).toBe('v2');
    expect(proclaimed!.lease).toBe(granted!.lease);
    expect(proclaimed!.create_revision).toBe(granted!.create_revision);

    // A wrong term stores nothing.
    expect(await elsewhere.proclaim!({ ...lease, fencingToken: leading.term - 1n }, 'old')).toBe(
      'not-owner',
    );
    expect((await keysUnder(dir))[0]!.value.toString()).toBe('v2');

    // A renewal to another TTL moves the key to a lease of that TTL, keeping the engine's value.
    const renewed = await backend.renew(lease, 20_000);
    expect(renewed.ok).toBe(true);
    const [moved] = await keysUnder(dir);
    expect(moved!.lease).not.toBe(granted!.lease);
    expect(moved!.create_revision).toBe(granted!.create_revision);
    expect(moved!.value.toString()).toBe('v2');

    expect(await backend.release(lease)).toBe('released');
    expect(await elsewhere.proclaim!(lease, 'v3')).toBe('not-held');
  });

  it('a leader whose session is revoked: the next candidate leads at once and the observer sees it', async () => {
    const a = fixture.locker({ ttlMs: 30_000 });
    const b = fixture.locker({ ttlMs: 30_000 });
    const watcher = fixture.locker();
    const backend = (await a.backend()) as EtcdBackend;
    const name = 'revoked:a';
    const leading = await a.election(name).campaign('a');
    const next = b.election(name).campaign('b');
    next.catch(() => undefined);
    await waitForCount(fixture.admin, backend.electionDirOf(name), 2);
    const seen: (ElectionLeader | null)[] = [];
    const stop = new AbortController();
    const observing = (async () => {
      for await (const leader of watcher.election(name).observe({ signal: stop.signal })) {
        seen.push(leader);
      }
    })();
    await until(() => seen.some((l) => l?.value === 'a'));

    const [key] = await keysUnder(backend.electionDirOf(name));
    const revokedAt = performance.now();
    await fixture.admin.leaseClient.leaseRevoke({ ID: key!.lease });
    const leader = await next;
    // Far less than the 30 s TTL: the deletion of the key woke the next candidate.
    expect(performance.now() - revokedAt).toBeLessThan(5_000);
    expect(leader.term).toBeGreaterThan(leading.term);
    await until(() => seen.some((l) => l?.value === 'b'), 5_000);
    await until(() => leading.signal.aborted, 15_000);
    stop.abort();
    await observing;
    const values = seen.map((l) => l?.value ?? null);
    expect(values.filter((v) => v !== null)).toEqual(['a', 'b']);
    expect(seen.find((l) => l?.value === 'b')).toMatchObject({
      owner: leader.owner,
      term: leader.term,
    });
    await leader.resign();
  }, 30_000);

  it('terms stay above every earlier revision, also across a compaction', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const name = 'terms:a';
    const first = await locker.election(name).campaign('a');
    await first.resign();
    const marker = await fixture.admin.put(`${fixture.namespace}/marker`).value('terms');
    await fixture.admin.kv.compact({ revision: marker.header.revision, physical: true });
    const second = await locker.election(name).campaign('b');
    expect(second.term).toBeGreaterThan(first.term);
    expect(second.term).toBeGreaterThan(BigInt(marker.header.revision));
    await second.resign();
  });
});

describe('etcd: the election watch', () => {
  it('notifies a campaign, a proclaim and a resign; nothing after stop(); no watcher left after stop() or close()', async () => {
    const { backend, watchers } = ownBackend();
    const candidates = fixture.locker({ ttlMs: 10_000 });
    const name = 'watch:a';
    let calls = 0;
    const watch = await backend.watchElection!(name, () => {
      calls += 1;
    });
    expect(watch.recheckAfterMs).toBe(30_000);
    expect(watchers()).toBe(1);

    const leading = await candidates.election(name).campaign('a');
    await until(() => calls >= 1);
    let before = calls;
    await leading.proclaim('b');
    await until(() => calls > before);
    before = calls;
    await leading.resign();
    await until(() => calls > before);

    watch.stop();
    watch.stop();
    await until(() => watchers() === 0);
    before = calls;
    const again = await candidates.election(name).campaign('c');
    await again.resign();
    await sleep(300);
    expect(calls).toBe(before);

    // close() stops the watches still armed.
    await backend.watchElection!(name, () => {
      calls += 1;
    });
    expect(watchers()).toBe(1);
    await backend.close();
    await until(() => watchers() === 0);
    await expect(backend.watchElection!(name, () => undefined)).rejects.toMatchObject({
      name: 'BackendError',
    });
  });

  it('a watch etcd cancels (its resume revision compacted away) is armed again and notifies', async () => {
    const { client, backend, watchers } = ownBackend();
    const candidates = fixture.locker({ ttlMs: 10_000 });
    const name = 'watch:compacted';
    let calls = 0;
    const watch = await backend.watchElection!(name, () => {
      calls += 1;
    });
    const leading = await candidates.election(name).campaign('a');
    await until(() => calls >= 1);

    // Cut the watch stream and hold its reconnect while the history it would resume from is
    // written over and compacted: etcd then cancels the resumed watch.
    const { watchManager } = client as unknown as WatchInternals;
    const establish = watchManager.establishStream;
    let reopen: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      reopen = resolve;
    });
    watchManager.establishStream = () => {
      void held.then(() => establish.call(watchManager));
    };
    watchManager.handleError(new Error('stream cut by the test'));
    await leading.proclaim('b');
    const marker = await fixture.admin.put(`${fixture.namespace}/marker`).value('watch');
    await fixture.admin.kv.compact({ revision: marker.header.revision, physical: true });
    const attach = watchManager.attach;
    let armed = 0;
    watchManager.attach = (watcher) => {
      armed += 1;
      attach.call(watchManager, watcher);
    };
    watchManager.establishStream = establish;
    reopen();
    // etcd cancels the resumed watch; the backend arms a new one and says something changed.
    await until(() => armed === 1);
    await until(() => watchers() === 1);
    watchManager.attach = attach;

    // The new watch notifies.
    await sleep(200);
    const settled = calls;
    await leading.resign();
    await until(() => calls > settled);
    watch.stop();
    await until(() => watchers() === 0);
    await backend.close();
  }, 30_000);

  it('leader() reads the oldest candidate and its lease TTL; null when none; a locker over the backend observes', async () => {
    const { backend } = ownBackend();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    ownLockers.push(locker);
    const name = 'leader:a';
    expect(await backend.leader!(name)).toBeNull();
    const leading = await locker.election(name).campaign('x');
    const leader = await backend.leader!(name);
    expect(leader).toMatchObject({ owner: leading.owner, term: leading.term, value: 'x' });
    expect(leader!.ttlMs).toBeGreaterThanOrEqual(1_000);
    expect(leader!.ttlMs).toBeLessThanOrEqual(10_000);
    await leading.resign();
    expect(await backend.leader!(name)).toBeNull();
  });
});
