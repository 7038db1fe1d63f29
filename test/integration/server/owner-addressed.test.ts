/**
 * The Locker's owner-addressed operations (`acquireForOwner`, `tryAcquireForOwner`,
 * `renewForOwner`, `releaseForOwner`), which the sidecar is built on, called directly over real
 * stores: two lockers stand for two sidecar processes. On record stores (Redis, SQLite) either
 * locker renews and releases what the other granted; on session stores (etcd, ZooKeeper) the
 * grant lives in the granting locker's session and ends when that locker closes.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { settledWithin } from '../../helpers/promises.js';
import { useNamespace as useEtcdNamespace } from '../etcd/support.js';
import { sqliteHarness } from '../handed/stores.js';
import { useNamespace as useZkNamespace } from '../zookeeper/support.js';
import { dropRedisKeys, sleep, uniqueKey } from './support.js';

afterAll(dropRedisKeys);

const owner = () => randomBytes(16).toString('hex');

const sqlite = sqliteHarness();
afterAll(() => sqlite.close());
const etcd = useEtcdNamespace('owner-addressed');
const zk = useZkNamespace('owner-addressed');

const STORES = [
  { name: 'redis', url: () => REDIS_URL, records: true },
  { name: 'sqlite', url: () => `sqlite:${sqlite.db.name}`, records: true },
  { name: 'etcd', url: () => etcd.url, records: false },
  { name: 'zookeeper', url: () => zk.url, records: false },
] as const;

describe.each(STORES)('owner-addressed operations ($name)', ({ url, records }) => {
  const lockers: Locker[] = [];
  const locker = () => {
    const l = createLocker(url());
    lockers.push(l);
    return l;
  };
  afterEach(async () => {
    await Promise.allSettled(lockers.splice(0).map((l) => l.close()));
  });

  it('grants to the given owner, refuses another, and answers the holder again with its token', async () => {
    const [one, two] = [locker(), locker()];
    const key = uniqueKey('owner-grant');
    const [a, b] = [owner(), owner()];
    const grant = await one.acquireForOwner(key, a, { ttlMs: 5000, waitMs: 0 });
    expect(grant.key).toBe(key);
    expect(grant.owner).toBe(a);
    expect(grant.fencingToken).toBeGreaterThan(0n);
    expect(grant.ttlMs).toBeGreaterThanOrEqual(5000);
    expect(one.activeLeases).toBe(0);
    await expect(two.tryAcquireForOwner(key, b, { ttlMs: 5000 })).resolves.toBeNull();
    const info = await two.inspect(key);
    expect(info.holder?.owner).toBe(a);
    expect(info.holder?.fencingToken).toBe(grant.fencingToken);
    const again = await one.tryAcquireForOwner(key, a, { ttlMs: 5000 });
    expect(again?.fencingToken).toBe(grant.fencingToken);
    await expect(
      one.releaseForOwner({ key, owner: a, fencingToken: grant.fencingToken }),
    ).resolves.toBe('released');
    expect((await two.inspect(key)).holder).toBeNull();
  });

  it('renews and releases only for the owner and token; never deletes another owner', async () => {
    const one = locker();
    const key = uniqueKey('owner-renew');
    const [a, b] = [owner(), owner()];
    const grant = await one.acquireForOwner(key, a, { ttlMs: 5000 });
    const ref = { key, owner: a, fencingToken: grant.fencingToken };
    const renewed = await one.renewForOwner(ref, 8000);
    expect(renewed.outcome).toBe('renewed');
    await expect(one.renewForOwner({ ...ref, owner: b }, 8000)).resolves.toEqual({
      outcome: 'not-owner',
    });
    await expect(one.releaseForOwner({ ...ref, owner: b })).resolves.toBe('not-owner');
    await expect(one.releaseForOwner({ key, owner: b })).resolves.toBe('not-owner');
    expect((await one.inspect(key)).holder?.owner).toBe(a);
    await expect(one.releaseForOwner({ key, owner: a })).resolves.toBe('released');
    await expect(one.releaseForOwner(ref)).resolves.toBe('not-held');
    await expect(one.renewForOwner(ref, 8000)).resolves.toEqual({ outcome: 'not-held' });
  });

  it('a waiting acquireForOwner on one locker is granted when the holder releases on another', async () => {
    const [one, two] = [locker(), locker()];
    const key = uniqueKey('owner-wait');
    const [a, b] = [owner(), owner()];
    const first = await one.acquireForOwner(key, a, { ttlMs: 10_000 });
    const waiting = two.acquireForOwner(key, b, { ttlMs: 10_000, waitMs: 20_000 });
    expect(await settledWithin(waiting, 300)).toBe(false);
    await one.releaseForOwner({ key, owner: a, fencingToken: first.fencingToken });
    const second = await waiting;
    expect(second.owner).toBe(b);
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    await two.releaseForOwner({ key, owner: b, fencingToken: second.fencingToken });
  });

  if (records) {
    it('another locker renews and releases what one granted; the grant outlives its locker', async () => {
      const [one, two] = [locker(), locker()];
      const key = uniqueKey('owner-cross');
      const a = owner();
      const grant = await one.acquireForOwner(key, a, { ttlMs: 300 });
      await one.close();
      const ref = { key, owner: a, fencingToken: grant.fencingToken };
      await expect(two.renewForOwner(ref, 10_000)).resolves.toEqual({
        outcome: 'renewed',
        ttlMs: 10_000,
      });
      await sleep(500); // past the first TTL: the renewal holds it
      expect((await two.inspect(key)).holder?.owner).toBe(a);
      await expect(two.releaseForOwner(ref)).resolves.toBe('released');
    });

    it('a grant ends by its TTL: nothing renews it', async () => {
      const one = locker();
      const key = uniqueKey('owner-ttl');
      const a = owner();
      const grant = await one.acquireForOwner(key, a, { ttlMs: 200 });
      await sleep(500);
      expect((await one.inspect(key)).holder).toBeNull();
      await expect(
        one.releaseForOwner({ key, owner: a, fencingToken: grant.fencingToken }),
      ).resolves.toBe('not-held');
    });
  } else {
    it('the grant lives in the granting locker’s session: it ends when that locker closes', async () => {
      const [one, two] = [locker(), locker()];
      const key = uniqueKey('owner-session');
      const a = owner();
      await one.acquireForOwner(key, a, { ttlMs: 10_000 });
      expect((await two.inspect(key)).holder?.owner).toBe(a);
      await one.close();
      expect((await two.inspect(key)).holder).toBeNull();
    });
  }
});
