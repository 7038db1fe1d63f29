/**
 * The one-operation multi-key attempt (`Backend.attemptAll`, `capabilities.attemptAll`),
 * registered by `describeBackend` for every backend and skipped where the capability is false:
 * every key granted or none, nothing queued, idempotent per owner, readers sharing; and
 * `acquireAll` using it instead of an attempt per key.
 */
import { randomBytes } from 'node:crypto';
import { expect, it, vi } from 'vitest';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  Granted,
  LockMode,
} from '../../packages/fencelock/src/core/backend.js';
import type { Locker, LockerOptions } from '../../packages/fencelock/src/index.js';

/** What the cases need from the suite. */
export interface AttemptAllSuite {
  newClient(options?: LockerOptions): Promise<{ locker: Locker }>;
  uniqueKey(label: string): string;
}

/** Single attempts at `keys` (sorted here), each with an owner of its own. */
export function requestsFor(
  keys: readonly string[],
  mode: LockMode = 'write',
  ttlMs = 10_000,
): AttemptRequest[] {
  return [...keys].sort().map((key) => ({
    key,
    owner: randomBytes(16).toString('hex'),
    ttlMs,
    mode,
    autoRenew: false,
    willWait: false,
  }));
}

/** Release every granted answer of `requests`. */
async function releaseGranted(
  backend: Backend,
  requests: readonly AttemptRequest[],
  results: readonly AttemptResult[],
): Promise<void> {
  for (const [i, result] of results.entries()) {
    if (!result.granted) continue;
    const { key, owner } = requests[i]!;
    expect(await backend.release({ key, owner, fencingToken: result.token })).toBe('released');
  }
}

/** Register the cases (inside `describeBackend`'s describe). */
export function describeAttemptAllContract(suite: AttemptAllSuite): void {
  const { newClient, uniqueKey } = suite;

  /**
   * Fresh keys of one case, one per suffix, sharing their text up to the first `}`: on Redis
   * Cluster that is the keys' hash tag (`<prefix>:{<key>}:…`), so they are in one slot and the
   * engine can take them in one script; elsewhere they are just distinct keys.
   */
  const keysTogether = (label: string, suffixes: readonly string[]) => {
    const base = uniqueKey(label);
    return suffixes.map((s) => `${base}}:${s}`);
  };

  /** The backend of a new client, or undefined (the case skips) without the capability. */
  const backendWithAttemptAll = async () => {
    const { locker } = await newClient();
    const backend = await locker.backend();
    return { locker, backend: backend.capabilities.attemptAll ? backend : undefined };
  };

  it('attemptAll: every free key granted in one call, each token above the key’s last', async (t) => {
    const { locker, backend } = await backendWithAttemptAll();
    if (!backend) return t.skip();
    const keys = keysTogether('together', ['b', 'a', 'c']);
    // One key has had a holder: its next token is above that one's.
    const earlier = await locker.acquire(keys[1]!, { ttlMs: 10_000 });
    expect(await earlier.release()).toBe('released');
    const requests = requestsFor(keys);
    const results = await backend.attemptAll!(requests);
    if (results === null) return t.skip(); // keys the engine cannot take together (Cluster slots)
    expect(results.map((r) => r.granted)).toEqual([true, true, true]);
    for (const [i, request] of requests.entries()) {
      const info = await backend.inspect(request.key);
      expect(info.holder?.owner).toBe(request.owner);
      expect(info.holder?.fencingToken).toBe((results[i] as Granted).token);
    }
    const earlierIndex = requests.findIndex((r) => r.key === keys[1]);
    expect((results[earlierIndex] as Granted).token).toBeGreaterThan(earlier.fencingToken);
    // Asked again by the same owners (a lost reply retried): the same grants.
    const again = await backend.attemptAll!(requests);
    expect(again!.map((r) => (r.granted ? r.token : null))).toEqual(
      results.map((r) => (r as Granted).token),
    );
    await releaseGranted(backend, requests, results);
  });

  it('attemptAll: one held key and none is granted; nothing is queued', async (t) => {
    const { locker, backend } = await backendWithAttemptAll();
    if (!backend) return t.skip();
    const keys = keysTogether('none', ['1', '2', '3']).sort();
    const holder = await locker.acquire(keys[1]!, { ttlMs: 10_000 });
    const requests = requestsFor(keys);
    const results = await backend.attemptAll!(requests);
    if (results === null) return t.skip();
    expect(results.map((r) => r.granted)).toEqual([false, false, false]);
    for (const key of [keys[0]!, keys[2]!]) {
      expect((await backend.inspect(key)).holder).toBeNull();
    }
    // The refused attempts left no entry in any line: the holder's release frees the key for a
    // single attempt at once, and the free keys take one at once.
    expect(await holder.release()).toBe('released');
    const other = await newClient();
    for (const key of keys) {
      const lease = await other.locker.tryAcquire(key, { ttlMs: 10_000 });
      expect(lease, key).not.toBeNull();
      expect(await lease!.release()).toBe('released');
    }
  });

  it('attemptAll: readers share keys; a writer among them is refused', async (t) => {
    const { locker, backend } = await backendWithAttemptAll();
    if (!backend?.capabilities.modes.includes('read')) return t.skip();
    const keys = keysTogether('read', ['1', '2']).sort();
    const first = requestsFor(keys, 'read');
    const second = requestsFor(keys, 'read');
    const firstResults = await backend.attemptAll!(first);
    if (firstResults === null) return t.skip();
    const secondResults = await backend.attemptAll!(second);
    expect([...firstResults, ...secondResults!].every((r) => r.granted)).toBe(true);
    const writers = requestsFor(keys);
    expect((await backend.attemptAll!(writers))!.map((r) => r.granted)).toEqual([false, false]);
    expect(await locker.tryAcquire(keys[0]!, { ttlMs: 10_000 })).toBeNull();
    await releaseGranted(backend, first, firstResults);
    await releaseGranted(backend, second, secondResults!);
  });

  it('acquireAll makes one attemptAll call instead of an attempt per key', async (t) => {
    const { locker, backend } = await backendWithAttemptAll();
    if (!backend) return t.skip();
    const attemptAll = vi.spyOn(backend, 'attemptAll');
    const attempt = vi.spyOn(backend, 'attempt');
    try {
      const keys = keysTogether('spy', ['1', '2', '3']);
      const all = await locker.acquireAll(keys, { ttlMs: 10_000 });
      expect(attemptAll).toHaveBeenCalledTimes(1);
      const answered = await attemptAll.mock.results[0]!.value;
      // Keys the engine cannot take together are attempted one by one instead.
      expect(attempt).toHaveBeenCalledTimes(answered === null ? 3 : 0);
      expect(all.isHeld).toBe(true);
      expect(await all.release()).toEqual(['released', 'released', 'released']);
    } finally {
      attemptAll.mockRestore();
      attempt.mockRestore();
    }
  });
}
