/**
 * The backend contract suite: one `describeBackend(name, factory)` run against every backend on
 * its real engine (Curator's `TestInterProcessMutexBase`, node-redlock's `run(namespace, client)`).
 * A backend passes only if all of it passes.
 *
 * The factory makes a fresh backend with its own connection each time it is called, all on the
 * same store (same Redis prefix, same SQLite file), plus the engine hooks that only tests may
 * use. Engine specifics stay in those hooks, so etcd, ZooKeeper and PostgreSQL reuse this file.
 *
 * Timing bounds are loose on purpose (shared machines): the assertions are on engine state,
 * tokens and event counts.
 */
import { randomBytes } from 'node:crypto';
import diagnostics_channel from 'node:diagnostics_channel';
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type AcquireEvent,
  type AttemptRequest,
  type Backend,
  CHANNELS,
  createLocker,
  InvalidArgumentError,
  type Lease,
  type Locker,
  type LockerOptions,
  LockLostError,
  LockTimeoutError,
  type ReleaseEvent,
} from '../../packages/fencelock/src/index.js';
import { describeAttemptAllContract } from './attempt-all.contract.js';
import { describeElectionContract } from './election.contract.js';
import { describeListContract } from './list.contract.js';
import { describeLockDelayContract } from './lock-delay.contract.js';
import { describeMultiLockContract } from './multi-lock.contract.js';
import { describeSemaphoreContract } from './semaphore.contract.js';

/** Engine access the suite needs that the backend contract does not offer (tests only). */
export interface EngineHooks {
  /**
   * Make the engine lose `key`'s lease behind the backend's back, as eviction, a flush or an
   * expiry missed by the client would (Redis: DEL of the lock key; SQLite: DELETE of the row).
   * The fencing counter stays.
   */
  deleteKey(key: string): Promise<void>;
  /**
   * Close what the fixture opened beside the backend for this client (an engine client the user
   * owns, which the backend leaves open by contract), once the locker is closed. Optional.
   */
  closeClient?(): Promise<void>;
}

/**
 * What the suite must know about an engine to scale its expectations: properties the engine is
 * free to choose under the contract (docs/semantics.md), stated per
 * engine so that every other assertion stays exact. What the backend states itself in
 * `backend.capabilities` (modes, sessions, waiting line, batched renewals) is read from there and
 * never restated here.
 */
export interface EngineTraits {
  /**
   * Granularity of the engine's TTLs, ms: a lease of `ttlMs` lasts `ttlMs` rounded up to a
   * multiple of it (Redis, SQLite: 1; etcd: 1000, whole-second leases).
   */
  readonly ttlGranularityMs: number;
  /**
   * Shortest TTL the engine grants, ms; shorter requests are raised to it (Redis, SQLite: 1;
   * etcd: its minimum lease TTL, 1.5 × the election timeout rounded up to whole seconds).
   */
  readonly minTtlMs: number;
  /**
   * Fencing tokens of a key come from a per-key counter: the first grant of a fresh key gets
   * 1n and every grant the next integer (the SQLite counter). False when tokens come from a
   * sequence shared with other keys (etcd revisions) or from a clock (Redis and Redlock: the
   * server's µs): they then only strictly increase per key, which is all the contract asks.
   */
  readonly consecutiveTokens: boolean;
  /**
   * `inspect().lastFencingToken` remembers the highest token after the key is freed (released,
   * expired or deleted by `deleteKey`): the per-key counter stays (on Redis, for 5 s past the
   * lease's TTL; the contract's cases look sooner). False for etcd, which reports the create
   * revision of the newest contender key, 0n when no contender key exists.
   */
  readonly lastTokenOutlivesHolder: boolean;
  /**
   * The `LockLostError` reason when `deleteKey` takes a held key away: `not-held` where the
   * engine drops the key alone (the default), `session-lost` where it can only drop the
   * connection or session the key lives in (PostgreSQL advisory locks).
   */
  readonly lossReason?: 'not-held' | 'session-lost';
}

/** One fresh backend instance (its own connection) and the engine hooks that go with it. */
export interface BackendFixture extends EngineHooks, EngineTraits {
  readonly backend: Backend;
  /**
   * The same store as a store URL (`createLocker(url)`: same keys, prefix, schema or file), which
   * the cases that run clients in other processes open there.
   */
  readonly storeUrl: string;
}

/** Makes a fresh backend on the shared store of this run. Called once per simulated client. */
export type BackendFactory = () => BackendFixture | Promise<BackendFixture>;

/** A simulated client: a locker over its own backend instance. */
interface Client extends EngineHooks {
  readonly locker: Locker;
  readonly backend: Backend;
  readonly traits: EngineTraits;
  readonly storeUrl: string;
}

/**
 * The TTL the engine applies to a request of `ttlMs` (whole ms, as the core sends it): rounded
 * up to the engine's granularity, raised to its minimum. Redis and SQLite: `ttlMs` itself.
 */
function engineTtlMs(traits: EngineTraits, ttlMs: number): number {
  const granularity = traits.ttlGranularityMs;
  return Math.max(traits.minTtlMs, Math.ceil(ttlMs / granularity) * granularity);
}

/**
 * How long after a lease's own TTL the engine may take to free its key: 300 ms of slack on any
 * engine, or one TTL granule where that is coarser (etcd checks lease expiry every 500 ms).
 */
function expirySlackMs(traits: EngineTraits): number {
  return Math.max(300, traits.ttlGranularityMs);
}

/**
 * `inspect().lastFencingToken` expected once the holder of `lastToken` is gone and no other
 * contender is queued: the token itself where the per-key counter outlives the holder, else 0n.
 */
function lastTokenWhenFree(traits: EngineTraits, lastToken: bigint): bigint {
  return traits.lastTokenOutlivesHolder ? lastToken : 0n;
}

/**
 * Check the token of a grant made after `previous` (the highest token issued before it on the
 * same key): strictly greater, and exactly the next integer on a per-key counter.
 */
function expectNextToken(traits: EngineTraits, token: bigint | undefined, previous: bigint): void {
  expect(token).toBeTypeOf('bigint');
  expect(token).toBeGreaterThan(previous);
  if (traits.consecutiveTokens) expect(token).toBe(previous + 1n);
}

/** The `LockLostError` reason of a lease whose key `deleteKey` took away. */
function lossReasonOf(traits: EngineTraits): 'not-held' | 'session-lost' {
  return traits.lossReason ?? 'not-held';
}

/** Engine traits of a fixture (without its backend and hooks). */
function traitsOf(fixture: BackendFixture): EngineTraits {
  return {
    ttlGranularityMs: fixture.ttlGranularityMs,
    minTtlMs: fixture.minTtlMs,
    consecutiveTokens: fixture.consecutiveTokens,
    lastTokenOutlivesHolder: fixture.lastTokenOutlivesHolder,
    ...(fixture.lossReason === undefined ? {} : { lossReason: fixture.lossReason }),
  };
}

/**
 * An in-memory resource that records who is inside the critical section and the fencing tokens
 * it saw (the fenced register of the fault tests): overlaps and token regressions are counted,
 * never thrown, so a test reports how many happened.
 */
class FencedRegister {
  readonly #inside = new Set<string>();
  overlaps = 0;
  regressions = 0;
  grants = 0;
  lastToken = 0n;

  enter(owner: string, token: bigint): void {
    if (this.#inside.size > 0) this.overlaps += 1;
    if (token <= this.lastToken) this.regressions += 1;
    else this.lastToken = token;
    this.#inside.add(owner);
    this.grants += 1;
  }

  leave(owner: string): void {
    this.#inside.delete(owner);
  }
}

const ENGINE_METHODS = ['attempt', 'renew', 'release', 'abandon', 'inspect'] as const;
type EngineMethod = (typeof ENGINE_METHODS)[number];

/**
 * Instrumentation of a real backend: a plain object that forwards every contract method to it
 * and counts the calls (no behaviour of its own).
 */
function countingBackend(real: Backend): {
  backend: Backend;
  calls: Record<EngineMethod, number>;
  total: () => number;
  attempts: AttemptRequest[];
} {
  const calls: Record<EngineMethod, number> = {
    attempt: 0,
    renew: 0,
    release: 0,
    abandon: 0,
    inspect: 0,
  };
  const attempts: AttemptRequest[] = [];
  const backend: Backend = {
    name: real.name,
    maxTtlMs: real.maxTtlMs,
    capabilities: real.capabilities,
    attempt: (request) => {
      calls.attempt += 1;
      attempts.push(request);
      return real.attempt(request);
    },
    renew: (lease, ttlMs) => {
      calls.renew += 1;
      return real.renew(lease, ttlMs);
    },
    release: (lease) => {
      calls.release += 1;
      return real.release(lease);
    },
    abandon: (request) => {
      calls.abandon += 1;
      return real.abandon(request);
    },
    inspect: (key) => {
      calls.inspect += 1;
      return real.inspect(key);
    },
    close: () => real.close(),
    // The methods its capabilities call for, uncounted.
    ...(real.openSession ? { openSession: (ttlMs: number) => real.openSession!(ttlMs) } : {}),
    ...(real.leaveQueue ? { leaveQueue: (request) => real.leaveQueue!(request) } : {}),
  };
  const total = () => ENGINE_METHODS.reduce((sum, m) => sum + calls[m], 0);
  return { backend, calls, total, attempts };
}

/** Resolves true when `signal` aborts, false after `timeoutMs` (its timer is always cleared). */
async function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<boolean> {
  if (signal.aborted) return true;
  const timeout = new AbortController();
  const onAbort = () => timeout.abort();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    await delay(timeoutMs, undefined, { signal: timeout.signal });
    return signal.aborted;
  } catch {
    return true;
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}

/** Counts of `process.getActiveResourcesInfo()` by resource type. */
function activeResources(): Map<string, number> {
  const counts = new Map<string, number>();
  for (const type of process.getActiveResourcesInfo()) {
    counts.set(type, (counts.get(type) ?? 0) + 1);
  }
  return counts;
}

/** Resources present now beyond `baseline`, per type (empty when nothing leaked). */
function extraResources(baseline: Map<string, number>): Record<string, number> {
  const extra: Record<string, number> = {};
  for (const [type, count] of activeResources()) {
    const more = count - (baseline.get(type) ?? 0);
    if (more > 0) extra[type] = more;
  }
  return extra;
}

function randomOwner(): string {
  return randomBytes(16).toString('hex');
}

function isLockLost(reason: unknown, expected: LockLostError['reason']): boolean {
  return reason instanceof LockLostError && reason.reason === expected;
}

/**
 * Register the contract suite for one backend.
 * @param name engine label shown in test names.
 * @param factory makes a fresh backend on the shared store of this run, with engine hooks.
 */
export function describeBackend(name: string, factory: BackendFactory): void {
  describe(`backend contract: ${name}`, () => {
    const open: Locker[] = [];

    afterEach(async () => {
      await Promise.all(open.splice(0).map((locker) => locker.close()));
    });

    /** A client with its own backend instance; closed after the test. */
    async function newClient(options?: LockerOptions): Promise<Client> {
      const fixture = await factory();
      const locker = createLocker(fixture.backend, options);
      open.push(locker);
      return {
        locker,
        backend: fixture.backend,
        traits: traitsOf(fixture),
        storeUrl: fixture.storeUrl,
        deleteKey: (key) => fixture.deleteKey(key),
        closeClient: async () => {
          await fixture.closeClient?.();
        },
      };
    }

    function uniqueKey(label: string): string {
      return `contract:${label}:${randomBytes(6).toString('hex')}`;
    }

    describeSemaphoreContract({ newClient, uniqueKey });
    describeMultiLockContract({ newClient, uniqueKey });
    describeAttemptAllContract({ newClient, uniqueKey });
    describeListContract({ newClient, uniqueKey });
    describeElectionContract({ newClient, uniqueKey });
    describeLockDelayContract({ newClient, uniqueKey });

    it('mutual exclusion: concurrent clients never overlap and tokens increase', async () => {
      const key = uniqueKey('mutex');
      const register = new FencedRegister();
      const clients = await Promise.all(
        Array.from({ length: 4 }, () =>
          newClient({ retry: { initialDelayMs: 2, maxDelayMs: 40, factor: 2 } }),
        ),
      );
      const cycles = 25;
      const outcomes: string[] = [];
      await Promise.all(
        clients.map(async ({ locker }) => {
          for (let i = 0; i < cycles; i++) {
            const lease = await locker.acquire(key, { ttlMs: 10_000, waitMs: 30_000 });
            register.enter(lease.owner, lease.fencingToken);
            // Random short async work, so the other clients get every chance to interleave.
            await delay(Math.floor(Math.random() * 4));
            if (Math.random() < 0.5) await Promise.resolve();
            register.leave(lease.owner);
            outcomes.push(await lease.release());
          }
        }),
      );
      expect(register.overlaps).toBe(0);
      expect(register.regressions).toBe(0);
      expect(register.grants).toBe(clients.length * cycles);
      expect(outcomes.every((o) => o === 'released')).toBe(true);
      const info = await clients[0]!.locker.inspect(key);
      expect(info.holder).toBeNull();
      const { traits } = clients[0]!;
      expect(info.lastFencingToken).toBe(lastTokenWhenFree(traits, register.lastToken));
      // The next grant still comes after every token the register saw.
      const next = await clients[0]!.locker.tryAcquire(key);
      expectNextToken(traits, next?.fencingToken, register.lastToken);
      expect(await next!.release()).toBe('released');
    });

    it('capabilities: one frozen statement, matched by the optional methods', async () => {
      const { backend } = await newClient();
      const c = backend.capabilities;
      expect(Object.isFrozen(c)).toBe(true);
      expect(c.modes).toContain('write');
      for (const mode of c.modes) expect(['write', 'read']).toContain(mode);
      for (const fact of [c.sessions, c.queue, c.batchRenew]) expect(fact).toBeTypeOf('boolean');
      // A session engine opens sessions; a line outside any session can be left alone.
      expect(typeof backend.openSession === 'function').toBe(c.sessions);
      if (c.queue && !c.sessions) expect(backend.leaveQueue).toBeTypeOf('function');
    });

    it('read locks where capabilities.modes has read: readers share, a writer waits for them', async () => {
      const key = uniqueKey('read');
      const [a, b, c] = await Promise.all([newClient(), newClient(), newClient()]);
      const options = { mode: 'read', ttlMs: 10_000, waitMs: 10_000 } as const;
      if (!a.backend.capabilities.modes.includes('read')) {
        const refused = await a.locker.acquire(key, options).catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(InvalidArgumentError);
        expect((refused as InvalidArgumentError).argument).toBe('mode');
        return;
      }
      const first = await a.locker.acquire(key, options);
      const second = await b.locker.acquire(key, options);
      expect(first.isHeld && second.isHeld).toBe(true);
      expect(await c.locker.tryAcquire(key, { ttlMs: 10_000 })).toBeNull();
      const writing = c.locker.acquire(key, { ttlMs: 10_000, waitMs: 20_000 });
      expect(await first.release()).toBe('released');
      expect(await second.release()).toBe('released');
      const writer = await writing;
      expect(writer.fencingToken).toBeGreaterThan(second.fencingToken);
      expect(await writer.release()).toBe('released');
    });

    it('release with a wrong owner or token is refused and leaves the holder intact', async () => {
      const a = await newClient();
      const b = await newClient();
      // With and without the watchdog: a session-based engine keeps these grants on different
      // engine leases (a shared session, or a lease of the grant's own).
      for (const autoRenew of [true, false]) {
        const key = uniqueKey(`non-owner-${autoRenew ? 'renewed' : 'single'}`);
        const lease = await a.locker.acquire(key, { ttlMs: 10_000, autoRenew });
        const { fencingToken: token, owner } = lease;

        expect(await b.backend.release({ key, owner: randomOwner(), fencingToken: token })).toBe(
          'not-owner',
        );
        expect(await b.backend.release({ key, owner, fencingToken: token + 1n })).toBe('not-owner');
        expect(await b.backend.release({ key, owner, fencingToken: token - 1n })).toBe('not-owner');
        // The holder's own backend instance compares the token too.
        expect(await a.backend.release({ key, owner, fencingToken: token + 7n })).toBe('not-owner');
        // Renewal compares owner and token the same way, and changes nothing when refused.
        expect(await b.backend.renew({ key, owner, fencingToken: token + 1n }, 60_000)).toEqual({
          ok: false,
          reason: 'not-owner',
        });
        expect(
          await b.backend.renew({ key, owner: randomOwner(), fencingToken: token }, 60_000),
        ).toEqual({ ok: false, reason: 'not-owner' });
        expect(await a.backend.renew({ key, owner, fencingToken: token + 1n }, 60_000)).toEqual({
          ok: false,
          reason: 'not-owner',
        });
        // The refused calls changed nothing, not even on the holder's own backend instance: its
        // renewal still succeeds.
        // (A session engine may add its validity bound as `validUntil`.)
        expect(await a.backend.renew({ key, owner, fencingToken: token }, 10_000)).toMatchObject({
          ok: true,
          ttlMs: engineTtlMs(a.traits, 10_000),
        });

        const info = await b.locker.inspect(key);
        expect(info.holder?.owner).toBe(owner);
        expect(info.holder?.fencingToken).toBe(token);
        expect(info.holder?.ttlMs).toBeGreaterThan(5_000);
        expect(info.holder?.ttlMs).toBeLessThanOrEqual(10_000);
        expect(info.lastFencingToken).toBe(token);
        expect(await b.locker.tryAcquire(key)).toBeNull();
        expect(lease.isHeld).toBe(true);
        expect(await lease.release()).toBe('released');
        expect((await b.locker.inspect(key)).holder).toBeNull();
      }
    });

    it('a late release after expiry and re-acquisition by another client is not-owner', async () => {
      const key = uniqueKey('late-release');
      const a = await newClient();
      const b = await newClient();
      const stale = await a.locker.acquire(key, { ttlMs: 300, autoRenew: false });
      expect(stale.ttlMs).toBe(engineTtlMs(a.traits, 300));
      expect(await abortedWithin(stale.signal, stale.ttlMs + 4_700)).toBe(true);
      await delay(300); // past the engine's own expiry too (the acquire below waits for the rest)
      const fresh = await b.locker.acquire(key, { ttlMs: 10_000, waitMs: 5_000 });
      expect(fresh.fencingToken).toBeGreaterThan(stale.fencingToken);

      expect(await stale.release()).toBe('not-owner');
      const info = await b.locker.inspect(key);
      expect(info.holder?.owner).toBe(fresh.owner);
      expect(info.holder?.fencingToken).toBe(fresh.fencingToken);
      expect(info.holder?.ttlMs).toBeGreaterThan(5_000);
      expect(await a.locker.tryAcquire(key)).toBeNull();
      expect(await fresh.release()).toBe('released');
    });

    it('release and renew of a free key are not-held and create nothing', async () => {
      const key = uniqueKey('free-release');
      const a = await newClient();
      expect(await a.backend.release({ key, owner: randomOwner(), fencingToken: 1n })).toBe(
        'not-held',
      );
      expect(
        await a.backend.renew({ key, owner: randomOwner(), fencingToken: 1n }, 10_000),
      ).toEqual({ ok: false, reason: 'not-held' });
      const info = await a.locker.inspect(key);
      expect(info.holder).toBeNull();
      expect(info.lastFencingToken).toBe(0n);
      // The key is really free: the first grant gets the first token.
      const lease = await a.locker.tryAcquire(key);
      expectNextToken(a.traits, lease?.fencingToken, info.lastFencingToken);
      const held = await a.locker.inspect(key);
      expect(held.holder?.owner).toBe(lease!.owner);
      expect(held.holder?.fencingToken).toBe(lease!.fencingToken);
      expect(held.lastFencingToken).toBe(lease!.fencingToken);
      expect(await lease!.release()).toBe('released');
    });

    it('expiry frees the key and aborts the lease signal with reason expired', async () => {
      const key = uniqueKey('expiry');
      const a = await newClient();
      const b = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 300, autoRenew: false });
      const grantedAt = performance.now();
      expect(lease.ttlMs).toBe(engineTtlMs(a.traits, 300));
      expect(await b.locker.tryAcquire(key)).toBeNull();

      const expiredBy = lease.ttlMs + expirySlackMs(a.traits);
      await delay(Math.max(0, expiredBy - (performance.now() - grantedAt)));
      const next = await b.locker.tryAcquire(key, { ttlMs: 10_000 });
      expect(next).not.toBeNull();
      expect(next!.fencingToken).toBeGreaterThan(lease.fencingToken);

      expect(lease.signal.aborted).toBe(true);
      expect(lease.signal.reason).toBeInstanceOf(LockLostError);
      expect((lease.signal.reason as LockLostError).reason).toBe('expired');
      expect((lease.signal.reason as LockLostError).code).toBe('ERR_LOCK_LOST');
      expect(lease.isHeld).toBe(false);
      const info = await a.locker.inspect(key);
      expect(info.holder?.owner).toBe(next!.owner);
    });

    it('the watchdog renews a lease past its ttlMs', async () => {
      const key = uniqueKey('renew');
      const a = await newClient();
      const b = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 300 });
      const ttlMs = engineTtlMs(a.traits, 300);
      expect(lease.ttlMs).toBe(ttlMs);
      // Well past the engine's TTL and its expiry slack: only renewals can have kept the key.
      await delay(ttlMs + Math.max(900, expirySlackMs(a.traits)));

      const info = await b.locker.inspect(key);
      expect(info.holder?.owner).toBe(lease.owner);
      expect(info.holder?.fencingToken).toBe(lease.fencingToken);
      expect(info.holder?.ttlMs).toBeLessThanOrEqual(ttlMs);
      expect(info.lastFencingToken).toBe(lease.fencingToken);
      expect(await b.locker.tryAcquire(key)).toBeNull();
      expect(lease.isHeld).toBe(true);
      expect(lease.signal.aborted).toBe(false);

      expect(await lease.release()).toBe('released');
      expect((await b.locker.inspect(key)).holder).toBeNull();
    });

    it('fencing tokens strictly increase over 1,000 grants across owners', async () => {
      const key = uniqueKey('tokens');
      const clients = [await newClient(), await newClient()];
      const tokens: bigint[] = [];
      const owners = new Set<string>();
      for (let i = 0; i < 1_000; i++) {
        const lease = await clients[i % 2]!.locker.tryAcquire(key, { autoRenew: false });
        if (lease === null) throw new Error(`grant ${i} refused on a free key`);
        tokens.push(lease.fencingToken);
        owners.add(lease.owner);
        expect(await lease.release()).toBe('released');
      }
      let regressions = 0;
      for (let i = 1; i < tokens.length; i++) if (tokens[i]! <= tokens[i - 1]!) regressions += 1;
      expect(regressions).toBe(0);
      expect(new Set(tokens).size).toBe(1_000);
      expect(owners.size).toBe(1_000);
      const { traits } = clients[0]!;
      if (traits.consecutiveTokens) expect(tokens.at(-1)! - tokens[0]!).toBe(999n);
      expect((await clients[0]!.locker.inspect(key)).lastFencingToken).toBe(
        lastTokenWhenFree(traits, tokens.at(-1)!),
      );
      const next = await clients[1]!.locker.tryAcquire(key, { autoRenew: false });
      expectNextToken(traits, next?.fencingToken, tokens.at(-1)!);
      expect(await next!.release()).toBe('released');
    });

    it('tryAcquire returns null on a held key; acquire times out and leaves nothing behind', async () => {
      const key = uniqueKey('timeout');
      const a = await newClient();
      const b = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 10_000 });
      expect(await b.locker.tryAcquire(key)).toBeNull();

      const startedAt = performance.now();
      const error = await b.locker.acquire(key, { waitMs: 300 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      const waited = performance.now() - startedAt;
      expect(error).toBeInstanceOf(LockTimeoutError);
      expect((error as LockTimeoutError).code).toBe('ERR_LOCK_TIMEOUT');
      expect((error as LockTimeoutError).key).toBe(key);
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(10_000);

      expect(b.locker.activeLeases).toBe(0);
      // The timed-out attempt is withdrawn in the background (a queue-based engine such as etcd
      // has a waiter's entry to delete; on a loaded machine the attempt itself may land after
      // the deadline and be withdrawn then). close() waits for those clean-ups; then nothing of
      // the waiter may be left.
      await b.locker.close();
      const info = await a.locker.inspect(key);
      expect(info.holder?.owner).toBe(lease.owner);
      expect(info.holder?.fencingToken).toBe(lease.fencingToken);
      expect(info.lastFencingToken).toBe(lease.fencingToken);
      expect(await lease.release()).toBe('released');
      expect((await a.locker.inspect(key)).holder).toBeNull();
    });

    it('a waiter is granted promptly after the holder releases', async () => {
      const key = uniqueKey('handoff');
      const a = await newClient();
      const b = await newClient();
      const held = await a.locker.acquire(key, { ttlMs: 10_000 });
      let grantedBeforeRelease = false;
      let released = false;
      const waiting = b.locker.acquire(key, { waitMs: 5_000, ttlMs: 10_000 }).then((lease) => {
        grantedBeforeRelease = !released;
        return { lease, at: performance.now() };
      });
      await delay(150);
      const releasedAt = performance.now();
      released = true;
      expect(await held.release()).toBe('released');
      const { lease, at } = await waiting;
      expect(grantedBeforeRelease).toBe(false);
      expect(lease.fencingToken).toBeGreaterThan(held.fencingToken);
      expect(at - releasedAt).toBeLessThan(2_500);
      expect((await a.locker.inspect(key)).holder?.owner).toBe(lease.owner);
      expect(await lease.release()).toBe('released');
    });

    it('reentrant withLock and acquire reuse the lease; the engine releases after the outer hold', async () => {
      const key = uniqueKey('reentrant');
      const a = await newClient();
      const b = await newClient();
      let outerLease: Lease | undefined;
      await a.locker.withLock(
        key,
        async (outer) => {
          outerLease = outer;
          expect(outer.holdCount).toBe(1);
          const inner = await a.locker.withLock(
            key,
            async (nested) => {
              expect(nested).toBe(outer);
              expect(nested.fencingToken).toBe(outer.fencingToken);
              expect(outer.holdCount).toBe(2);
              return nested;
            },
            { reentrant: true },
          );
          expect(inner).toBe(outer);
          expect(outer.holdCount).toBe(1);
          // The inner release did not reach the engine.
          expect((await b.locker.inspect(key)).holder?.owner).toBe(outer.owner);

          const again = await a.locker.acquire(key, { reentrant: true });
          expect(again).toBe(outer);
          expect(again.fencingToken).toBe(outer.fencingToken);
          expect(outer.holdCount).toBe(2);
          expect(await again.release()).toBe('released');
          expect(outer.holdCount).toBe(1);
          const info = await b.locker.inspect(key);
          expect(info.holder?.owner).toBe(outer.owner);
          expect(info.holder?.fencingToken).toBe(outer.fencingToken);
          // No second grant was made.
          expect(info.lastFencingToken).toBe(outer.fencingToken);
          expect(await b.locker.tryAcquire(key)).toBeNull();
        },
        { reentrant: true },
      );
      expect(outerLease).toBeDefined();
      expect(outerLease!.holdCount).toBe(0);
      expect((await b.locker.inspect(key)).holder).toBeNull();
      // Over-release: nothing more to release, the count never goes negative.
      expect(await outerLease!.release()).toBe('not-held');
      expect(outerLease!.holdCount).toBe(0);
      const next = await b.locker.tryAcquire(key);
      expectNextToken(b.traits, next?.fencingToken, outerLease!.fencingToken);
      expect(await next!.release()).toBe('released');
    });

    it('without reentrant, two handles in one process exclude each other', async () => {
      const key = uniqueKey('non-reentrant');
      const a = await newClient();
      const first = a.locker.lock(key, { ttlMs: 10_000 });
      const second = a.locker.lock(key, { ttlMs: 10_000 });
      const lease = await first.acquire();
      expect(await second.tryAcquire()).toBeNull();
      // The same handle, too, is a new contender without `reentrant`.
      expect(await first.tryAcquire()).toBeNull();
      expect(first.lease).toBe(lease);
      // And inside withLock, a nested acquire without `reentrant` does not reuse the lease.
      await a.locker
        .withLock(
          key,
          async () => {
            expect(await a.locker.tryAcquire(key)).toBeNull();
          },
          { waitMs: 0 },
        )
        .then(
          () => expect.unreachable('withLock on a held key with waitMs 0 must time out'),
          (error: unknown) => expect(error).toBeInstanceOf(LockTimeoutError),
        );
      expect(await lease.release()).toBe('released');
      const other = key.concat(':nested');
      await a.locker.withLock(other, async (outer) => {
        expect(await a.locker.tryAcquire(other)).toBeNull();
        expect(outer.holdCount).toBe(1);
      });
      expect((await a.locker.inspect(other)).holder).toBeNull();
    });

    it('lease loss aborts the signal with LockLostError (not-held); a later release is not-held', async () => {
      const key = uniqueKey('loss');
      const a = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 600 });
      await a.deleteKey(key);
      expect(await abortedWithin(lease.signal, 5_000)).toBe(true);
      expect(isLockLost(lease.signal.reason, lossReasonOf(a.traits))).toBe(true);
      expect(lease.isHeld).toBe(false);
      expect(a.locker.activeLeases).toBe(0);
      expect(await lease.release()).toBe('not-held');
      const info = await a.locker.inspect(key);
      expect(info.holder).toBeNull();
      expect(info.lastFencingToken).toBe(lastTokenWhenFree(a.traits, lease.fencingToken));
      // The engine lost the lease, not the key's token order.
      const next = await a.locker.tryAcquire(key);
      expectNextToken(a.traits, next?.fencingToken, lease.fencingToken);
      expect(await next!.release()).toBe('released');
    });

    it('withLock rejects with LockLostError when the lease is lost mid-callback', async () => {
      const key = uniqueKey('loss-withlock');
      const a = await newClient();
      const work = new AbortController();
      let callbackFinished = false;
      const startedAt = performance.now();
      const outcome = await a.locker
        .withLock(
          key,
          async () => {
            await a.deleteKey(key);
            // Work that ignores the lease signal: withLock must not wait for it.
            await delay(10_000, undefined, { signal: work.signal }).catch(() => undefined);
            callbackFinished = true;
          },
          { ttlMs: 600 },
        )
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      const elapsed = performance.now() - startedAt;
      work.abort();
      expect(outcome).toBeInstanceOf(LockLostError);
      expect((outcome as LockLostError).reason).toBe(lossReasonOf(a.traits));
      expect((outcome as LockLostError).key).toBe(key);
      expect(callbackFinished).toBe(false);
      expect(elapsed).toBeLessThan(8_000);
      expect((await a.locker.inspect(key)).holder).toBeNull();
    });

    it('extend after the key vanished rejects with LockLostError and does not re-create it', async () => {
      const key = uniqueKey('extend-lost');
      const a = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 10_000, autoRenew: false });
      await lease.extend(20_000);
      expect(lease.ttlMs).toBe(engineTtlMs(a.traits, 20_000));
      // Longer than any TTL the engine may apply to the 10 s grant: the extension reached it.
      expect((await a.locker.inspect(key)).holder?.ttlMs).toBeGreaterThan(
        engineTtlMs(a.traits, 10_000),
      );
      await a.deleteKey(key);

      const error = await lease.extend(10_000).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(LockLostError);
      expect((error as LockLostError).reason).toBe(lossReasonOf(a.traits));
      expect(lease.signal.aborted).toBe(true);
      expect(lease.signal.reason).toBe(error);
      const info = await a.locker.inspect(key);
      expect(info.holder).toBeNull();
      expect(info.lastFencingToken).toBe(lastTokenWhenFree(a.traits, lease.fencingToken));
      // Still lost on a second try, still nothing created.
      await expect(lease.extend(10_000)).rejects.toBeInstanceOf(LockLostError);
      expect((await a.locker.inspect(key)).holder).toBeNull();
    });

    it('bad input is rejected with InvalidArgumentError before any engine call', async () => {
      const fixture = await factory();
      const traits = traitsOf(fixture);
      const counted = countingBackend(fixture.backend);
      const locker = createLocker(counted.backend);
      open.push(locker);
      const key = uniqueKey('bad-input');

      async function rejects(run: () => Promise<unknown>, argument: string): Promise<void> {
        let error: unknown;
        try {
          await run();
        } catch (e) {
          error = e;
        }
        expect(error, `expected InvalidArgumentError for ${argument}`).toBeInstanceOf(
          InvalidArgumentError,
        );
        expect((error as InvalidArgumentError).code).toBe('ERR_INVALID_ARGUMENT');
        expect((error as InvalidArgumentError).argument).toContain(argument);
      }

      // A promise-returning method rejects; it does not throw synchronously.
      const pending = (() => {
        try {
          return locker.acquire('');
        } catch (error) {
          return error;
        }
      })();
      expect(pending).toBeInstanceOf(Promise);
      await rejects(() => pending as Promise<unknown>, 'key');

      await rejects(() => locker.tryAcquire(''), 'key');
      await rejects(() => locker.withLock('', () => 1), 'key');
      await rejects(() => locker.acquire('k'.repeat(2_000)), 'key');
      await rejects(() => locker.acquire('é'.repeat(600)), 'key'); // 1,200 UTF-8 bytes
      await rejects(() => locker.acquire(42 as never), 'key');
      await rejects(() => locker.inspect(''), 'key');
      for (const ttlMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, '1000', 2 ** 53]) {
        await rejects(() => locker.acquire(key, { ttlMs: ttlMs as number }), 'ttlMs');
        await rejects(() => locker.tryAcquire(key, { ttlMs: ttlMs as number }), 'ttlMs');
      }
      await rejects(() => locker.acquire(key, { waitMs: -1 }), 'waitMs');
      await rejects(() => locker.acquire(key, { waitMs: Number.NaN }), 'waitMs');
      await rejects(() => locker.acquire(key, { ttl: 1_000 } as never), 'ttl');
      await rejects(() => locker.acquire(key, { timeout: 1_000 } as never), 'timeout');
      await rejects(() => locker.acquire(key, { autoRenew: 'yes' } as never), 'autoRenew');
      expect(() => createLocker(counted.backend, { ttlMs: 0 })).toThrow(InvalidArgumentError);
      expect(counted.total()).toBe(0);

      // A lease's extend checks its argument before the engine, too.
      const lease = await locker.acquire(key, { ttlMs: 10_000, autoRenew: false });
      const before = counted.total();
      await rejects(() => lease.extend(0), 'ttlMs');
      await rejects(() => lease.extend(Number.NaN), 'ttlMs');
      expect(counted.total()).toBe(before);
      expect(counted.calls.renew).toBe(0);
      expect(await lease.release()).toBe('released');

      // Fractional TTLs are rounded up to the next whole millisecond; the engine may round that
      // up to its own granularity and minimum (Redis, SQLite: 124 ms itself), and says so.
      const small = await locker.acquire(key, { ttlMs: 123.45, autoRenew: false });
      expect(counted.attempts.at(-1)?.ttlMs).toBe(124);
      const smallTtlMs = engineTtlMs(traits, 124);
      expect(small.ttlMs).toBe(smallTtlMs);
      const smallInfo = await locker.inspect(key);
      // It may already have expired on a slow machine; if it is there, its TTL is at most that.
      if (smallInfo.holder !== null) expect(smallInfo.holder.ttlMs).toBeLessThanOrEqual(smallTtlMs);
      await small.release();
      const large = await locker.acquire(key, { ttlMs: 12_345.01, autoRenew: false });
      expect(counted.attempts.at(-1)?.ttlMs).toBe(12_346);
      expect(large.ttlMs).toBe(engineTtlMs(traits, 12_346));
      const largeInfo = await locker.inspect(key);
      expect(largeInfo.holder?.owner).toBe(large.owner);
      expect(largeInfo.holder?.ttlMs).toBeLessThanOrEqual(engineTtlMs(traits, 12_346));
      expect(largeInfo.holder?.ttlMs).toBeGreaterThan(10_000);
      expect(await large.release()).toBe('released');
    });

    it('close() leaves no open handles behind', async () => {
      const key = uniqueKey('leak');
      await delay(50);
      const baseline = activeResources();
      const a = await newClient();
      const b = await newClient();
      const held = await a.locker.acquire(key, { ttlMs: 3_000 });
      // A waiter exercises the wait path (pub/sub subscriber where the engine has one).
      const waiting = b.locker.acquire(key, { waitMs: 5_000, ttlMs: 3_000 });
      await delay(100);
      expect(await held.release()).toBe('released');
      const second = await waiting;
      await second.extend(3_000);
      expect(await second.release()).toBe('released');
      // One lease left held on purpose: close() must release it and stop its watchdog.
      await a.locker.acquire(uniqueKey('leak-held'), { ttlMs: 3_000 });
      await Promise.all([a.locker.close(), b.locker.close()]);
      // Clients the user owns stay open after close() by contract; the fixture closes them.
      await Promise.all([a.closeClient?.(), b.closeClient?.()]);

      let extra = extraResources(baseline);
      for (let i = 0; i < 40 && Object.keys(extra).length > 0; i++) {
        await delay(50);
        extra = extraResources(baseline);
      }
      expect(extra).toEqual({});
    });

    it('close() releases a lease still held', async () => {
      const key = uniqueKey('close-release');
      const a = await newClient();
      const b = await newClient();
      const lease = await a.locker.acquire(key, { ttlMs: 30_000 });
      expect(await b.locker.tryAcquire(key)).toBeNull();
      await a.locker.close();
      expect(lease.holdCount).toBe(0);
      expect(a.locker.activeLeases).toBe(0);
      const next = await b.locker.tryAcquire(key);
      expect(next).not.toBeNull();
      expect(next!.fencingToken).toBeGreaterThan(lease.fencingToken);
      // A closed locker refuses new work before any engine call.
      await expect(a.locker.tryAcquire(key)).rejects.toBeInstanceOf(InvalidArgumentError);
    });

    it('publishes one granted acquire event and one released release event', async () => {
      const key = uniqueKey('events');
      const a = await newClient();
      const acquires: AcquireEvent[] = [];
      const releases: ReleaseEvent[] = [];
      const onAcquire = (message: unknown) => {
        const event = message as AcquireEvent;
        if (event.key === key) acquires.push(event);
      };
      const onRelease = (message: unknown) => {
        const event = message as ReleaseEvent;
        if (event.key === key) releases.push(event);
      };
      diagnostics_channel.subscribe(CHANNELS.acquire, onAcquire);
      diagnostics_channel.subscribe(CHANNELS.release, onRelease);
      try {
        const lease = await a.locker.acquire(key, { ttlMs: 10_000 });
        expect(await lease.release()).toBe('released');
        expect(acquires).toHaveLength(1);
        expect(acquires[0]).toMatchObject({
          backend: a.backend.name,
          key,
          owner: lease.owner,
          outcome: 'granted',
          fencingToken: lease.fencingToken,
          attempts: 1,
        });
        expect(releases).toHaveLength(1);
        expect(releases[0]).toMatchObject({
          backend: a.backend.name,
          key,
          owner: lease.owner,
          outcome: 'released',
          fencingToken: lease.fencingToken,
        });
        expect(releases[0]!.holdMs).toBeGreaterThanOrEqual(0);
      } finally {
        diagnostics_channel.unsubscribe(CHANNELS.acquire, onAcquire);
        diagnostics_channel.unsubscribe(CHANNELS.release, onRelease);
      }
    });
  });
}
