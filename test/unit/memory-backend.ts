/**
 * An in-memory Backend built from the contract, for unit tests of the core only (no engine is
 * involved in unit tests; integration tests use real engines). Time is `performance.now()`, so
 * fake timers drive expiry. Failure switches let tests make renewals fail or hang.
 */
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  ElectedLeader,
  ElectionWatch,
  Granted,
  LeaseRef,
  ListedLock,
  ListPage,
  ListRequest,
  LockInfo,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../packages/fencelock/src/core/backend.js';
import { BackendError } from '../../packages/fencelock/src/errors.js';

/** The longest first TTL of a grant `handOffAfterMs` hands over, ms. */
export const HANDOFF_FIRST_TTL_MS = 2_000;

interface Entry {
  owner: string;
  token: bigint;
  expiresAt: number;
  /** The grant's lock-delay, ms (`AttemptRequest.lockDelayMs`). */
  lockDelayMs?: number;
}

export class MemoryBackend implements Backend {
  readonly name = 'memory';
  readonly maxTtlMs = 2_147_483_647;
  /** Write locks only; no sessions, no waiting line; tests may swap in other facts. */
  capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write'] as const),
    sessions: false,
    queue: false,
    batchRenew: false,
    permits: false,
    attemptAll: false,
    list: false,
    election: false,
    lockDelay: false,
  });
  readonly calls: Record<string, number> = {};
  readonly entries = new Map<string, Entry>();
  readonly fences = new Map<string, bigint>();
  /** Per object key: no grant before this time (a lock-delay after a grant that ran out). */
  readonly delayedUntil = new Map<string, number>();
  /** 'ok' | 'fail' (reject with BackendError) | 'hang' (never answer). */
  renewMode: 'ok' | 'fail' | 'hang' = 'ok';
  closed = false;
  /** Latency of every attempt, ms (a slow engine). */
  attemptDelayMs = 0;
  /** 'ok', 'hang' (never answer) or 'apply-then-fail' (grant, then lose the reply). */
  attemptMode: 'ok' | 'hang' | 'apply-then-fail' = 'ok';
  /** Releases to fail (reject with BackendError, nothing deleted) before they answer again. */
  failReleases = 0;
  /** 'ok' or 'hang' (never answer). */
  abandonMode: 'ok' | 'hang' = 'ok';
  /** A session whose end the backend reports on every grant (`Granted.lost`), if set. */
  session: AbortController | undefined;
  /** Passed on every refusal as `recheckAfterMs`, with a change notification that never fires. */
  recheckAfterMs: number | undefined;
  /**
   * Set: a refused waiter's change notification comes this many ms later with the key handed to
   * it (as a Redis release hands it to the head of the line): the holder's entry is replaced by
   * the waiter's for a first TTL of min(its ttlMs, `HANDOFF_FIRST_TTL_MS`), and the wait resolves
   * with that grant (`handedAt` set). A waiter whose wait ends first gets nothing handed.
   */
  handOffAfterMs: number | undefined;

  /** Each election object's value (under its object key, see `#objectKey`). */
  readonly values = new Map<string, string>();
  /** Subscribers of `watchElection`, per election name. */
  readonly watchers = new Map<string, Set<() => void>>();
  /** Passed as every election watch's `recheckAfterMs`. */
  electionRecheckAfterMs = 60_000;

  /** Where a request's object lives: an election's apart from the lock of the same key. */
  #objectKey(ref: { key: string; election?: unknown }): string {
    return ref.election ? `election\u0000${ref.key}` : ref.key;
  }

  #notify(objectKey: string): void {
    if (!objectKey.startsWith('election\u0000')) return;
    for (const onChange of this.watchers.get(objectKey.slice('election\u0000'.length)) ?? []) {
      onChange();
    }
  }

  #count(op: string): void {
    this.calls[op] = (this.calls[op] ?? 0) + 1;
  }

  get totalCalls(): number {
    return Object.values(this.calls).reduce((a, b) => a + b, 0);
  }

  #live(key: string): Entry | undefined {
    const e = this.entries.get(key);
    if (e && e.expiresAt <= performance.now()) {
      this.entries.delete(key);
      if (e.lockDelayMs !== undefined) this.delayedUntil.set(key, e.expiresAt + e.lockDelayMs);
      return undefined;
    }
    return e;
  }

  async attempt(r: AttemptRequest): Promise<AttemptResult> {
    this.#count('attempt');
    if (this.attemptDelayMs > 0) await new Promise((r) => setTimeout(r, this.attemptDelayMs));
    if (this.attemptMode === 'hang') return new Promise(() => {});
    const result = this.#attempt(r);
    if (result.granted && r.election) {
      this.values.set(this.#objectKey(r), r.election.value);
      this.#notify(this.#objectKey(r));
    }
    if (this.attemptMode === 'apply-then-fail') {
      throw new BackendError(this.name, 'attempt', new Error('reply lost'));
    }
    if (result.granted && this.session) return { ...result, lost: this.session.signal };
    if (!result.granted && this.handOffAfterMs !== undefined) {
      const delayMs = this.handOffAfterMs;
      return {
        granted: false,
        waitForChange: (signal, maxMs) =>
          new Promise<Granted | undefined>((resolve) => {
            const timer = setTimeout(() => resolve(this.#handOff(r)), delayMs);
            const end = setTimeout(() => {
              clearTimeout(timer);
              resolve(undefined);
            }, maxMs);
            signal.addEventListener('abort', () => {
              clearTimeout(timer);
              clearTimeout(end);
              resolve(undefined);
            });
          }),
      };
    }
    if (!result.granted && this.recheckAfterMs !== undefined) {
      return {
        granted: false,
        recheckAfterMs: this.recheckAfterMs,
        waitForChange: (signal, maxMs) =>
          new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, maxMs);
            signal.addEventListener('abort', () => {
              clearTimeout(timer);
              resolve();
            });
          }),
      };
    }
    return result;
  }

  /** Hand the key to `r`'s owner now, with a new token and a short first TTL. */
  #handOff(r: AttemptRequest): Granted {
    const token = (this.fences.get(r.key) ?? 0n) + 1n;
    const ttlMs = Math.min(r.ttlMs, HANDOFF_FIRST_TTL_MS);
    this.fences.set(r.key, token);
    const handedAt = performance.now();
    this.entries.set(r.key, { owner: r.owner, token, expiresAt: handedAt + ttlMs });
    return { granted: true, token, ttlMs, handedAt };
  }

  #attempt(request: AttemptRequest): AttemptResult {
    const r = { ...request, key: this.#objectKey(request) };
    const e = this.#live(r.key);
    const delayLeftMs = (this.delayedUntil.get(r.key) ?? 0) - performance.now();
    if (e === undefined && delayLeftMs > 0) return { granted: false, holderTtlMs: delayLeftMs };
    if (e && e.owner !== r.owner) {
      return { granted: false, holderTtlMs: e.expiresAt - performance.now() };
    }
    if (e) {
      e.expiresAt = performance.now() + r.ttlMs;
      return { granted: true, token: e.token, ttlMs: r.ttlMs };
    }
    const token = (this.fences.get(r.key) ?? 0n) + 1n;
    this.fences.set(r.key, token);
    this.entries.set(r.key, {
      owner: r.owner,
      token,
      expiresAt: performance.now() + r.ttlMs,
      ...(r.lockDelayMs === undefined ? {} : { lockDelayMs: r.lockDelayMs }),
    });
    return { granted: true, token, ttlMs: r.ttlMs };
  }

  async renew(l: LeaseRef, ttlMs: number): Promise<RenewResult> {
    this.#count('renew');
    if (this.renewMode === 'fail') throw new BackendError(this.name, 'renew', new Error('down'));
    if (this.renewMode === 'hang') return new Promise(() => {});
    const e = this.#live(this.#objectKey(l));
    if (!e) return { ok: false, reason: 'not-held' };
    if (e.owner !== l.owner || e.token !== l.fencingToken)
      return { ok: false, reason: 'not-owner' };
    e.expiresAt = performance.now() + ttlMs;
    return { ok: true, ttlMs };
  }

  async release(l: LeaseRef): Promise<ReleaseOutcome> {
    this.#count('release');
    if (this.failReleases > 0) {
      this.failReleases -= 1;
      throw new BackendError(this.name, 'release', new Error('down'));
    }
    const key = this.#objectKey(l);
    const e = this.#live(key);
    if (!e) return 'not-held';
    if (e.owner !== l.owner || e.token !== l.fencingToken) return 'not-owner';
    this.entries.delete(key);
    this.#notify(key);
    return 'released';
  }

  async abandon(r: AttemptRequest): Promise<void> {
    this.#count('abandon');
    if (this.abandonMode === 'hang') return new Promise(() => {});
    const key = this.#objectKey(r);
    if (this.entries.get(key)?.owner === r.owner) {
      this.entries.delete(key);
      this.#notify(key);
    }
  }

  async proclaim(l: LeaseRef, value: string): Promise<ProclaimOutcome> {
    this.#count('proclaim');
    const key = this.#objectKey({ ...l, election: true });
    const e = this.#live(key);
    if (!e) return 'not-held';
    if (e.owner !== l.owner || e.token !== l.fencingToken) return 'not-owner';
    this.values.set(key, value);
    this.#notify(key);
    return 'proclaimed';
  }

  async leader(key: string): Promise<ElectedLeader | null> {
    this.#count('leader');
    const objectKey = this.#objectKey({ key, election: true });
    const e = this.#live(objectKey);
    if (!e) return null;
    const value = this.values.get(objectKey) ?? '';
    // No waiting line here: the leader is the only candidate.
    return {
      owner: e.owner,
      term: e.token,
      value,
      ttlMs: e.expiresAt - performance.now(),
      candidates: 1,
    };
  }

  async watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    this.#count('watchElection');
    let set = this.watchers.get(key);
    if (set === undefined) {
      set = new Set();
      this.watchers.set(key, set);
    }
    const watchers = set;
    const subscriber = () => onChange();
    watchers.add(subscriber);
    return {
      recheckAfterMs: this.electionRecheckAfterMs,
      stop: () => {
        watchers.delete(subscriber);
        if (watchers.size === 0 && this.watchers.get(key) === watchers) this.watchers.delete(key);
      },
    };
  }

  async inspect(key: string): Promise<LockInfo> {
    this.#count('inspect');
    const e = this.#live(key);
    return {
      key,
      holder: e
        ? { owner: e.owner, fencingToken: e.token, ttlMs: e.expiresAt - performance.now() }
        : null,
      lastFencingToken: this.fences.get(key) ?? 0n,
    };
  }

  /**
   * Held keys under the prefix in key order, `pageSize` keys walked per page (as PostgreSQL's
   * walk: a page can come back short, or empty, with a cursor). The cursor is the last key walked.
   * Callable whatever `capabilities.list` says (tests switch it on).
   */
  async list(request: ListRequest): Promise<ListPage> {
    this.#count('list');
    const keys = [...this.entries.keys()]
      .sort()
      .filter((key) => request.cursor === null || key > request.cursor);
    const walked = keys.slice(0, request.pageSize);
    const entries = walked.flatMap((key): ListedLock[] => {
      const e = this.#live(key);
      if (e === undefined || !key.startsWith(request.prefix)) return [];
      const holder = {
        owner: e.owner,
        fencingToken: e.token,
        ttlMs: e.expiresAt - performance.now(),
      };
      return [{ key, mode: 'write', holders: [holder], waiters: 0 }];
    });
    return { entries, cursor: walked.length === request.pageSize ? walked.at(-1)! : null };
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
