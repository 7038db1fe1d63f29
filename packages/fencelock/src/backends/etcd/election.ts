/**
 * Leader elections on etcd, the recipe of etcd's `concurrency.Election` (election.go) with the
 * backend's contender keys (election-key.ts): every candidate puts
 * `<namespace>/elections/<key>/c-<lease hex>-<owner>` bound to its session's lease, with the
 * value it campaigns with as the key's value; the oldest candidate key (lowest create revision)
 * leads, and its create revision is the leader's term (its fencing token). The campaign, the
 * wait on the predecessor, resign and renewal are the lock's (backend.ts); this file holds what
 * only an election does:
 *
 * - `readLeader`: who leads, as `Election.Leader` reads it (the folder's first key by create
 *   revision), plus the remaining TTL of that key's lease.
 * - `proclaimOps`: the put of `Election.Proclaim`, made only while the leader's key still has the
 *   term as its create revision; the key keeps the lease it is on.
 * - `ElectionPrefixWatch`: one etcd watch on the election's folder (etcd's `Observe` watches the
 *   prefix, then the leader's key): every put (a candidate, a proclaim, a key moved to another
 *   lease) and every delete (a resign, a withdrawal, the end of the lease that carried the key)
 *   calls `onChange`.
 *
 * Terms only grow, also after the election was idle for any time: a create revision is the
 * cluster's revision at the put, and etcd's revision never goes back (compaction drops old
 * versions, not the counter), so a later candidate's key is always newer than every earlier one.
 */
import type { Etcd3, IKeyValue, IRangeResponse, IRequestOp, Watcher } from 'etcd3';
import type { ElectedLeader, ElectionWatch } from '../../core/backend.js';
import { candidateOf, candidatesOf } from './election-key.js';
import { prefixEnd } from './key-range.js';
import { delayInForce } from './lock-delay.js';

/**
 * How long the observers trust the election's watch before they read the leader again anyway,
 * ms. The watch is reliable (etcd resumes it from its last revision after a reconnect, and a
 * watch etcd cancels is armed again at once), so this only bounds the cost of a bug.
 */
export const ELECTION_RECHECK_AFTER_MS = 30_000;

/** Pause before arming the election's watch again after a failed try, ms. */
const REARM_AFTER_MS = 1_000;

/** Reads of the leader whose lease ended between its key's read and its TTL's, at most. */
const LEADER_TRIES = 5;

/** Run one engine request as an operation of the backend (errors become `BackendError`). */
export type Call = <T>(run: () => Promise<T>) => Promise<T>;

/**
 * The leader of the election whose folder is `dir`: the oldest candidate key, with its owner,
 * term (create revision), value and the remaining TTL of its lease. Owner, term and value come
 * from one Range (sorted by create revision, one key; one revision of the store, so a snapshot);
 * only a foreign key older than every candidate (not this backend's shape) costs a second Range,
 * of the whole folder at the same revision. Then, at once, the lock-delay marker and the count of
 * candidate keys (keys only), both at that revision. Then one `LeaseTimeToLive` of the leader
 * key's lease: it cannot change owner, term or value (etcd deletes a lease's keys when the lease
 * ends), and a lease found gone means the key went with it, so the leader is read again.
 * @returns null when no candidate is in the folder.
 * @throws what `call` throws when the cluster does not answer, or when the leader changed at
 *   every one of `LEADER_TRIES` reads.
 */
export async function readLeader(
  client: Etcd3,
  dir: string,
  marker: string,
  call: Call,
): Promise<ElectedLeader | null> {
  for (let tries = 1; ; tries++) {
    const found = await oldestCandidate(client, dir, call);
    if (found === undefined) return null;
    const { oldest, revision } = found;
    const entry = candidateOf(oldest, dir)!;
    // A lock-delay in force (lock-delay.ts): the oldest candidate waits for it, nobody leads.
    // The candidates are counted at the same revision, in the same round trip.
    const [delay, candidates] = await Promise.all([
      call(() => client.kv.range({ key: Buffer.from(marker), revision })),
      countCandidates(client, dir, revision, call),
    ]);
    if (delayInForce(delay.kvs[0], entry.order)) return null;
    const ttl = await call(() =>
      client.leaseClient.leaseTimeToLive({ ID: oldest.lease }).catch((error: unknown) => {
        // An older server answers a lease that ended with an error instead of TTL -1.
        if (/lease not found/i.test(String(error))) return { TTL: '-1' };
        throw error;
      }),
    );
    const seconds = Number(ttl.TTL);
    if (seconds >= 0) {
      return {
        owner: entry.owner,
        term: entry.order,
        value: oldest.value.toString(),
        // etcd reports whole seconds, rounded down: a live lease reported at 0 has up to one
        // second left. The end of the lease deletes the key, which the watch notifies.
        ttlMs: Math.max(1_000, seconds * 1_000),
        candidates,
      };
    }
    if (tries >= LEADER_TRIES) {
      await call(() => Promise.reject(new Error('the leader changed at every read')));
    }
  }
}

/**
 * The oldest candidate key under `dir` (with its value) and the revision it was read at, or
 * undefined when there is none.
 */
async function oldestCandidate(
  client: Etcd3,
  dir: string,
  call: Call,
): Promise<{ oldest: IKeyValue; revision: string } | undefined> {
  const folder = Buffer.from(dir);
  const range = {
    key: folder,
    range_end: prefixEnd(folder),
    sort_order: 'Ascend',
    sort_target: 'Create',
  } as const;
  const first: IRangeResponse = await call(() => client.kv.range({ ...range, limit: 1 }));
  const head = first.kvs[0];
  const revision = first.header.revision;
  if (head === undefined) return undefined;
  if (candidateOf(head, dir) !== undefined) return { oldest: head, revision };
  if (!first.more) return undefined;
  // A foreign key leads the order: the whole folder, at the first read's revision.
  const whole: IRangeResponse = await call(() => client.kv.range({ ...range, revision }));
  const oldest = whole.kvs.find((kv) => candidateOf(kv, dir) !== undefined);
  return oldest === undefined ? undefined : { oldest, revision };
}

/** The candidate keys under `dir` at `revision` (one Range of keys without values). */
async function countCandidates(
  client: Etcd3,
  dir: string,
  revision: string,
  call: Call,
): Promise<number> {
  const folder = Buffer.from(dir);
  const keys = await call(() =>
    client.kv.range({ key: folder, range_end: prefixEnd(folder), revision, keys_only: true }),
  );
  return candidatesOf(keys.kvs, dir).length;
}

/**
 * The operation of a proclaim, for a transaction guarded by the candidate key's create revision
 * (the term): put `value` into `key`, keeping the lease the key is on (`ignore_lease`: a grant
 * without the watchdog lives on a lease of its own, not on the session's). etcd's Proclaim puts
 * with the leader's session lease, which is the same lease there.
 */
export function proclaimOp(key: string, value: string): IRequestOp {
  return {
    request_put: { key: Buffer.from(key), value: Buffer.from(value), ignore_lease: true },
  };
}

/**
 * The operation that moves the candidate key `key` to the lease `leaseId`, keeping its value
 * (`ignore_value`): a proclaim landing just before the move is not undone by it.
 */
export function rebindCandidateOp(key: string, leaseId: string): IRequestOp {
  return { request_put: { key: Buffer.from(key), lease: leaseId, ignore_value: true } };
}

/**
 * An election's subscription (`Backend.watchElection`): one etcd watch on the election's folder,
 * created without a start revision, so that etcd starts it at its current revision: every change
 * made after `arm` resolved is an event of it. `onChange` is called on each put and delete under
 * the folder (a candidate joining, a proclaim, a key moved to another lease, a resign or
 * withdrawal, the end of the lease that carried a key: the grant of the next candidate in line is
 * the deletion of its predecessor, since the oldest key leads), and when the watch reconnected
 * (etcd3 resumes it from its last revision, replaying what it missed). A watch etcd cancels (its
 * resume revision compacted away, as line-watch.ts's waiters meet it) is armed again from the
 * current revision, with an `onChange` before and after, so that the observer reads the leader
 * anew; a failed re-arm is tried again every `REARM_AFTER_MS`. Not notified: nothing; the events
 * of candidates that do not lead are spurious calls.
 */
export class ElectionPrefixWatch implements ElectionWatch {
  readonly recheckAfterMs = ELECTION_RECHECK_AFTER_MS;
  readonly #client: Etcd3;
  readonly #prefix: string;
  readonly #onChange: () => void;
  readonly #onStop: (watch: ElectionPrefixWatch) => void;
  readonly #timeoutMs: number;
  #watcher: Watcher | undefined;
  /** The re-arm waiting for its next try. */
  #retry: NodeJS.Timeout | undefined;
  /** Ends the creation of a watcher in flight (its time limit's timer included). */
  #abandonCreate: (() => void) | undefined;
  #stopped = false;

  private constructor(
    client: Etcd3,
    prefix: string,
    onChange: () => void,
    timeoutMs: number,
    onStop: (watch: ElectionPrefixWatch) => void,
  ) {
    this.#client = client;
    this.#prefix = prefix;
    this.#onChange = onChange;
    this.#timeoutMs = timeoutMs;
    this.#onStop = onStop;
  }

  /**
   * Arm a watch on `prefix` (an election's folder).
   * @param timeoutMs how long etcd may take to create it, ms.
   * @param onStop called once by `stop()`.
   * @throws etcd's error when it refuses the watch, or an error saying it was not armed within
   *   `timeoutMs`.
   */
  static async arm(
    client: Etcd3,
    prefix: string,
    onChange: () => void,
    timeoutMs: number,
    onStop: (watch: ElectionPrefixWatch) => void,
  ): Promise<ElectionPrefixWatch> {
    const watch = new ElectionPrefixWatch(client, prefix, onChange, timeoutMs, onStop);
    await watch.#create();
    return watch;
  }

  /** End the watch: synchronous and idempotent, no `onChange` after it, no timer left. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#retry);
    this.#retry = undefined;
    this.#abandonCreate?.();
    const watcher = this.#watcher;
    this.#watcher = undefined;
    // Never let a cancel on a stalled connection hold anyone.
    if (watcher !== undefined) void watcher.cancel().catch(() => undefined);
    this.#onStop(this);
  }

  /** Create the watcher and listen to it; rejects when it cannot be armed. */
  async #create(): Promise<void> {
    const creating = this.#client.watch().prefix(this.#prefix).create();
    let timer: NodeJS.Timeout | undefined;
    const abandoned = new Promise<undefined>((resolve) => {
      this.#abandonCreate = () => resolve(undefined);
    });
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`election watch not armed: no answer within ${this.#timeoutMs} ms`)),
        this.#timeoutMs,
      );
    });
    let watcher: Watcher | undefined;
    try {
      watcher = await Promise.race([creating, abandoned, timedOut]);
    } catch (error) {
      creating.then((w) => w.cancel()).catch(() => undefined);
      throw error;
    } finally {
      clearTimeout(timer);
      this.#abandonCreate = undefined;
    }
    if (watcher === undefined || this.#stopped) {
      creating.then((w) => w.cancel()).catch(() => undefined);
      return;
    }
    this.#listen(watcher);
  }

  #listen(watcher: Watcher): void {
    this.#watcher = watcher;
    const notify = () => {
      if (!this.#stopped && this.#watcher === watcher) this.#onChange();
    };
    watcher.on('put', notify);
    watcher.on('delete', notify);
    watcher.on('connected', notify);
    // Stays attached for the watcher's life: an 'error' emitted with no listener would throw.
    watcher.on('error', () => {
      if (this.#stopped || this.#watcher !== watcher) return;
      this.#watcher = undefined;
      this.#rearm();
    });
  }

  /** Arm a new watcher after etcd cancelled the last one; `onChange` before and once armed. */
  #rearm(): void {
    if (this.#stopped) return;
    this.#onChange();
    this.#create().then(
      () => {
        if (!this.#stopped) this.#onChange();
      },
      () => {
        if (this.#stopped) return;
        this.#retry = setTimeout(() => {
          this.#retry = undefined;
          this.#rearm();
        }, REARM_AFTER_MS);
      },
    );
  }
}
