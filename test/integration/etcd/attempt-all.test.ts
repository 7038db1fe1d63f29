/**
 * `attemptAll` on etcd (the first round of `acquireAll`): what the contract suite cannot see.
 * One etcd transaction for every key (requests counted on an instrumented client); nothing
 * written when one key is held or its line has a writer waiting; the tokens are that
 * transaction's revision, between the single attempts' tokens on the same keys; keys on leases
 * of their own without the watchdog, gone with their TTL; and the etcd edges: keys fencelock did
 * not write and downgrades (a second transaction, guarded by the first one's read, which fails
 * when a line is written in between), a transaction the client sends twice, a shared session
 * whose lease was revoked behind its back, more keys than one transaction takes.
 */
import { randomBytes } from 'node:crypto';
import type { Etcd3, ITxnRequest, ITxnResponse } from 'etcd3';
import { afterAll, describe, expect, it, vi } from 'vitest';
import {
  createEtcdBackend,
  type EtcdBackend,
} from '../../../packages/fencelock/src/backends/etcd/index.js';
import type {
  AttemptRequest,
  AttemptResult,
  Granted,
  LockMode,
} from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  InvalidArgumentError,
  type Lease,
} from '../../../packages/fencelock/src/index.js';
import {
  contenders,
  instrumentedClient,
  type RequestEvent,
  sleep,
  useNamespace,
} from './support.js';

const fixture = useNamespace('attempt-all');
/** Backends made here, each on a client of its own: closed after the tests, in turn. */
const made: { backend: EtcdBackend; client: Etcd3 }[] = [];

afterAll(async () => {
  for (const { backend, client } of made) {
    await backend.close();
    client.close();
  }
});

/** A backend on an instrumented client of its own: every request it sends is logged. */
function instrumented(): { backend: EtcdBackend; client: Etcd3; log: RequestEvent[] } {
  const log: RequestEvent[] = [];
  const { client } = instrumentedClient(0, log);
  const backend = createEtcdBackend({ client, namespace: fixture.namespace });
  made.push({ backend, client });
  return { backend, client, log };
}

/** The requests `log` got since `from`, by kind (`KV.txn`, `Lease.leaseGrant`…). */
function requestsSince(log: readonly RequestEvent[], from: number): Record<string, number> {
  const kinds: Record<string, number> = {};
  for (const event of log.slice(from)) kinds[event.what] = (kinds[event.what] ?? 0) + 1;
  return kinds;
}

/**
 * Single attempts at `keys` (sorted), each with an owner of its own: 10 s, renewed by the
 * watchdog, not waiting, unless `more` says otherwise.
 */
function requestsFor(
  keys: readonly string[],
  mode: LockMode = 'write',
  more: Partial<AttemptRequest> = {},
): AttemptRequest[] {
  const base = { ttlMs: 10_000, mode, autoRenew: true, willWait: false };
  return [...keys].sort().map((key) => ({ ...base, key, owner: newOwner(), ...more }));
}

const newOwner = () => randomBytes(16).toString('hex');

const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;

function tokensOf(results: readonly AttemptResult[] | null): bigint[] {
  return (results ?? []).map((result) => {
    if (!result.granted) throw new Error('not granted');
    return result.token;
  });
}

async function releaseAll(
  backend: EtcdBackend,
  requests: readonly AttemptRequest[],
  results: readonly AttemptResult[] | null,
): Promise<void> {
  for (const [i, result] of (results ?? []).entries()) {
    if (!result.granted) continue;
    const { key, owner } = requests[i]!;
    expect(await backend.release({ key, owner, fencingToken: result.token })).toBe('released');
  }
}

/** The keys under the lock folders of `keys` (all of them: contenders or not). */
async function keysIn(backend: EtcdBackend, keys: readonly string[]): Promise<string[]> {
  const found = await Promise.all(keys.map((key) => contenders(fixture.admin, backend.dirOf(key))));
  return found.flat().map((entry) => entry.key);
}

describe('etcd attemptAll: one transaction', () => {
  it('acquireAll of 5 free keys sends one transaction (its session already open)', async () => {
    const { backend, log } = instrumented();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const keys = [1, 2, 3, 4, 5].map((n) => unique(`one-${n}`));
    // Open the locker's session first, so that only the acquire's own requests are counted.
    await (await locker.acquire(unique('warm'))).release();
    const from = log.length;
    const all = await locker.acquireAll(keys);
    expect(requestsSince(log, from)).toEqual({ 'KV.txn': 1 });
    // One transaction: every key's token is its revision.
    const tokens = new Set(all.leases.map((lease) => lease.fencingToken));
    expect(tokens.size).toBe(1);
    for (const lease of all.leases) {
      const [entry] = await contenders(fixture.admin, backend.dirOf(lease.key));
      expect(entry?.createRevision).toBe(lease.fencingToken);
    }
    expect(await all.release()).toEqual(keys.map(() => 'released'));
  });

  it('a held key: one transaction, nothing written anywhere, each key answered', async () => {
    const { backend, log } = instrumented();
    const keys = [unique('held-a'), unique('held-b'), unique('held-c')].sort();
    const holder = await createLocker(backend).acquire(keys[1]!, { ttlMs: 10_000 });
    const requests = requestsFor(keys);
    const from = log.length;
    const results = await backend.attemptAll(requests);
    expect(requestsSince(log, from)).toEqual({ 'KV.txn': 1 });
    expect(results!.map((r) => r.granted)).toEqual([false, false, false]);
    // The held key's answer says what to wait on, but it holds no place in line.
    const held = results![1]!;
    expect(held.granted === false && held.waitForChange).toBeTypeOf('function');
    expect(held.granted === false && held.queued).toBe(false);
    const stored = await keysIn(backend, keys);
    expect(stored).toHaveLength(1);
    expect(stored[0]!.startsWith(backend.dirOf(keys[1]!))).toBe(true);
    expect(stored[0]!.endsWith(holder.owner)).toBe(true);
    expect(await holder.release()).toBe('released');
  });

  it('a line with a writer waiting behind readers refuses a new reader, as a single attempt does', async () => {
    const { backend } = instrumented();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const keys = [unique('fair-a'), unique('fair-b')].sort();
    const reader = await locker.acquire(keys[1]!, { mode: 'read' });
    // Readers share while no writer waits: a reader's round is granted.
    const sharing = requestsFor(keys, 'read');
    const shared = await backend.attemptAll(sharing);
    expect(shared!.map((r) => r.granted)).toEqual([true, true]);
    await releaseAll(backend, sharing, shared);
    // A writer queues behind the reader; now a new reader must wait too (fair line).
    const waiting = locker.acquire(keys[1]!, { mode: 'write', waitMs: 10_000 });
    for (let i = 0; (await contenders(fixture.admin, backend.dirOf(keys[1]!))).length < 2; i++) {
      if (i > 100) throw new Error('the writer did not queue');
      await sleep(20);
    }
    const refused = await backend.attemptAll(requestsFor(keys, 'read'));
    expect(refused!.map((r) => r.granted)).toEqual([false, false]);
    expect(await keysIn(backend, [keys[0]!])).toEqual([]);
    expect(await locker.tryAcquire(keys[1]!, { mode: 'read' })).toBeNull();
    expect(await reader.release()).toBe('released');
    expect(await (await waiting).release()).toBe('released');
  });

  it('tokens: above the single attempts before, below those after, on the same keys', async () => {
    const { backend } = instrumented();
    const locker = createLocker(backend, { ttlMs: 10_000 });
    const keys = [unique('order-a'), unique('order-b')].sort();
    const before = await locker.acquire(keys[0]!);
    const beforeToken = before.fencingToken;
    expect(await before.release()).toBe('released');
    const requests = requestsFor(keys);
    const results = await backend.attemptAll(requests);
    const tokens = tokensOf(results);
    expect(tokens[0]).toBeGreaterThan(beforeToken);
    expect(tokens[1]).toBe(tokens[0]);
    await releaseAll(backend, requests, results);
    const after = await locker.acquire(keys[1]!);
    expect(after.fencingToken).toBeGreaterThan(tokens[1]!);
    expect(await after.release()).toBe('released');
  });

  it('without the watchdog: each key on a lease of its own, gone with its TTL', async () => {
    const { backend, log } = instrumented();
    const keys = [unique('own-a'), unique('own-b'), unique('own-c')].sort();
    const requests = requestsFor(keys, 'write', { ttlMs: 2_000, autoRenew: false });
    const from = log.length;
    const results = await backend.attemptAll(requests);
    // One lease grant per key, then the one transaction.
    expect(requestsSince(log, from)).toEqual({ 'Lease.leaseGrant': 3, 'KV.txn': 1 });
    expect(results!.every((r) => r.granted && r.ttlMs >= 2_000)).toBe(true);
    const shared = await backend.session(10_000);
    const stored = (
      await Promise.all(keys.map((key) => contenders(fixture.admin, backend.dirOf(key))))
    ).flat();
    expect(stored).toHaveLength(3);
    expect(new Set(stored.map((entry) => entry.lease)).size).toBe(3);
    expect(stored.some((entry) => entry.lease === shared.leaseId)).toBe(false);
    // Nobody keeps those leases alive: the keys go with them (TTL, plus up to 500 ms for etcd).
    const grantedAt = performance.now();
    while ((await keysIn(backend, keys)).length > 0) {
      if (performance.now() - grantedAt > 6_000) throw new Error('the keys outlived their TTL');
      await sleep(100);
    }
    expect(performance.now() - grantedAt).toBeGreaterThan(1_000);
  });

  it('without the watchdog and a key held: the leases granted for the round are revoked', async () => {
    const { backend } = instrumented();
    const keys = [unique('revoke-a'), unique('revoke-b')].sort();
    const holder = await createLocker(backend).acquire(keys[0]!, { ttlMs: 10_000 });
    const before = (await fixture.admin.leaseClient.leaseLeases()).leases.length;
    const results = await backend.attemptAll(
      requestsFor(keys, 'write', { ttlMs: 10_000, autoRenew: false }),
    );
    expect(results!.map((r) => r.granted)).toEqual([false, false]);
    for (let i = 0; (await fixture.admin.leaseClient.leaseLeases()).leases.length > before; i++) {
      if (i > 100) throw new Error('the round’s leases were not revoked');
      await sleep(20);
    }
    expect(await holder.release()).toBe('released');
  });
});

describe('etcd attemptAll: the second transaction and other edges', () => {
  it('a key fencelock did not write in a folder: granted by a second, guarded transaction', async () => {
    const { backend, log } = instrumented();
    const keys = [unique('foreign-a'), unique('foreign-b')].sort();
    const stranger = `${backend.dirOf(keys[1]!)}w-1-${'ab'.repeat(16)}`; // bound to no lease
    await fixture.admin.put(stranger).value('by hand');
    const requests = requestsFor(keys);
    await backend.session(10_000); // opened before counting
    const from = log.length;
    const results = await backend.attemptAll(requests);
    expect(requestsSince(log, from)).toEqual({ 'KV.txn': 2 });
    const tokens = tokensOf(results);
    expect(tokens[1]).toBe(tokens[0]);
    expect((await backend.inspect(keys[1]!)).holder?.owner).toBe(requests[1]!.owner);
    await releaseAll(backend, requests, results);
    expect(await keysIn(backend, keys)).toEqual([stranger]);
    await fixture.admin.delete().key(stranger);
  });

  it('a line written between the read and the guarded write: nothing granted, nothing written', async () => {
    const { backend, client } = instrumented();
    const keys = [unique('race-a'), unique('race-b')].sort();
    // A key fencelock did not write makes the first transaction fail and read the lines.
    const stranger = `${backend.dirOf(keys[0]!)}foreign`;
    await fixture.admin.put(stranger).value('by hand');
    const other = createLocker(fixture.url);
    const txn = client.kv.txn.bind(client.kv);
    let sent = 0;
    let rival = null as Lease | null;
    const spy = vi.spyOn(client.kv, 'txn').mockImplementation(async (request: ITxnRequest) => {
      sent += 1;
      // After the first transaction read the lines, another client takes key b.
      if (sent === 2) rival = await other.tryAcquire(keys[1]!, { ttlMs: 10_000 });
      return txn(request);
    });
    try {
      const results = await backend.attemptAll(requestsFor(keys));
      expect(rival).not.toBeNull();
      // The first try, then the guarded one, which fails and reads b held in the same request.
      expect(sent).toBe(2);
      expect(results!.map((r) => r.granted)).toEqual([false, false]);
      expect(await keysIn(backend, [keys[0]!])).toEqual([stranger]);
      expect(await keysIn(backend, [keys[1]!])).toHaveLength(1);
      expect((await backend.inspect(keys[1]!)).holder?.owner).toBe(rival!.owner);
    } finally {
      spy.mockRestore();
      await rival?.release();
      await other.close();
      await fixture.admin.delete().key(stranger);
    }
  });

  it('a downgrade passes its own write lock; another writer queued blocks it with a typed error', async () => {
    const { backend, log } = instrumented();
    const keys = [unique('down-a'), unique('down-b')].sort();
    const [writer] = requestsFor([keys[0]!]);
    const write = await backend.attempt(writer!);
    expect(write.granted).toBe(true);
    const downgrade = (r: AttemptRequest) =>
      r.key === keys[0] ? { ...r, heldWriter: writer!.owner } : r;
    const readers = requestsFor(keys, 'read').map(downgrade);
    const from = log.length;
    const results = await backend.attemptAll(readers);
    expect(results!.map((r) => r.granted)).toEqual([true, true]);
    // The writer's key fails the first guard: the read decides, a second transaction writes.
    expect(requestsSince(log, from)).toEqual({ 'KV.txn': 2 });
    await releaseAll(backend, readers, results);
    // Another writer waits behind a's writer: the downgrade would wait forever, so it is refused.
    const [queued] = requestsFor([keys[0]!], 'write', { willWait: true });
    expect((await backend.attempt(queued!)).granted).toBe(false);
    const blocked = requestsFor(keys, 'read').map(downgrade);
    await expect(backend.attemptAll(blocked)).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await keysIn(backend, [keys[0]!])).toHaveLength(2); // the writer and the queued one
    expect(await keysIn(backend, [keys[1]!])).toEqual([]);
    await backend.abandon(queued!);
    const token = (write as Granted).token;
    expect(
      await backend.release({ key: keys[0]!, owner: writer!.owner, fencingToken: token }),
    ).toBe('released');
  });

  it('a transaction the client sends twice (lost reply): the first put’s tokens', async () => {
    for (const mode of ['write', 'read'] as const) {
      const { backend, client } = instrumented();
      const keys = [unique(`twice-${mode}-a`), unique(`twice-${mode}-b`)].sort();
      const txn = client.kv.txn.bind(client.kv);
      let first: ITxnResponse | undefined;
      const spy = vi.spyOn(client.kv, 'txn').mockImplementation(async (request: ITxnRequest) => {
        first = await txn(request);
        return txn(request); // the first reply "lost", the request sent again
      });
      const requests = requestsFor(keys, mode);
      let results: AttemptResult[] | null;
      try {
        results = await backend.attemptAll(requests);
      } finally {
        spy.mockRestore();
      }
      const tokens = tokensOf(results);
      expect(first?.succeeded, mode).toBe(true);
      const revision = BigInt(first!.header.revision);
      expect(tokens, mode).toEqual([revision, revision]);
      for (const [i, key] of keys.entries()) {
        expect((await backend.inspect(key)).holder?.fencingToken, mode).toBe(tokens[i]);
      }
      await releaseAll(backend, requests, results);
    }
  });

  it('the shared session’s lease revoked behind its back: one new session, then granted', async () => {
    const { backend } = instrumented();
    const session = await backend.session(10_000);
    await fixture.admin.leaseClient.leaseRevoke({ ID: session.leaseId });
    const requests = requestsFor([unique('revoked-a'), unique('revoked-b')]);
    const results = await backend.attemptAll(requests);
    expect(results!.every((r) => r.granted)).toBe(true);
    expect(session.alive).toBe(false);
    const renewed = await backend.session(10_000);
    expect(renewed.leaseId).not.toBe(session.leaseId);
    const [stored] = await contenders(fixture.admin, backend.dirOf(requests[0]!.key));
    expect(stored?.lease).toBe(renewed.leaseId);
    await releaseAll(backend, requests, results);
  });

  it('more keys than one transaction takes: null, without a request', async () => {
    const { backend, log } = instrumented();
    const keys = Array.from({ length: 129 }, (_, i) => `many-${String(i).padStart(3, '0')}`);
    const from = log.length;
    expect(await backend.attemptAll(requestsFor(keys))).toBeNull();
    expect(requestsSince(log, from)).toEqual({});
    // 128 keys still go together.
    const requests = requestsFor(keys.slice(0, 128).map((key) => unique(key)));
    const results = await backend.attemptAll(requests);
    expect(new Set(tokensOf(results)).size).toBe(1);
    await releaseAll(backend, requests, results);
  });
});
