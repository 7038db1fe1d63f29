/**
 * Lock-delay on etcd (backends/etcd/lock-delay.ts), read behind fencelock's back with a
 * test-only client, for what the contract cannot see: the marker's layout (`<dir>w-delay` in the
 * lock's folder, valued with the grant's token, on a second lease longer than the holder's by
 * the delay) and that it expires by itself; a holder whose session stops being kept
 * alive (a killed process) keeping the key from a waiter until the delay after its lease's end,
 * while the waiter keeps its place in line and `inspect`/`list` show no holder; an abandon of a
 * live grant clearing the delay and a waiter's abandon not; an election in its delay having no
 * leader and the next leader's grant notified to the election's watchers; `attemptAll` refused
 * by a delay; a renewal to another TTL moving the marker with the key.
 */
import type { IKeyValue } from 'etcd3';
import { describe, expect, it } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import { newOwnerId } from '../../../packages/fencelock/src/core/lock.js';
import type { AttemptRequest, LeaseRef } from '../../../packages/fencelock/src/index.js';
import { contenders, sleep, useNamespace } from './support.js';

const fixture = useNamespace('lock-delay');

/** The lock-delay of every case, ms. */
const DELAY_MS = 1_500;
/** The holders' TTL, ms: the cluster's minimum lease TTL (2 s). */
const TTL_MS = 2_000;

/** The marker key of the lock (or election) `key`: no contender's name, in its folder. */
function markerOf(key: string, part: 'locks' | 'elections' = 'locks'): string {
  const name = part === 'locks' ? 'w-delay' : 'c-delay';
  return `${fixture.namespace}/${part}/${encodeURIComponent(key)}/${name}`;
}

async function readMarker(
  key: string,
  part?: 'locks' | 'elections',
): Promise<IKeyValue | undefined> {
  return (await fixture.admin.getAll().prefix(markerOf(key, part)).exec()).kvs.find(
    (kv) => kv.key.toString() === markerOf(key, part),
  );
}

/** Poll until exactly `count` contender keys (the marker not counted) are under `dir`. */
async function waitForContenders(dir: string, count: number, timeoutMs = 10_000): Promise<void> {
  await until(
    async () => {
      const names = await fixture.admin.getAll().prefix(dir).keys();
      return names.filter((name) => !name.endsWith('-delay')).length === count;
    },
    `${count} contenders under ${dir}`,
    timeoutMs,
  );
}

/** Granted and remaining TTL of an etcd lease, seconds (-1 once it ended). */
async function leaseTtl(id: string): Promise<{ granted: number; left: number }> {
  const ttl = await fixture.admin.leaseClient.leaseTimeToLive({ ID: id });
  return { granted: Number(ttl.grantedTTL), left: Number(ttl.TTL) };
}

/** Poll until `check` holds; throws after `timeoutMs`. */
async function until(check: () => Promise<boolean>, what: string, timeoutMs = 15_000) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() >= deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(20);
  }
}

/** A holder "killed" after its grant: granted through the backend, never renewed. */
function request(key: string, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  return {
    key,
    owner: newOwnerId(),
    ttlMs: TTL_MS,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    lockDelayMs: DELAY_MS,
    ...extra,
  };
}

/** `request` of a contender that passes no lock-delay of its own. */
function undelayed(key: string, extra: Partial<AttemptRequest> = {}): AttemptRequest {
  const { lockDelayMs: _, ...rest } = request(key, extra);
  return rest;
}

/** A backend of the namespace's store, closed by the case that makes it. */
function backendOf(): EtcdBackend {
  return createEtcdBackend({ url: fixture.url });
}

describe('etcd lock-delay', () => {
  it('the marker: the token at <dir>w-delay, on a second lease longer by the delay; a release deletes it', async () => {
    const locker = fixture.locker({ ttlMs: TTL_MS, lockDelayMs: DELAY_MS });
    const backend = (await locker.backend()) as EtcdBackend;
    const key = 'layout';
    const lease = await locker.acquire(key);
    const [holder] = await contenders(fixture.admin, backend.dirOf(key));
    const marker = await readMarker(key);
    expect(marker?.value.toString()).toBe(String(lease.fencingToken));
    expect(marker?.lease).not.toBe(holder!.lease);
    const holderTtl = await leaseTtl(holder!.lease);
    const markerTtl = await leaseTtl(marker!.lease);
    expect(markerTtl.granted * 1000).toBeGreaterThanOrEqual(holderTtl.granted * 1000 + DELAY_MS);
    // Kept alive with the session: still there after several of its beats.
    await sleep(TTL_MS * 1.5);
    expect((await readMarker(key))?.value.toString()).toBe(String(lease.fencingToken));
    expect(await lease.release()).toBe('released');
    expect(await readMarker(key)).toBeUndefined();
    // Read locks and semaphore permits carry none, also with the locker's default lock-delay.
    const reader = await locker.acquire('layout-read', { mode: 'read' });
    const permit = await locker.semaphore('layout-sem', { permits: 2 }).acquire();
    expect(await readMarker('layout-read')).toBeUndefined();
    const semaphoreDir = backend.semaphoreDirOf('layout-sem');
    const names = await fixture.admin.getAll().prefix(semaphoreDir).keys();
    expect(names.map((name) => name.slice(semaphoreDir.length, semaphoreDir.length + 2))).toEqual([
      'p-',
    ]);
    await reader.release();
    await permit.release();
  });

  it('a holder whose session stops: no grant until the delay after its lease ends; the waiter keeps its place', async () => {
    const a = fixture.locker({ ttlMs: TTL_MS, lockDelayMs: DELAY_MS });
    const b = fixture.locker({ ttlMs: 10_000 });
    const c = fixture.locker({ ttlMs: 10_000 });
    const key = 'killed';
    const backend = (await a.backend()) as EtcdBackend;
    const dir = backend.dirOf(key);
    const held = await a.acquire(key);
    const first = b.acquire(key, { waitMs: 30_000 });
    await waitForContenders(dir, 2);
    // The process "dies": its session's keepalives stop (and with them the marker lease's).
    (await backend.session(TTL_MS)).orphan();
    const [holder] = await contenders(fixture.admin, dir);
    const readAt = performance.now();
    const { left } = await leaseTtl(holder!.lease);
    const leaseEndsNoEarlier = readAt + left * 1000;
    await waitForContenders(dir, 1);
    const goneAt = performance.now();
    // In the delay: the first waiter's key is the line's oldest, yet nobody holds.
    expect((await backend.inspect(key)).holder).toBeNull();
    const listed: string[] = [];
    for await (const entry of c.list({ prefix: key })) listed.push(entry.key);
    expect(listed).toEqual([]);
    expect(await c.tryAcquire(key)).toBeNull();
    const second = c.acquire(key, { waitMs: 30_000 });
    await waitForContenders(dir, 2);
    const granted = await first;
    const grantedAt = performance.now();
    expect(grantedAt).toBeGreaterThanOrEqual(leaseEndsNoEarlier + DELAY_MS);
    expect(grantedAt - goneAt).toBeLessThan(DELAY_MS + 5_000);
    expect(held.signal.aborted).toBe(true);
    // FIFO kept through the delay: the later waiter is still behind.
    const race = await Promise.race([second.then(() => 'second'), sleep(300).then(() => 'none')]);
    expect(race).toBe('none');
    await granted.release();
    await (await second).release();
    // Nothing left behind: the marker went with its lease.
    expect(await readMarker(key)).toBeUndefined();
  });

  it('an abandon of the live grant clears the delay; a waiter’s abandon and a late release do not', async () => {
    const backend = backendOf();
    try {
      const key = 'abandon';
      const live = request(key);
      expect((await backend.attempt(live)).granted).toBe(true);
      expect(await readMarker(key)).toBeDefined();
      await backend.abandon(live);
      expect(await readMarker(key)).toBeUndefined();
      const killed = request(key);
      const granted = await backend.attempt(killed);
      expect(granted.granted).toBe(true);
      const token = (granted as { token: bigint }).token;
      await waitForContenders(backend.dirOf(key), 0, 10_000);
      // A waiter in the delay: refused, queued, told a bound no longer than the marker's lease.
      const waiter = undelayed(key, { willWait: true, autoRenew: true });
      const refused = await backend.attempt(waiter);
      expect(refused.granted).toBe(false);
      expect(refused).toMatchObject({ queued: true });
      const marker = await readMarker(key);
      expect(marker?.value.toString()).toBe(String(token));
      const { left } = await leaseTtl(marker!.lease);
      const holderTtlMs = (refused as { holderTtlMs: number }).holderTtlMs;
      expect(holderTtlMs).toBeGreaterThan(0);
      expect(holderTtlMs).toBeLessThanOrEqual(Math.max(500, (left + 1) * 1000));
      await backend.abandon(waiter);
      expect((await readMarker(key))?.value.toString()).toBe(String(token));
      const lease: LeaseRef = { key, owner: killed.owner, fencingToken: token };
      expect(await backend.release(lease)).toBe('not-held');
      expect((await readMarker(key))?.value.toString()).toBe(String(token));
      const next = undelayed(key);
      expect((await backend.attempt(next)).granted).toBe(false);
      await backend.abandon(next);
      await until(async () => (await readMarker(key)) === undefined, 'the marker expires');
      const after = undelayed(key);
      expect((await backend.attempt(after)).granted).toBe(true);
      await backend.abandon(after);
    } finally {
      await backend.close();
    }
  });

  it('an election in its delay has no leader; the next leader’s grant reaches the watchers', async () => {
    const backend = backendOf();
    const locker = fixture.locker({ ttlMs: 10_000 });
    try {
      const name = 'election';
      const dir = backend.electionDirOf(name);
      const killed = request(name, { election: { value: 'killed' } });
      expect((await backend.attempt(killed)).granted).toBe(true);
      expect((await readMarker(name, 'elections'))?.value).toBeDefined();
      await waitForContenders(dir, 0, 10_000);
      expect(await backend.leader(name)).toBeNull();
      const campaign = locker.election(name).campaign('next', { waitMs: 30_000 });
      await waitForContenders(dir, 1);
      // The next candidate is the oldest in line, but waits for the delay: nobody leads.
      expect(await backend.leader(name)).toBeNull();
      const changes: number[] = [];
      const watch = await backend.watchElection(name, () => changes.push(performance.now()));
      try {
        const leading = await campaign;
        await until(async () => changes.length > 0, 'a change notified after the grant', 5_000);
        expect((await backend.leader(name))?.owner).toBe(leading.owner);
        await leading.resign();
      } finally {
        watch.stop();
      }
    } finally {
      await backend.close();
    }
  });

  it('attemptAll is refused while one key is in its delay, writing nothing; acquireAll marks every key', async () => {
    const backend = backendOf();
    const locker = fixture.locker({ ttlMs: TTL_MS, lockDelayMs: DELAY_MS });
    try {
      const all = await locker.acquireAll(['all-1', 'all-2']);
      expect(await readMarker('all-1')).toBeDefined();
      expect(await readMarker('all-2')).toBeDefined();
      await all.release();
      expect(await readMarker('all-1')).toBeUndefined();
      expect(await readMarker('all-2')).toBeUndefined();
      expect((await backend.attempt(request('all-2'))).granted).toBe(true);
      await waitForContenders(backend.dirOf('all-2'), 0, 10_000);
      const other = fixture.locker({ ttlMs: 10_000 });
      expect(await other.tryAcquireAll(['all-1', 'all-2'])).toBeNull();
      expect(await fixture.admin.getAll().prefix(backend.dirOf('all-1')).count()).toBe(0);
      // The delayed key's folder holds its marker only.
      expect(await fixture.admin.getAll().prefix(backend.dirOf('all-2')).keys()).toEqual([
        markerOf('all-2'),
      ]);
      const later = await other.acquireAll(['all-1', 'all-2'], { waitMs: 30_000 });
      expect(await readMarker('all-2')).toBeUndefined();
      await later.release();
    } finally {
      await backend.close();
    }
  });

  it('a renewal to another TTL moves the marker to a lease longer than the new one by the delay', async () => {
    const backend = backendOf();
    try {
      const key = 'renew-move';
      const held = request(key);
      const granted = await backend.attempt(held);
      const token = (granted as { token: bigint }).token;
      const before = await readMarker(key);
      const renewed = await backend.renew({ key, owner: held.owner, fencingToken: token }, 5_000);
      expect(renewed.ok).toBe(true);
      const after = await readMarker(key);
      expect(after?.value.toString()).toBe(String(token));
      expect(after?.lease).not.toBe(before?.lease);
      const [holder] = await contenders(fixture.admin, backend.dirOf(key));
      const holderTtl = await leaseTtl(holder!.lease);
      expect(holderTtl.granted).toBe(5);
      expect((await leaseTtl(after!.lease)).granted * 1000).toBeGreaterThanOrEqual(
        5_000 + DELAY_MS,
      );
      expect(await backend.release({ key, owner: held.owner, fencingToken: token })).toBe(
        'released',
      );
      expect(await readMarker(key)).toBeUndefined();
    } finally {
      await backend.close();
    }
  });
});
