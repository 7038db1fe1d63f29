/**
 * Leader elections in the core (primitives/election.ts, election-observer.ts, the
 * owner-addressed campaign of core/owner-grants.ts) over the in-memory backend built from the
 * contract: the checks before any engine call, a leadership's proclaim and its loss, and the
 * observer — first state, each change, a term that goes back skipped, a re-read at the leader's
 * TTL end, the subscription stopped however the iteration ends.
 */
import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { ElectedLeader } from '../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  type ElectionLeader,
  InvalidArgumentError,
  type Locker,
  LockLostError,
  NotLockOwnerError,
} from '../../packages/fencelock/src/index.js';
import { MemoryBackend } from './memory-backend.js';

const lockers: Locker[] = [];
afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
});

function electingLocker(election = true) {
  const backend = new MemoryBackend();
  backend.capabilities = Object.freeze({ ...backend.capabilities, election });
  const locker = createLocker(backend);
  lockers.push(locker);
  return { locker, backend };
}

/** The next `count` reports of `iterator`. */
async function next(
  iterator: AsyncIterator<ElectionLeader | null>,
  count = 1,
): Promise<(string | null)[]> {
  const values: (string | null)[] = [];
  for (let i = 0; i < count; i += 1) {
    const step = await iterator.next();
    if (step.done) break;
    values.push(step.value === null ? null : step.value.value);
  }
  return values;
}

describe('locker.election()', () => {
  it('checks the name, options and value before any engine call', async () => {
    const { locker, backend } = electingLocker();
    expect(() => locker.election('')).toThrow(InvalidArgumentError);
    expect(() => locker.election('e', { mode: 'read' } as never)).toThrow(/options\.mode/);
    const election = locker.election('e');
    await expect(election.campaign('x', { reentrant: true } as never)).rejects.toThrow(
      /options\.reentrant/,
    );
    await expect(election.campaign('a\0b')).rejects.toMatchObject({ argument: 'value' });
    await expect(election.campaign('\udc00')).rejects.toMatchObject({ argument: 'value' });
    // 65,536 bytes fit; one more does not (a 3-byte character over the line).
    await expect(election.tryCampaign('x'.repeat(65_536))).resolves.not.toBeNull();
    await expect(election.campaign(`${'x'.repeat(65_534)}€`)).rejects.toMatchObject({
      argument: 'value',
    });
    expect(() => election.observe({ signal: 'no' } as never)).toThrow(/signal/);
    expect(backend.calls.attempt).toBe(1);
  });

  it('is refused on a store without elections, before any attempt', async () => {
    const { locker, backend } = electingLocker(false);
    const refused = await locker
      .election('e')
      .campaign('v')
      .catch((e: unknown) => e);
    expect((refused as InvalidArgumentError).argument).toBe('store');
    await expect(locker.election('e').leader()).rejects.toMatchObject({ argument: 'store' });
    expect(backend.calls.attempt).toBeUndefined();
  });

  it('campaign answers a Leadership whose term is its token; proclaim stores by compare-and-set', async () => {
    const { locker, backend } = electingLocker();
    const election = locker.election('e');
    const leading = await election.campaign('a', { ttlMs: 10_000 });
    expect(leading.term).toBe(leading.fencingToken);
    expect(leading.election).toBe(true);
    // The election object is not the lock of the same key.
    expect(await locker.tryAcquire('e')).not.toBeNull();
    await leading.proclaim('b');
    expect(leading.value).toBe('b');
    expect(await election.leader()).toMatchObject({ owner: leading.owner, value: 'b' });
    // Taken away on the engine: the proclaim is refused there and the leadership is lost.
    backend.entries.delete('election\u0000e');
    const lost = await leading.proclaim('c').catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(LockLostError);
    expect((lost as LockLostError).reason).toBe('not-held');
    expect(leading.signal.aborted).toBe(true);
    expect(leading.value).toBe('b');
  });

  it('proclaim after resign is refused without an engine call', async () => {
    const { locker, backend } = electingLocker();
    const leading = await locker.election('e').campaign('a');
    expect(await leading.resign()).toBe('released');
    await expect(leading.proclaim('b')).rejects.toBeInstanceOf(NotLockOwnerError);
    expect(backend.calls.proclaim).toBeUndefined();
  });
});

describe('election.observe()', () => {
  it('reports the current leader, then each change, and stops its watch when the caller breaks', async () => {
    const { locker, backend } = electingLocker();
    const election = locker.election('e');
    const iterator = election.observe()[Symbol.asyncIterator]();
    expect(await next(iterator)).toEqual([null]);
    const leading = await election.campaign('a', { ttlMs: 10_000 });
    expect(await next(iterator)).toEqual(['a']);
    await leading.proclaim('b');
    expect(await next(iterator)).toEqual(['b']);
    await leading.resign();
    expect(await next(iterator)).toEqual([null]);
    expect(backend.watchers.size).toBe(1);
    await iterator.return?.();
    expect(backend.watchers.size).toBe(0);
  });

  it('reads again when the leader’s TTL ends, with no notification of the expiry', async () => {
    const { locker, backend } = electingLocker();
    const election = locker.election('e');
    await election.campaign('a', { ttlMs: 150, autoRenew: false });
    const iterator = election.observe()[Symbol.asyncIterator]();
    expect(await next(iterator)).toEqual(['a']);
    const reads = backend.calls.leader;
    // The memory backend drops the expired entry silently, like a Redis key's PEXPIRE.
    expect(await next(iterator)).toEqual([null]);
    expect(backend.calls.leader).toBe(reads! + 1);
  });

  it('skips a read whose term is lower than the last reported', async () => {
    const { locker, backend } = electingLocker();
    const election = locker.election('e');
    const reads: (ElectedLeader | null)[] = [
      { owner: 'b'.repeat(32), term: 7n, value: 'new', ttlMs: 60_000, candidates: 1 },
      // A replica behind: an older leader.
      { owner: 'a'.repeat(32), term: 6n, value: 'old', ttlMs: 60_000, candidates: 1 },
      { owner: 'c'.repeat(32), term: 8n, value: 'next', ttlMs: 60_000, candidates: 1 },
    ];
    backend.leader = async () => reads.shift() ?? null;
    backend.electionRecheckAfterMs = 10;
    const iterator = election.observe()[Symbol.asyncIterator]();
    expect(await next(iterator, 3)).toEqual(['new', 'next', null]);
    await iterator.return?.();
  });

  it('ends without an error when its signal aborts or the locker closes', async () => {
    const { locker, backend } = electingLocker();
    const stop = new AbortController();
    const seen: (string | null)[] = [];
    const observing = (async () => {
      for await (const leader of locker.election('e').observe({ signal: stop.signal })) {
        seen.push(leader?.value ?? null);
      }
    })();
    await delay(20);
    stop.abort();
    await observing;
    expect(seen).toEqual([null]);
    expect(backend.watchers.size).toBe(0);

    const closing = (async () => {
      const values: (string | null)[] = [];
      for await (const leader of locker.election('f').observe()) values.push(leader?.value ?? null);
      return values;
    })();
    await delay(20);
    await locker.close();
    expect(await closing).toEqual([null]);
    expect(backend.watchers.size).toBe(0);
  });

  it('coalesces changes made while the caller had not asked for the next one', async () => {
    const { locker } = electingLocker();
    const election = locker.election('e');
    const iterator = election.observe()[Symbol.asyncIterator]();
    expect(await next(iterator)).toEqual([null]);
    const leading = await election.campaign('a', { ttlMs: 10_000 });
    await leading.proclaim('b');
    await leading.proclaim('c');
    expect(await next(iterator)).toEqual(['c']);
    await iterator.return?.();
  });
});

describe('owner-addressed campaigns', () => {
  it('acquireForOwner with election, proclaimForOwner and releaseForOwner', async () => {
    const { locker } = electingLocker();
    const owner = 'a'.repeat(32);
    const grant = await locker.acquireForOwner('e', owner, {
      ttlMs: 10_000,
      election: { value: 'v1' },
    });
    expect(grant.election).toBe(true);
    const ref = { key: 'e', owner, fencingToken: grant.fencingToken };
    expect(await locker.proclaimForOwner(ref, 'v2')).toBe('proclaimed');
    expect((await locker.election('e').leader())?.value).toBe('v2');
    expect(await locker.proclaimForOwner({ ...ref, fencingToken: 99n }, 'v3')).toBe('not-owner');
    expect(await locker.renewForOwner({ ...ref, election: true }, 5_000)).toEqual({
      outcome: 'renewed',
      ttlMs: 5_000,
    });
    // Without `election: true` the reference names the lock of the key, which nobody holds.
    expect(await locker.releaseForOwner(ref)).toBe('not-held');
    expect(await locker.releaseForOwner({ ...ref, election: true })).toBe('released');
    expect(await locker.election('e').leader()).toBeNull();
  });

  it('refuses election with permits or read mode, and a bad value, before any engine call', async () => {
    const { locker, backend } = electingLocker();
    const owner = 'a'.repeat(32);
    const tries = [
      { ttlMs: 1_000, election: { value: 'v' }, permits: 2 },
      { ttlMs: 1_000, election: { value: 'v' }, mode: 'read' },
      { ttlMs: 1_000, election: { value: 7 } },
      { ttlMs: 1_000, election: { value: 'v', extra: 1 } },
      { ttlMs: 1_000, election: 'v' },
    ];
    for (const options of tries) {
      await expect(locker.acquireForOwner('e', owner, options as never)).rejects.toBeInstanceOf(
        InvalidArgumentError,
      );
    }
    await expect(
      locker.proclaimForOwner({ key: 'e', owner, fencingToken: 1n }, '\0'),
    ).rejects.toMatchObject({
      argument: 'value',
    });
    expect(backend.calls.attempt).toBeUndefined();
    expect(backend.calls.proclaim).toBeUndefined();
  });
});
