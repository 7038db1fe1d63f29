/**
 * Lock-delay on ZooKeeper (backends/zookeeper/lock-delay.ts), what the contract cannot see: the
 * marker `_d_<holder node>` beside the holder's node and its end stamp `end`, a holder whose
 * session the server expires (the waiter that watched its node stamps the end), the waiting line
 * through the delay (the head keeps its place; a contender without a delay is held too), no
 * holder in `inspect`, `list` and `leader` meanwhile, a release or a withdrawal that clears the
 * delay (also a stamp made in between), and the delay's nodes gone by themselves afterwards.
 */
import { describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import { newOwnerId } from '../../../packages/fencelock/src/core/lock.js';
import { children, sleep, useNamespace } from './support.js';

const fixture = useNamespace('lock-delay');
const DELAY_MS = 1_500;
const PERSISTENT = 0;

/** A grant without the watchdog (its backend deletes the node after `ttlMs`), with the delay. */
function killedHolder(key: string, ttlMs = 1_000, extra: Partial<AttemptRequest> = {}) {
  const request: AttemptRequest = {
    key,
    owner: newOwnerId(),
    ttlMs,
    mode: 'write',
    autoRenew: false,
    willWait: false,
    lockDelayMs: DELAY_MS,
    ...extra,
  };
  return request;
}

/** The children of `dir` that are not contender nodes (the delay's markers), sorted. */
async function markers(dir: string): Promise<string[]> {
  return (await children(fixture.admin, dir)).filter((n) => !n.startsWith('_c_')).sort();
}

/** Poll `check` every 50 ms until it is true; throws after `timeoutMs`. */
async function until(what: string, check: () => Promise<boolean>, timeoutMs: number) {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() >= deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(50);
  }
}

describe('ZooKeeper lock-delay', () => {
  it('a delayed grant writes its marker (the delay as data) beside its node; a release deletes it', async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const key = 'layout';
    const dir = backend.dirOf(key);
    const lease = await locker.acquire(key, { lockDelayMs: DELAY_MS });
    const names = (await children(fixture.admin, dir)).sort();
    expect(names).toHaveLength(2);
    const node = names.find((n) => n.startsWith('_c_'))!;
    expect(names).toContain(`_d_${node}`);
    const [, data] = await fixture.admin.get(`${dir}/_d_${node}`, false);
    expect(String(data)).toBe(String(DELAY_MS));
    // A grant without a delay writes no marker.
    const plain = await locker.acquire('layout:plain');
    expect(await markers(backend.dirOf('layout:plain'))).toEqual([]);
    await plain.release();
    expect(await lease.release()).toBe('released');
    expect(await children(fixture.admin, dir)).toEqual([]);
  });

  it('an expired session: the waiter at the head stamps the end and waits the delay; no holder meanwhile; nothing left after', async () => {
    const x = fixture.locker({ ttlMs: 10_000 });
    const y = fixture.locker({ ttlMs: 10_000 });
    const backend = (await y.backend()) as ZookeeperBackend;
    const key = 'expired-session';
    const dir = backend.dirOf(key);
    const session = await x.openSession({ ttlMs: 1_000 });
    const lease = await x.acquire(key, { session, lockDelayMs: DELAY_MS });
    const node = (await children(fixture.admin, dir)).find((n) => n.startsWith('_c_'))!;
    let lostAt = Number.POSITIVE_INFINITY;
    lease.signal.addEventListener('abort', () => {
      lostAt = performance.now();
    });
    const orphanedAt = performance.now();
    session.orphan();
    let grantedAt: number | undefined;
    const waiting = y.acquire(key, { waitMs: 20_000 }).then((granted) => {
      grantedAt = performance.now();
      return granted;
    });
    waiting.catch(() => undefined);
    // The server ends the session: the node goes, the waiter stamps the end under the marker.
    await until(
      'end stamped',
      async () => (await children(fixture.admin, `${dir}/_d_${node}`)).includes('end'),
      8_000,
    );
    const stampedAt = performance.now();
    expect(grantedAt).toBeUndefined();
    expect((await children(fixture.admin, dir)).includes(node)).toBe(false);
    // Nobody holds the key during the delay: not inspect, not list.
    expect((await backend.inspect(key)).holder).toBeNull();
    const listed = await backend.list({ prefix: key, cursor: null, pageSize: 10 });
    expect(listed.entries.map((e) => e.key)).not.toContain(key);
    const next = await waiting;
    // The end is no earlier than the lease's local loss (the client's bound is the shorter one).
    expect(lostAt).toBeLessThan(Number.POSITIVE_INFINITY);
    expect(grantedAt!).toBeGreaterThanOrEqual(lostAt + DELAY_MS - 5);
    expect(grantedAt! - stampedAt).toBeLessThan(DELAY_MS + 2_000);
    console.info(
      `zk lock-delay: lease lost ${Math.round(lostAt - orphanedAt)} ms after orphan(), end ` +
        `stamped by ${Math.round(stampedAt - orphanedAt)} ms, next grant ${Math.round(grantedAt! - orphanedAt)} ms`,
    );
    // The grant cleared the delay's nodes: only the new holder's node is left.
    const names = await children(fixture.admin, dir);
    expect(names).toHaveLength(1);
    expect(names[0]!.startsWith('_c_')).toBe(true);
    expect((await backend.inspect(key)).holder?.fencingToken).toBe(next.fencingToken);
    expect(await next.release()).toBe('released');
  }, 30_000);

  it('the line keeps its order through the delay: the head waiter gets the key first, a contender without a delay is held too', async () => {
    const holder = fixture.backend();
    const y = fixture.locker({ ttlMs: 10_000 });
    const z = fixture.locker({ ttlMs: 10_000 });
    const key = 'line';
    const startedAt = performance.now();
    const granted = await holder.attempt(killedHolder(key));
    expect(granted.granted).toBe(true);
    const ttlMs = (granted as { ttlMs: number }).ttlMs;
    const order: string[] = [];
    const first = y.acquire(key, { waitMs: 20_000 }).then((l) => {
      order.push('y');
      return l;
    });
    await sleep(200);
    const second = z.acquire(key, { waitMs: 20_000 }).then((l) => {
      order.push('z');
      return l;
    });
    const yLease = await first;
    expect(performance.now()).toBeGreaterThanOrEqual(startedAt + ttlMs + DELAY_MS - 5);
    await sleep(300);
    expect(order).toEqual(['y']);
    expect(await yLease.release()).toBe('released');
    const zLease = await second;
    expect(order).toEqual(['y', 'z']);
    expect(zLease.fencingToken).toBeGreaterThan(yLease.fencingToken);
    await zLease.release();
  }, 30_000);

  it('a grant that ran out with nobody contending leaves nothing behind: its backend clears the marker after the delay', async () => {
    const holder = fixture.backend();
    const key = 'settle';
    const dir = holder.dirOf(key);
    const granted = await holder.attempt(killedHolder(key));
    expect(granted.granted).toBe(true);
    const ttlMs = (granted as { ttlMs: number }).ttlMs;
    await sleep(ttlMs + 300);
    // Ended at its TTL: the marker and its end stamp are there, the node is not.
    const [marker, ...rest] = await markers(dir);
    expect(rest).toEqual([]);
    expect(marker).toMatch(/^_d__c_/);
    expect(await children(fixture.admin, `${dir}/${marker}`)).toEqual(['end']);
    expect((await children(fixture.admin, dir)).filter((n) => n.startsWith('_c_'))).toEqual([]);
    await until('marker cleared', async () => (await markers(dir)).length === 0, DELAY_MS + 3_000);
  }, 15_000);

  it('a release clears a stamp made in between; a withdrawal of the live grant clears the delay too', async () => {
    const backend = fixture.backend();
    const other = fixture.locker({ ttlMs: 10_000 });
    const key = 'release-stamp';
    const dir = backend.dirOf(key);
    const request = killedHolder(key, 10_000, { autoRenew: true });
    const granted = (await backend.attempt(request)) as { granted: true; token: bigint };
    expect(granted.granted).toBe(true);
    const [marker] = await markers(dir);
    // A contender that saw the node gone (the release's delete) stamped the end before the
    // release deleted the marker.
    await fixture.admin.create(`${dir}/${marker}/end`, '', PERSISTENT);
    const outcome = await backend.release({
      key,
      owner: request.owner,
      fencingToken: granted.token,
    });
    expect(outcome).toBe('released');
    expect(await markers(dir)).toEqual([]);
    const next = await other.tryAcquire(key);
    expect(next).not.toBeNull();
    await next!.release();

    const withdrawn = killedHolder('withdraw', 10_000, { autoRenew: true });
    expect((await backend.attempt(withdrawn)).granted).toBe(true);
    expect(await markers(backend.dirOf('withdraw'))).toHaveLength(1);
    await backend.abandon(withdrawn);
    expect(await markers(backend.dirOf('withdraw'))).toEqual([]);
    const after = await other.tryAcquire('withdraw');
    expect(after).not.toBeNull();
    await after!.release();
  });

  it('an election in its delay has no leader', async () => {
    const holder = fixture.backend();
    const observer = fixture.backend();
    const name = 'election';
    const granted = await holder.attempt(killedHolder(name, 1_000, { election: { value: 'v' } }));
    expect(granted.granted).toBe(true);
    expect((await observer.leader(name))?.value).toBe('v');
    const ttlMs = (granted as { ttlMs: number }).ttlMs;
    // A candidate waits in line; past the TTL it is first, but does not lead during the delay.
    const { lockDelayMs: _, ...candidate } = killedHolder(name, 10_000, {
      autoRenew: true,
      willWait: true,
      election: { value: 'next' },
    });
    expect((await observer.attempt(candidate)).granted).toBe(false);
    await sleep(ttlMs + 300);
    expect((await observer.attempt(candidate)).granted).toBe(false);
    expect(await observer.leader(name)).toBeNull();
    await sleep(DELAY_MS);
    expect((await observer.attempt(candidate)).granted).toBe(true);
    expect((await observer.leader(name))?.value).toBe('next');
    await observer.abandon(candidate);
  }, 15_000);
});
