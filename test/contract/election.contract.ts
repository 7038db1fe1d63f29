/**
 * The leader-election part of the backend contract (`locker.election`), registered by
 * `describeBackend` for every backend: where `capabilities.election` is false, the refusal;
 * elsewhere one leader at a time with strictly increasing terms, the value kept by
 * compare-and-set, a hand-over on resign without waiting for a TTL, the next candidate after a
 * leader's grant ran out, arrival order where the engine keeps a line, and observers that see
 * each change in order.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import {
  type Backend,
  type ElectionLeader,
  InvalidArgumentError,
  type Leadership,
  type Locker,
  type LockerOptions,
  LockLostError,
} from '../../packages/fencelock/src/index.js';

/** What the election cases need from the suite. */
export interface ElectionSuite {
  newClient(options?: LockerOptions): Promise<{
    locker: Locker;
    backend: Backend;
    traits: { readonly minTtlMs: number; readonly ttlGranularityMs: number };
  }>;
  uniqueKey(label: string): string;
}

/** Collects what an observer reports, and lets a case wait for a report. */
class Observed {
  readonly seen: (ElectionLeader | null)[] = [];
  readonly done: Promise<void>;
  readonly #stop = new AbortController();
  #waiters: (() => void)[] = [];

  constructor(iterable: (signal: AbortSignal) => AsyncIterable<ElectionLeader | null>) {
    this.done = (async () => {
      for await (const leader of iterable(this.#stop.signal)) {
        this.seen.push(leader);
        for (const wake of this.#waiters.splice(0)) wake();
      }
    })();
  }

  /** Resolves once a report matches `test`, or rejects after `timeoutMs`. */
  async until(test: (leader: ElectionLeader | null) => boolean, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    while (!this.seen.some(test)) {
      if (Date.now() > deadline) throw new Error(`not observed; saw ${describe(this.seen)}`);
      await Promise.race([new Promise<void>((r) => this.#waiters.push(r)), delay(100)]);
    }
  }

  /** Resolves once the reports so far satisfy `test`, or rejects after `timeoutMs`. */
  async untilSeen(test: (seen: readonly (ElectionLeader | null)[]) => boolean, timeoutMs = 10_000) {
    const deadline = Date.now() + timeoutMs;
    while (!test(this.seen)) {
      if (Date.now() > deadline) throw new Error(`not observed; saw ${describe(this.seen)}`);
      await Promise.race([new Promise<void>((r) => this.#waiters.push(r)), delay(100)]);
    }
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.done;
  }
}

function describe(seen: readonly (ElectionLeader | null)[]): string {
  return JSON.stringify(seen.map((l) => (l === null ? null : [String(l.term), l.value])));
}

/** Register the election cases (inside `describeBackend`'s describe). */
export function describeElectionContract(suite: ElectionSuite): void {
  const { newClient, uniqueKey } = suite;

  it('election: refused before any engine call where capabilities.election is false', async () => {
    const { locker, backend } = await newClient();
    if (backend.capabilities.election) return;
    const refused = await locker
      .election(uniqueKey('no-election'))
      .campaign('a')
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgumentError);
    expect((refused as InvalidArgumentError).argument).toBe('store');
    const observing = await locker
      .election(uniqueKey('no-election'))
      .observe()
      [Symbol.asyncIterator]()
      .next()
      .catch((e: unknown) => e);
    expect((observing as InvalidArgumentError).argument).toBe('store');
  });

  it('election: one leader; the term is its fencing token; value, proclaim and resign', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.election) return t.skip();
    const name = uniqueKey('election');
    const election = a.locker.election(name);
    expect(await election.leader()).toBeNull();
    const leading = await election.campaign('host-a:8080', { ttlMs: 10_000 });
    expect(leading.term).toBe(leading.fencingToken);
    expect(leading.value).toBe('host-a:8080');
    expect(await b.locker.election(name).leader()).toEqual({
      owner: leading.owner,
      term: leading.term,
      value: 'host-a:8080',
      ttlMs: expect.any(Number),
      candidates: 1,
    });
    // Another candidate does not lead while it leads.
    expect(await b.locker.election(name).tryCampaign('host-b:8080')).toBeNull();
    // The election is not the lock, nor the semaphore, of the same key.
    const lock = await b.locker.tryAcquire(name, { ttlMs: 10_000 });
    expect(lock).not.toBeNull();
    await lock!.release();
    await leading.proclaim('host-a:9090');
    expect(leading.value).toBe('host-a:9090');
    expect((await b.locker.election(name).leader())?.value).toBe('host-a:9090');
    expect(await leading.resign()).toBe('released');
    expect(await b.locker.election(name).leader()).toBeNull();
    const next = await b.locker.election(name).campaign('host-b:8080', { ttlMs: 10_000 });
    expect(next.term).toBeGreaterThan(leading.term);
    await next.resign();
  });

  it('election: a bad value is refused before any engine call', async () => {
    const { locker } = await newClient();
    const election = locker.election(uniqueKey('bad-value'));
    for (const value of [undefined, 7, 'a\0b', '\ud800', 'x'.repeat(65_537)]) {
      const refused = await election.campaign(value as string).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe('value');
    }
  });

  it('election: a resign hands over to the waiting candidate without waiting for a TTL', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.election) return t.skip();
    const name = uniqueKey('handover');
    const ttlMs = 30_000;
    const first = await a.locker.election(name).campaign('a', { ttlMs });
    const second = b.locker.election(name).campaign('b', { ttlMs });
    await delay(300);
    const resignedAt = performance.now();
    await first.resign();
    const leading = await second;
    // Far less than the TTL: the engine's notification woke the candidate.
    expect(performance.now() - resignedAt).toBeLessThan(5_000);
    expect(leading.term).toBeGreaterThan(first.term);
    expect(await a.locker.election(name).leader()).toMatchObject({
      owner: leading.owner,
      value: 'b',
    });
    await leading.resign();
  });

  it('election: a leader whose grant ran out is followed by the next candidate, with a greater term; its proclaim is refused', async (t) => {
    const [a, b] = await Promise.all([newClient(), newClient()]);
    if (!a.backend.capabilities.election) return t.skip();
    const name = uniqueKey('expiry');
    const ttlMs = Math.max(a.traits.minTtlMs, 400);
    const lapsing = await a.locker.election(name).campaign('lapsing', { ttlMs, autoRenew: false });
    const next = await b.locker
      .election(name)
      .campaign('next', { ttlMs: 30_000, waitMs: ttlMs + 10_000 });
    expect(next.term).toBeGreaterThan(lapsing.term);
    expect(lapsing.signal.aborted).toBe(true);
    await expect(lapsing.proclaim('stale')).rejects.toBeInstanceOf(LockLostError);
    // The engine's compare-and-set refuses the old term (a paused leader that still believes).
    const stale = await a.backend.proclaim!(
      { key: name, owner: lapsing.owner, fencingToken: lapsing.term, election: true },
      'stale',
    );
    expect(['not-held', 'not-owner']).toContain(stale);
    expect(await a.locker.election(name).leader()).toMatchObject({
      owner: next.owner,
      term: next.term,
      value: 'next',
    });
    await next.resign();
  });

  it('election: candidates lead in arrival order where the engine keeps a line', async (t) => {
    const clients = await Promise.all([newClient(), newClient(), newClient(), newClient()]);
    if (!clients[0]!.backend.capabilities.election || !clients[0]!.backend.capabilities.queue) {
      return t.skip();
    }
    const name = uniqueKey('order');
    const ttlMs = 30_000;
    const first = await clients[0]!.locker.election(name).campaign('0', { ttlMs });
    const waiting: Promise<Leadership>[] = [];
    for (const [i, client] of clients.slice(1).entries()) {
      waiting.push(client.locker.election(name).campaign(String(i + 1), { ttlMs }));
      await delay(200);
    }
    const order: string[] = [];
    let current = first;
    for (let i = 0; i < waiting.length; i += 1) {
      await current.resign();
      current = await Promise.race(waiting.filter((_, j) => !order.includes(String(j + 1))));
      order.push(current.value);
    }
    expect(order).toEqual(['1', '2', '3']);
    await current.resign();
  });

  it('election: the leader read counts the candidates, the leader among them', async (t) => {
    const clients = await Promise.all([newClient(), newClient(), newClient()]);
    const { locker, backend } = clients[0]!;
    if (!backend.capabilities.election || !backend.capabilities.queue) return t.skip();
    const name = uniqueKey('candidates');
    const election = locker.election(name);
    /** Reads the leader until its count of candidates is `count` (a candidate lines up async). */
    const countReaches = async (count: number) => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const read = await election.leader();
        if (read?.candidates === count || Date.now() > deadline) return read?.candidates;
        await delay(50);
      }
    };
    const ttlMs = 30_000;
    const first = await election.campaign('0', { ttlMs });
    expect(await countReaches(1)).toBe(1);
    const stops = [new AbortController(), new AbortController()];
    const waiting = clients.slice(1).map((client, i) =>
      client.locker
        .election(name)
        .campaign(String(i + 1), { ttlMs, signal: stops[i]!.signal })
        .catch((error: unknown) => error),
    );
    expect(await countReaches(3)).toBe(3);
    // A candidate that gives up leaves the line.
    stops[1]!.abort();
    expect(await waiting[1]).toBeInstanceOf(Error);
    expect(await countReaches(2)).toBe(2);
    // The next leader is counted, the one that resigned is not.
    await first.resign();
    const next = (await waiting[0]) as Leadership;
    expect(await election.leader()).toMatchObject({ owner: next.owner, candidates: 1 });
    await next.resign();
  });

  it('election: observers see the current leader, then each change in order, terms never back', async (t) => {
    const [a, b, watcher] = await Promise.all([newClient(), newClient(), newClient()]);
    if (!a.backend.capabilities.election) return t.skip();
    const name = uniqueKey('observe');
    const election = watcher.locker.election(name);
    const observed = new Observed((signal) => election.observe({ signal }));
    await observed.until((l) => l === null);
    const ttlMs = 10_000;
    const first = await a.locker.election(name).campaign('a1', { ttlMs });
    await observed.until((l) => l?.value === 'a1');
    await first.proclaim('a2');
    await observed.until((l) => l?.value === 'a2');
    const second = b.locker.election(name).campaign('b1', { ttlMs });
    await delay(200);
    await first.resign();
    const leading = await second;
    await observed.until((l) => l?.value === 'b1');
    await leading.resign();
    await observed.untilSeen((seen) => seen.length > 4 && seen.at(-1) === null);
    await observed.stop();
    const values = observed.seen.map((l) => l?.value ?? null);
    // Each change once, in order; between a resign and the next grant nobody may lead (null).
    expect(values.filter((v) => v !== null)).toEqual(['a1', 'a2', 'b1']);
    expect(values[0]).toBeNull();
    expect(values.at(-1)).toBeNull();
    const terms = observed.seen.flatMap((l) => (l === null ? [] : [l.term]));
    expect(terms[0]).toBe(first.term);
    expect(terms[1]).toBe(first.term);
    expect(terms[2]).toBe(leading.term);
    expect(leading.term).toBeGreaterThan(first.term);
  });

  it('election: an observer sees a leader whose grant ran out replaced', async (t) => {
    const [a, b, watcher] = await Promise.all([newClient(), newClient(), newClient()]);
    if (!a.backend.capabilities.election) return t.skip();
    const name = uniqueKey('observe-expiry');
    // Long enough for the observer's first read to see the leader on a loaded machine.
    const ttlMs = Math.max(a.traits.minTtlMs, 1_500);
    const lapsing = await a.locker.election(name).campaign('lapsing', { ttlMs, autoRenew: false });
    const observed = new Observed((signal) => watcher.locker.election(name).observe({ signal }));
    await observed.until((l) => l?.value === 'lapsing');
    // After the TTL, nobody leads: the observer reads again when the leader's TTL ends.
    await observed.until((l) => l === null, ttlMs + 10_000);
    const next = await b.locker.election(name).campaign('next', { ttlMs: 10_000 });
    await observed.until((l) => l?.value === 'next');
    await observed.stop();
    expect(observed.seen.map((l) => l?.value ?? null)).toEqual(['lapsing', null, 'next']);
    expect(next.term).toBeGreaterThan(lapsing.term);
    await next.resign();
  });

  it('election: terms keep increasing after the election was idle', async (t) => {
    const { locker, backend, traits } = await newClient();
    if (!backend.capabilities.election) return t.skip();
    const name = uniqueKey('idle');
    const ttlMs = Math.max(traits.minTtlMs, 200);
    const first = await locker.election(name).campaign('a', { ttlMs });
    await first.resign();
    // Longer than a Redis lock's fencing counter outlives its last grant (5 s past its TTL).
    await delay(ttlMs + 5_500);
    const second = await locker.election(name).campaign('b', { ttlMs });
    expect(second.term).toBeGreaterThan(first.term);
    await second.resign();
  }, 30_000);

  it('election: withLeadership runs the callback as leader and resigns after it', async (t) => {
    const { locker, backend } = await newClient();
    if (!backend.capabilities.election) return t.skip();
    const election = locker.election(uniqueKey('with'));
    const term = await election.withLeadership('me', async (leadership) => {
      expect((await election.leader())?.owner).toBe(leadership.owner);
      return leadership.term;
    });
    expect(typeof term).toBe('bigint');
    expect(await election.leader()).toBeNull();
  });
}
