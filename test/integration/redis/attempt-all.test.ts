/**
 * The Redis backend's `attemptAll` (attempt-all.lua): the first round of a multi-key acquire as
 * one script call, what the contract suite cannot see.
 * - One engine operation: `acquireAll` and `tryAcquireAll` send one command (EVALSHA of the
 *   attempt-all script) for every key, up to 1,000 keys; a busy key costs that command only.
 * - Atomicity by the single attempt's own rules: a key that is free but has a writer in line, a
 *   key read-held with a writer queued behind the readers, and a blocked read downgrade refuse
 *   the whole round (nothing granted, nothing queued), as `tryAcquire` refuses that key alone.
 * - Tokens from each key's one counter: above single attempts' before, below single attempts'
 *   after.
 * - Per-key state expires: the lease by its TTL, the counter `FENCE_GRACE_MS` after, readers
 *   with their grant; a refused round writes no key.
 * - Cluster: keys whose hash tags share a slot go in one script; keys in several slots are
 *   answered null (no command sent) and `acquireAll` still takes them key by key; the backend's
 *   slot computation agrees with the server's CLUSTER KEYSLOT. Also with a node-redis Cluster.
 * - Sentinel: the failover epoch leads every token of the script; `minReplicas` is one WAIT for
 *   every grant, and too few acknowledgements release them all.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Cluster, type Command, Redis } from 'ioredis';
import { createCluster } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  counterOf,
  type FailoverEpoch,
} from '../../../packages/fencelock/src/backends/redis/failover-epoch.js';
import { fenceTtlMs } from '../../../packages/fencelock/src/backends/redis/fence-counter.js';
import { hashSlot } from '../../../packages/fencelock/src/backends/redis/hash-slot.js';
import {
  createRedisBackend,
  RedisBackend,
} from '../../../packages/fencelock/src/backends/redis/index.js';
import {
  attemptAllScript,
  inspectLockScript,
  queuedAcquireScript,
} from '../../../packages/fencelock/src/backends/redis/scripts.js';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  Granted,
} from '../../../packages/fencelock/src/core/backend.js';
import {
  BackendError,
  createLocker,
  InvalidArgumentError,
  type Locker,
  MAX_MULTI_KEYS,
} from '../../../packages/fencelock/src/index.js';
import { requestsFor } from '../../contract/attempt-all.contract.js';
import {
  CLUSTER_PORT_BASE,
  REDIS_URL,
  SENTINEL_DATA_PORT_BASE,
  SENTINEL_PORT_BASE,
  SENTINEL_URL,
} from '../../helpers/engines.js';

const prefix = `fencelock-it-all-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
const newOwner = () => randomBytes(16).toString('hex');
const lockers: Locker[] = [];
const clients: (Redis | Cluster)[] = [];
let admin: Redis;

/** What a client sent: command names, and the SHA1 of each EVALSHA. */
interface Sent {
  readonly names: string[];
  readonly sha1s: string[];
  /** Forget what was sent so far. */
  reset(): void;
}

/** The commands `client` sends from now on (its connection, not its pub/sub one). */
function commandsOf(client: Redis | Cluster): Sent {
  const seen: Sent = {
    names: [],
    sha1s: [],
    reset() {
      seen.names.length = 0;
      seen.sha1s.length = 0;
    },
  };
  const send = client.sendCommand.bind(client) as (command: Command, ...rest: unknown[]) => unknown;
  (client as unknown as { sendCommand: unknown }).sendCommand = (
    command: Command,
    ...rest: unknown[]
  ) => {
    seen.names.push(command.name);
    if (command.name === 'evalsha') seen.sha1s.push(String(command.args[0]));
    return send(command, ...rest);
  };
  return seen;
}

/** A locker on a client of its own, with the commands it sends counted. */
function newLocker(client: Redis | Cluster = new Redis(REDIS_URL)) {
  clients.push(client);
  const commands = commandsOf(client);
  const backend = createRedisBackend({ client, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  return { locker, backend, commands };
}

/** Check that every one of `results` granted its request, release each, and give the grants. */
async function releaseGranted(
  backend: Backend,
  requests: readonly AttemptRequest[],
  results: readonly AttemptResult[] | null,
): Promise<Granted[]> {
  expect(results?.map((r) => r.granted)).toEqual(requests.map(() => true));
  const grants = results as Granted[];
  for (const [i, granted] of grants.entries()) {
    const { key, owner } = requests[i]!;
    expect(await backend.release({ key, owner, fencingToken: granted.token })).toBe('released');
  }
  return grants;
}

/** The six Redis key names of lock `key` the granting scripts take. */
function namesOf(backend: RedisBackend, key: string): string[] {
  const k = backend.keysOf(key);
  return [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens];
}

/** Queue `owner` as a waiting writer of `key` (an attempt that will wait, entry for 10 s). */
async function queueWriter(backend: RedisBackend, key: string, owner: string) {
  return queuedAcquireScript.run(admin, namesOf(backend, key) as never, [
    owner,
    10_000,
    10_000,
    fenceTtlMs(10_000),
  ]);
}

beforeAll(async () => {
  admin = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  // Scripts cached on every server, so that each call below is one EVALSHA (no NOSCRIPT, EVAL).
  const cluster = new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }]);
  await cluster.ping();
  for (const node of [admin, ...cluster.nodes('master')]) {
    for (const script of [attemptAllScript, queuedAcquireScript, inspectLockScript]) {
      await node.script('LOAD', script.source);
    }
  }
  cluster.disconnect();
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  // Leave nothing of this run on the shared engines: the single node, the Cluster's primaries
  // and the Sentinel primary.
  const cluster = new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }]);
  const sentinelPrimary = new Redis(SENTINEL_DATA_PORT_BASE + 1, '127.0.0.1');
  for (const node of [admin, sentinelPrimary]) {
    const keys = await node.keys(`${prefix}:*`);
    if (keys.length > 0) await node.del(...keys);
  }
  for (const node of cluster.nodes('master')) {
    for (const key of await node.keys(`${prefix}:*`)) await cluster.del(key);
  }
  for (const client of [...clients, cluster, sentinelPrimary]) client.disconnect();
  await admin.quit();
});

describe('attemptAll on a single node', () => {
  it('acquireAll takes free keys with one command, and a busy round costs one command too', async () => {
    const { locker, commands } = newLocker();
    // Connected first, so that only the acquires' own commands are counted.
    await locker.inspect(unique('warm-up'));
    const keys = [unique('one-c'), unique('one-a'), unique('one-b')];
    commands.reset();
    const all = await locker.acquireAll(keys, { ttlMs: 10_000 });
    expect(commands.names).toEqual(['evalsha']);
    expect(commands.sha1s).toEqual([attemptAllScript.sha1]);
    expect(await all.release()).toEqual(['released', 'released', 'released']);

    const other = newLocker();
    const holder = await other.locker.acquire(keys[1]!, { ttlMs: 10_000 });
    commands.reset();
    expect(await locker.tryAcquireAll(keys, { ttlMs: 10_000 })).toBeNull();
    // One script call refused the round; nothing was taken, so nothing is released.
    expect(commands.names).toEqual(['evalsha']);
    expect(commands.sha1s).toEqual([attemptAllScript.sha1]);
    await holder.release();
  });

  it(`${MAX_MULTI_KEYS} keys in one script call`, async () => {
    const { locker, backend, commands } = newLocker();
    await locker.inspect(unique('warm-up'));
    const keys = Array.from({ length: MAX_MULTI_KEYS }, (_, i) => unique(`many-${i}`));
    commands.reset();
    const startedAt = performance.now();
    const all = await locker.acquireAll(keys, { ttlMs: 10_000 });
    const tookMs = performance.now() - startedAt;
    expect(commands.names).toEqual(['evalsha']);
    expect(all.leases).toHaveLength(MAX_MULTI_KEYS);
    const last = all.leases.at(-1)!;
    expect((await backend.inspect(last.key)).holder?.fencingToken).toBe(last.fencingToken);
    console.log(
      `acquireAll of ${MAX_MULTI_KEYS} free keys: one script call, ${tookMs.toFixed(1)} ms`,
    );
    await all.release();
  });

  it('a free key with a writer in line refuses the round, as it refuses a single attempt', async () => {
    const { locker, backend } = newLocker();
    const [free, lined] = [unique('line-a'), unique('line-b')].sort() as [string, string];
    // The line of `lined` has a writer at its head while nobody holds the key: its holder's
    // lease ended (deleted here) before a release could hand the key on.
    const holder = await locker.acquire(lined, { ttlMs: 10_000 });
    const waiter = newOwner();
    expect((await queueWriter(backend, lined, waiter))[0]).toBe(0);
    await admin.del(backend.keysOf(lined).lock);
    expect(holder.isHeld).toBe(true); // the lease does not know yet; its renewal would tell

    const requests = requestsFor([free, lined]);
    const results = await backend.attemptAll(requests);
    expect(results!.map((r) => r.granted)).toEqual([false, false]);
    // The free key is answered without a wait; the lined one as its single attempt would be.
    expect(results![0]).toEqual({ granted: false });
    const refused = results![1] as Extract<AttemptResult, { granted: false }>;
    expect(refused.queued).toBe(false);
    expect(refused.holderTtlMs).toBeGreaterThan(5_000); // the head's entry time left
    expect(refused.holderTtlMs).toBeLessThanOrEqual(10_000);
    expect(await locker.tryAcquire(lined, { ttlMs: 10_000 })).toBeNull();
    // Nothing was granted and nobody joined the line.
    expect((await backend.inspect(free)).holder).toBeNull();
    expect(await admin.exists(...namesOf(backend, free))).toBe(0);
    expect(await admin.lrange(backend.keysOf(lined).queue, 0, -1)).toEqual([waiter]);
    // The head takes the key by its own attempt; the round's owners are in no line.
    expect((await queueWriter(backend, lined, waiter))[0]).toBe(1);
    await backend.abandon({ ...requests[0]!, owner: waiter, key: lined });
    await holder.release();
  });

  it('readers share keys, but not past a writer queued behind the readers', async () => {
    const { locker, backend } = newLocker();
    const keys = [unique('rw-a'), unique('rw-b')].sort() as [string, string];
    const reader = await locker.acquire(keys[1], { ttlMs: 10_000, mode: 'read' });
    // A read round goes beside the reader while no writer waits.
    const first = requestsFor(keys, 'read');
    await releaseGranted(backend, first, await backend.attemptAll(first));
    // A writer queues behind the reader: readers arriving now wait for it (Curator's rule).
    const writer = newOwner();
    expect((await queueWriter(backend, keys[1], writer))[0]).toBe(0);
    const second = requestsFor(keys, 'read');
    const refused = (await backend.attemptAll(second))!;
    expect(refused.map((r) => r.granted)).toEqual([false, false]);
    expect(await locker.tryAcquire(keys[1], { ttlMs: 10_000, mode: 'read' })).toBeNull();
    // The free key took no grant and no line entry (the first round's readers were released).
    const free = backend.keysOf(keys[0]);
    expect(await admin.exists(free.lock, free.queue, free.waiters, free.readers)).toBe(0);
    await backend.abandon({ ...second[1]!, owner: writer });
    await reader.release();
  });

  it('a read downgrade passes its own writer; blocked by another writer in line, it rejects and grants nothing', async () => {
    const { locker, backend } = newLocker();
    const keys = [unique('down-a'), unique('down-b')].sort() as [string, string];
    const writer = await locker.acquire(keys[0], { ttlMs: 10_000 });
    const downgrade = requestsFor(keys, 'read').map((r) =>
      r.key === keys[0] ? { ...r, heldWriter: writer.owner } : r,
    );
    await releaseGranted(backend, downgrade, await backend.attemptAll(downgrade));
    // Another writer waits for keys[0]: the downgrade would wait for itself, so it is refused.
    const other = newOwner();
    expect((await queueWriter(backend, keys[0], other))[0]).toBe(0);
    const blocked = requestsFor(keys, 'read').map((r) =>
      r.key === keys[0] ? { ...r, heldWriter: writer.owner } : r,
    );
    const error = await backend.attemptAll(blocked).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(await admin.exists(backend.keysOf(keys[1]).readers)).toBe(0);
    expect(await admin.exists(backend.keysOf(keys[0]).readers)).toBe(0);
    await backend.abandon({ ...blocked[0]!, owner: other });
    await writer.release();
  });

  it('tokens come from each key’s one counter: above earlier single attempts, below later ones', async () => {
    const { locker, backend } = newLocker();
    const keys = [unique('tok-a'), unique('tok-b'), unique('tok-c')].sort();
    const before: bigint[] = [];
    for (const key of keys) {
      // Two grants each, so the counter runs ahead of the clock only by what was issued.
      for (let i = 0; i < 2; i++) {
        const lease = await locker.acquire(key, { ttlMs: 10_000 });
        before.push(lease.fencingToken);
        await lease.release();
      }
    }
    const requests = requestsFor(keys);
    const results = (await backend.attemptAll(requests)) as Granted[];
    for (const [i, r] of results.entries()) {
      expect(r.token).toBeGreaterThan(before[2 * i + 1]!);
      expect(await admin.get(backend.keysOf(keys[i]!).fence)).toBe(String(r.token));
      await backend.release({ key: keys[i]!, owner: requests[i]!.owner, fencingToken: r.token });
    }
    for (const [i, key] of keys.entries()) {
      const after = await locker.acquire(key, { ttlMs: 10_000 });
      expect(after.fencingToken).toBeGreaterThan(results[i]!.token);
      await after.release();
    }
  });

  it('per-key state expires: leases by their TTL, counters FENCE_GRACE_MS later, readers with their grants', async () => {
    const { backend } = newLocker();
    const keys = [unique('exp-a'), unique('exp-b')].sort();
    const writers = requestsFor(keys, 'write', 300);
    const granted = (await backend.attemptAll(writers))!;
    expect(granted.every((r) => r.granted)).toBe(true);
    for (const key of keys) {
      const k = backend.keysOf(key);
      const lockLeft = await admin.pttl(k.lock);
      expect(lockLeft).toBeGreaterThan(0);
      expect(lockLeft).toBeLessThanOrEqual(300);
      const fenceLeft = await admin.pttl(k.fence);
      expect(fenceLeft).toBeGreaterThan(300);
      expect(fenceLeft).toBeLessThanOrEqual(fenceTtlMs(300));
      expect(await admin.exists(k.queue, k.waiters, k.readers, k.readerTokens)).toBe(0);
    }
    await delay(450);
    // Both leases ended by themselves: a new round takes both keys.
    const readers = requestsFor(keys, 'read', 300);
    const again = (await backend.attemptAll(readers))!;
    expect(again.every((r) => r.granted)).toBe(true);
    for (const key of keys) {
      const k = backend.keysOf(key);
      for (const name of [k.readers, k.readerTokens]) {
        const left = await admin.pttl(name);
        expect(left).toBeGreaterThan(0);
        expect(left).toBeLessThanOrEqual(300);
      }
    }
    await delay(450);
    for (const key of keys) {
      const k = backend.keysOf(key);
      expect(await admin.exists(k.lock, k.readers, k.readerTokens)).toBe(0);
    }
  });

  it('with a failover epoch (as on Sentinel) every token carries it; a connection change withdraws every grant', async () => {
    // The backend as Sentinel builds it, on the single node, with an epoch that is not 0 and a
    // connection generation this test moves (a reconnection during the script).
    const client = new Redis(REDIS_URL);
    clients.push(client);
    let generation = 0;
    const epochs = {
      get generation() {
        return generation;
      },
      current: async () => ({ epoch: 7n, generation: 0 }),
    } as unknown as FailoverEpoch;
    const settings = {
      prefix,
      notifications: false,
      minReplicas: 0,
      replicaTimeoutMs: 200,
      commandTimeoutMs: 5_000,
    };
    const backend = new RedisBackend(client, false, settings, epochs);
    const keys = [unique('epoch-a'), unique('epoch-b')].sort();
    const requests = requestsFor(keys);
    const grants = await releaseGranted(backend, requests, await backend.attemptAll(requests));
    for (const [i, granted] of grants.entries()) {
      expect(granted.token >> 53n).toBe(7n);
      // The key's counter is the token's low part; a later single attempt is above it.
      expect(await admin.get(backend.keysOf(keys[i]!).fence)).toBe(
        String(counterOf(granted.token)),
      );
      const single = { ...requests[i]!, owner: newOwner() };
      const after = await backend.attempt(single);
      expect(after.granted && after.token).toBeGreaterThan(granted.token);
      await backend.abandon(single);
    }
    generation = 1;
    const moved = await backend.attemptAll(requestsFor(keys)).catch((e: unknown) => e);
    expect(moved).toBeInstanceOf(BackendError);
    expect(String((moved as Error).message)).toMatch(/connection to the primary changed/);
    for (const key of keys) expect(await admin.exists(backend.keysOf(key).lock)).toBe(0);
  });

  it('a lost reply retried by the same owners gets the same grants, refreshed', async () => {
    const { backend } = newLocker();
    const keys = [unique('again-a'), unique('again-b')].sort();
    for (const mode of ['write', 'read'] as const) {
      const requests = requestsFor(
        keys.map((k) => `${k}-${mode}`),
        mode,
        5_000,
      );
      const first = (await backend.attemptAll(requests)) as Granted[];
      const again = (await backend.attemptAll(
        requests.map((r) => ({ ...r, ttlMs: 9_000 })),
      )) as Granted[];
      expect(again.map((r) => r.token)).toEqual(first.map((r) => r.token));
      const k = backend.keysOf(requests[0]!.key);
      // Refreshed to the retry's TTL.
      expect(await admin.pttl(mode === 'write' ? k.lock : k.readers)).toBeGreaterThan(5_000);
      await releaseGranted(backend, requests, first);
    }
  });
});

describe('attemptAll on Redis Cluster', () => {
  const seeds = () => [{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }];

  it('hash slots computed here match CLUSTER KEYSLOT', async () => {
    const cluster = new Cluster(seeds());
    clients.push(cluster);
    const names = [
      'plain',
      'fencelock:{order:1}:lock',
      '{user1000}.following',
      'foo{}{bar}',
      'foo{{bar}}zap',
      'foo{bar}{zap}',
      '{}',
      '}{',
      'é{ü}',
      '日本{語}',
      ...Array.from({ length: 50 }, () => randomBytes(6).toString('base64')),
    ];
    for (const name of names) {
      expect(hashSlot(name), name).toBe(Number(await cluster.cluster('KEYSLOT', name)));
    }
  });

  it('keys sharing a slot go in one script; keys in several slots are answered null and taken key by key', async () => {
    const { locker, backend, commands } = newLocker(new Cluster(seeds()));
    await locker.inspect(unique('warm-up'));
    // Keys whose text up to the first '}' is the same share the hash tag, so the slot.
    const tag = unique('order');
    const tagged = [`${tag}}:pay`, `${tag}}:ship`, `${tag}}:stock`];
    commands.reset();
    const together = await locker.acquireAll(tagged, { ttlMs: 10_000 });
    expect(commands.names).toEqual(['evalsha']);
    expect(commands.sha1s).toEqual([attemptAllScript.sha1]);
    expect(await together.release()).toEqual(['released', 'released', 'released']);

    // Two keys without a common tag whose slots happen to be equal count as one slot too.
    const a = unique('slot-a');
    const slot = hashSlot(backend.keysOf(a).lock);
    let b = unique('slot-b');
    while (hashSlot(backend.keysOf(b).lock) !== slot) b = unique('slot-b');
    const pair = requestsFor([a, b]);
    await releaseGranted(backend, pair, await backend.attemptAll(pair));

    // Keys in different slots: null, with no command sent, and acquireAll still takes them.
    let c = unique('slot-c');
    while (hashSlot(backend.keysOf(c).lock) === slot) c = unique('slot-c');
    commands.reset();
    expect(await backend.attemptAll(requestsFor([a, c]))).toBeNull();
    expect(commands.names).toEqual([]);
    const apart = await locker.acquireAll([a, c], { ttlMs: 10_000 });
    expect(apart.isHeld).toBe(true);
    expect(commands.sha1s).not.toContain(attemptAllScript.sha1);
    expect(await apart.release()).toEqual(['released', 'released']);
    // Still all or nothing key by key: one held key, nothing of the other stays held.
    const holder = await locker.acquire(c, { ttlMs: 10_000 });
    expect(await locker.tryAcquireAll([a, c], { ttlMs: 10_000 })).toBeNull();
    expect((await backend.inspect(a)).holder).toBeNull();
    await holder.release();
  });

  it('a node-redis Cluster client: one script for one slot, null for several', async () => {
    const cluster = createCluster({
      rootNodes: [{ url: `redis://127.0.0.1:${CLUSTER_PORT_BASE + 1}` }],
    });
    cluster.on('error', () => undefined);
    await cluster.connect();
    try {
      const backend = createRedisBackend({ client: cluster as never, prefix });
      const tag = unique('nrc');
      const requests = requestsFor([`${tag}}:a`, `${tag}}:b`]);
      await releaseGranted(backend, requests, await backend.attemptAll(requests));
      const a = unique('nrc-a');
      let c = unique('nrc-c');
      while (hashSlot(backend.keysOf(c).lock) === hashSlot(backend.keysOf(a).lock)) {
        c = unique('nrc-c');
      }
      expect(await backend.attemptAll(requestsFor([a, c]))).toBeNull();
      await backend.close();
    } finally {
      await cluster.close();
    }
  });
});

describe('attemptAll through Sentinel', () => {
  const primary = new Redis(SENTINEL_DATA_PORT_BASE + 1, '127.0.0.1', { lazyConnect: true });
  clients.push(primary);
  const sentinelLocker = (query = '') => {
    const locker = createLocker(`${SENTINEL_URL}?prefix=${prefix}${query}`);
    lockers.push(locker);
    return locker;
  };

  it('the failover epoch leads every token of the script, as a single attempt’s', async () => {
    const locker = sentinelLocker();
    const backend = await locker.backend();
    const keys = [unique('epoch-a'), unique('epoch-b')].sort();
    const single = await locker.acquire(keys[0]!, { ttlMs: 10_000 });
    const epoch = single.fencingToken >> 53n;
    // The epoch the Sentinels give the primary (0 until a failover; the stub case above checks
    // one that is not 0).
    const sentinel = new Redis(SENTINEL_PORT_BASE + 1, '127.0.0.1');
    clients.push(sentinel);
    const fields = (await sentinel.call('SENTINEL', 'MASTER', 'fencelock')) as string[];
    expect(epoch).toBe(BigInt(fields[fields.indexOf('config-epoch') + 1]!));
    await single.release();
    const requests = requestsFor(keys);
    const results = (await backend.attemptAll!(requests)) as Granted[];
    for (const [i, r] of results.entries()) {
      expect(r.token >> 53n).toBe(epoch);
      expect(r.token).toBeGreaterThan(i === 0 ? single.fencingToken : 0n);
      const stored = await primary.get(
        createRedisBackend({ url: 'redis://127.0.0.1:1', prefix }).keysOf(keys[i]!).lock,
      );
      expect(stored).toBe(`${requests[i]!.owner}:${counterOf(r.token)}`);
      await backend.release({ key: keys[i]!, owner: requests[i]!.owner, fencingToken: r.token });
    }
  });

  it('minReplicas: one WAIT for every grant; too few acknowledgements release them all', async () => {
    const locker = sentinelLocker('&minReplicas=2&replicaTimeoutMs=100');
    const backend = await locker.backend();
    const keys = [unique('wait-a'), unique('wait-b'), unique('wait-c')].sort();
    const error = await backend.attemptAll!(requestsFor(keys)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendError);
    expect(String((error as Error).message)).toMatch(
      /only 1 of 2 replicas acknowledged the 3 grants/,
    );
    const names = createRedisBackend({ url: 'redis://127.0.0.1:1', prefix });
    for (const key of keys) expect(await primary.get(names.keysOf(key).lock)).toBeNull();
    // With the one replica there is, the round is granted after one WAIT.
    const ok = sentinelLocker('&minReplicas=1');
    const all = await ok.acquireAll(keys, { ttlMs: 10_000 });
    expect(all.isHeld).toBe(true);
    await all.release();
  });
});
