/**
 * Leader elections on the Redis backend (one node, Sentinel, Cluster, node-redis): the election
 * object of a key, apart from its lock and its semaphore (`electionKeys`, lock-keys.ts;
 * election-line.lua says what each key holds). A candidate is granted as a lock's writer is, in
 * the same FIFO line rules (election-acquire.lua); the leader's grant is one string
 * `<owner>:<term>:<value>` with a PX expiry, so the value lives, is renewed and expires with the
 * grant, and `leader` is one GET + PTTL in one script. The term comes from a counter that never
 * expires (unlike a lock's fence counter, fence-counter.ts), seeded like a lock's token by the
 * server clock in µs; on Sentinel it carries the failover epoch as every token does. A
 * leadership granted with a lock-delay keeps it in `<prefix>:{<key>}:election:delay` (D, with
 * `PX` = the grant's TTL + D, moved by renewals, deleted by a resignation or withdrawal of the
 * live grant): while it outlives the leader key nobody is granted or handed the election.
 *
 * Notification: every grant, proclaim, resign and withdrawal publishes on the election's channel
 * (a hand-over `<owner>:<term>:<first TTL>`, which also wakes that candidate through
 * `ReleaseWaiters`, else `*`). Watches ride the backend's one subscriber connection
 * (`ReleaseWaiters.watch`), and are also called when it reconnects (after a Sentinel failover, a
 * Cluster node's loss). The expiry of a grant's TTL is not published: the core reads the leader
 * again at its TTL's end. Pub/sub is lossy, so watches ask for a read every
 * `ELECTION_RECHECK_MS` as well.
 */
import type {
  ElectedLeader,
  ElectionWatch,
  LeaseRef,
  ProclaimOutcome,
  RenewResult,
} from '../../core/backend.js';
import { BackendError } from '../../errors.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import type { RedisConnection } from './connection.js';
import { composeToken, counterOf, type FailoverEpoch } from './failover-epoch.js';
import { type ElectionKeys, electionKeys } from './lock-keys.js';
import type { ReleaseWaiters } from './release-waiters.js';
import {
  electionAbandonScript,
  electionLeaderScript,
  electionProclaimScript,
  electionReleaseScript,
  electionRenewScript,
} from './scripts.js';

/**
 * How long an observer relies on the election's pub/sub before it reads the leader again, ms:
 * Redis pub/sub drops messages while the subscriber is away, so observers re-read every second.
 */
export const ELECTION_RECHECK_MS = 1_000;

/** The election operations of one Redis backend (its connection, subscriber and epoch). */
export class RedisElections {
  readonly #connection: RedisConnection;
  readonly #prefix: string;
  readonly #waiters: ReleaseWaiters;
  readonly #epochs: FailoverEpoch | undefined;
  /** Watch by pub/sub (the backend's `notifications`); false: observers poll. */
  readonly #notifications: boolean;
  /** How long a watch may wait for its SUBSCRIBE to be confirmed, ms. */
  readonly #armTimeoutMs: number;

  constructor(
    connection: RedisConnection,
    prefix: string,
    waiters: ReleaseWaiters,
    epochs: FailoverEpoch | undefined,
    notifications: boolean,
    armTimeoutMs: number,
  ) {
    this.#connection = connection;
    this.#prefix = prefix;
    this.#waiters = waiters;
    this.#epochs = epochs;
    this.#notifications = notifications;
    this.#armTimeoutMs = armTimeoutMs;
  }

  /** The keys of election `key`, all in one hash slot. */
  keysOf(key: string): ElectionKeys {
    return electionKeys(this.#prefix, key);
  }

  /** The six keys of the scripts that may grant or hand over (`ElectionLineKeys`). */
  lineKeysOf(e: ElectionKeys) {
    return [e.leader, e.term, e.queue, e.waiters, e.channel, e.delay] as const;
  }

  /** The term as the scripts store it (without the failover epoch on Sentinel). */
  #counterOf(lease: LeaseRef): string {
    return String(this.#epochs === undefined ? lease.fencingToken : counterOf(lease.fencingToken));
  }

  /**
   * Extend the leader's grant (its value and its lock-delay with it) by owner and term
   * (election-renew.lua).
   */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const e = this.keysOf(lease.key);
    const code = await this.#connection.call('renew', () =>
      electionRenewScript.run(
        this.#connection.client,
        [e.leader, e.delay],
        [lease.owner, this.#counterOf(lease), ttlMs],
      ),
    );
    if (code === 1) return { ok: true, ttlMs };
    return { ok: false, reason: code === 0 ? 'not-held' : 'not-owner' };
  }

  /** Compare-and-set of the leader's value by owner and term (election-proclaim.lua). */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    const e = this.keysOf(lease.key);
    const code = await this.#connection.call('proclaim', () =>
      electionProclaimScript.run(
        this.#connection.client,
        [e.leader, e.channel],
        [lease.owner, this.#counterOf(lease), value],
      ),
    );
    return code === 1 ? 'proclaimed' : code === 0 ? 'not-held' : 'not-owner';
  }

  /** Resign by owner and term, handing over to the head of the line (election-release.lua). */
  release(key: string, owner: string, counter: string): Promise<1 | 0 | -1> {
    const e = this.keysOf(key);
    return electionReleaseScript.run(this.#connection.client, this.lineKeysOf(e), [
      owner,
      counter,
      QUEUE_ENTRY_TTL_MS,
    ]);
  }

  /** Leave the line and, unless `keepGrant`, delete the grant (election-abandon.lua). */
  async withdraw(
    key: string,
    owner: string,
    keepGrant: '0' | '1',
    operation: string,
  ): Promise<void> {
    const e = this.keysOf(key);
    this.#waiters.leftLine(e.channel, owner);
    await this.#connection.call(operation, () =>
      electionAbandonScript.run(this.#connection.client, this.lineKeysOf(e), [
        owner,
        keepGrant,
        QUEUE_ENTRY_TTL_MS,
      ]),
    );
  }

  /**
   * The leader: one read-only script call (election-leader.lua: GET and PTTL of the grant, and
   * the live entries of the line counted). On Sentinel the term carries the failover epoch of the
   * connection (read once per connection).
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    const e = this.keysOf(key);
    const [epoch, reply] = await this.#connection.call('read the leader', async () => {
      const reading = await this.#epochs?.current();
      return [
        reading?.epoch,
        await electionLeaderScript.run(this.#connection.client, [e.leader, e.queue, e.waiters], []),
      ] as const;
    });
    if (reply.length === 0) return null;
    const [grant, ttlMs, candidates] = reply;
    const first = grant.indexOf(':');
    const second = grant.indexOf(':', first + 1);
    if (first <= 0 || second <= first) {
      throw new BackendError('redis', 'read the leader', new Error(`malformed grant of "${key}"`));
    }
    const counter = BigInt(grant.slice(first + 1, second));
    return {
      owner: grant.slice(0, first),
      term: epoch === undefined ? counter : composeToken(epoch, counter),
      value: grant.slice(second + 1),
      ttlMs,
      candidates,
    };
  }

  /**
   * Subscribe to the election's channel on the backend's subscriber (no connection of its own);
   * resolves once the server confirmed the subscription. With `notifications: false` nothing is
   * subscribed and the watch only polls (`LINE_RECHECK_MS`).
   * @throws BackendError when the subscription is not confirmed within the command timeout.
   */
  async watch(key: string, onChange: () => void): Promise<ElectionWatch> {
    if (this.#connection.closed) {
      throw new BackendError('redis', 'watch the election', new Error('backend is closed'));
    }
    if (!this.#notifications) return { recheckAfterMs: LINE_RECHECK_MS, stop: () => undefined };
    const channel = this.keysOf(key).channel;
    let stop: () => void;
    try {
      stop = await this.#waiters.watch(channel, onChange, this.#armTimeoutMs);
    } catch (error) {
      throw new BackendError('redis', `watch the election "${key}"`, error);
    }
    return { recheckAfterMs: ELECTION_RECHECK_MS, stop };
  }
}
