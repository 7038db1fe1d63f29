/**
 * Single-node Redis backend (ioredis): the contract operations. One Lua script per operation, so
 * acquire and release each take one round trip; the fencing token is computed in the granting
 * script as the larger of the key's last token + 1 and the server's clock in microseconds, so it
 * keeps rising after the per-key counter expired or the server restarted empty
 * (fence-counter.ts). Every key of a lock expires: nothing stays once it is idle. Keys of one
 * lock share a hash slot (`<prefix>:{<key>}:…`, lock-keys.ts) so the scripts also run on
 * Cluster. The client and its errors are `connection.ts`'s job, the release notifications
 * `release-waiters.ts`'s, opening a client for a URL `client.ts`'s.
 *
 * Waiting is fair (first come, first served): a contender that will wait joins a FIFO line of
 * the key's waiters kept in the acquire script, with the TTL it asked for, and a free key goes to
 * the head of the line. A release hands the key over in its own script (one hop): it grants the
 * head with a fresh token for a short first TTL (min(its ttlMs, `QUEUE_ENTRY_TTL_MS`)) and
 * publishes `<owner>:<token>:<first TTL>` on the key's release channel; exactly that waiter wakes
 * (no herd, and the releaser cannot re-grab the key ahead of the line), holds the key on receipt,
 * and renews it to its full TTL at once (`Granted.handedAt`). A head that vanished costs the
 * first TTL at most. Line entries expire `QUEUE_ENTRY_TTL_MS` after their owner's latest attempt
 * (a waiter that vanished blocks the others that long at most); a waiter that gives up is taken
 * out at once, and a key handed to it meanwhile is handed on. Pub/sub is lossy, so the core also
 * polls, every `LINE_RECHECK_MS` at most: the attempt of a waiter whose message was lost is
 * answered with the grant handed to it (the first TTL, 2 s at most, outlasts the 0.5 s poll).
 * With `notifications: false` waiters still stand in line and only poll (every
 * `LINE_RECHECK_MS` at most), so that polling and notified waiters of one key are served in one
 * order.
 *
 * Read-write locks (`mode: 'read'`, Curator's `InterProcessReadWriteLock` rules): readers share
 * the key, a writer is alone, in one FIFO line whose entries are marked with their mode. A reader
 * is granted when no writer holds the key and no live writer's entry is ahead of its own; a
 * writer when nobody holds it and it heads the line. Each read grant is an entry of a sorted set
 * of readers (owner → expiry, ms by Redis `TIME`) with its own fencing token (a hash beside it)
 * from the key's one counter; both keys expire with the latest read grant, so a crashed reader
 * frees the key by its TTL. A writer's release hands the key to a writer at the head as above;
 * when readers head the line it wakes each of them up to the first writer, by owner id (they
 * attempt and are granted), and nobody behind that writer. The last reader's release hands the
 * key to the writer at the head. A downgrade (`heldWriter`) passes the caller's own writer and is
 * refused (`downgradeBlocked`) when another writer holds the key or waits. Read grants are
 * renewed one script call each. A writer that never meets a reader pays one `EXISTS` of the
 * readers' key per grant of a free key, and nothing more.
 *
 * A multi-key acquire's first round (`attemptAll`) is one script call (attempt-all.lua): the single
 * attempt of every key by the acquire scripts' own rules (their shared fragments write-line.lua
 * and read-line.lua), all decided before any is granted, so every key is granted or none and no
 * key joins a line. Each token comes from its key's counter, as a single attempt's does; on
 * Sentinel the failover epoch leads them, and `minReplicas` is one `WAIT` for them all. On a
 * Cluster one script may only touch one hash slot: keys whose `{key}` tags hash to different
 * slots (hash-slot.ts, no round trip) are answered null, and the core attempts them key by key.
 *
 * Listing (`list`, listing.ts): a page is one `SCAN` (`MATCH` the prefix inside the `{…}` hash
 * tag, its glob characters escaped; `COUNT` = `pageSize`; on a Cluster one primary at a time), then
 * one read-only script (list.lua; on a Cluster one per hash slot among the page's keys) that reads
 * each held object's live holders, tokens and live line by Redis `TIME`. The cursor is the SCAN
 * cursor, with SCAN's guarantees.
 *
 * Leader elections (`capabilities.election`, election.ts): an election is a third object of the
 * key (`<prefix>:{<key>}:election:*`, apart from the lock and the semaphore, and not listed),
 * granted to candidates as a writer is, in its own FIFO line whose entries carry each candidate's
 * value. The leader's grant is one string `<owner>:<term>:<value>` with a PX expiry, so the value
 * goes with the grant (release, withdrawal, expiry), `proclaim` is a compare-and-set of owner and
 * term on it, and `leader` is one script call (GET + PTTL). The term is the grant's token, from a
 * counter that never expires (a lock's expires 5 s after its last TTL), seeded by the server
 * clock in µs as a lock's token is, with the failover epoch in front on Sentinel. Every grant,
 * hand-over, proclaim, resign and withdrawal publishes on the election's channel; watches ride
 * the release waiters' one subscriber connection and re-read every second (pub/sub is lossy).
 *
 * Lock-delay (`capabilities.lockDelay`; Chubby's lock-delay, Burrows OSDI 2006 section 2.4,
 * Consul's session `LockDelay`): a writer's grant made with `lockDelayMs` D also sets
 * `<prefix>:{<key>}:delay` to D with `PX` = its TTL + D, in the granting script, on the same
 * server clock as the lock key's own `PX`; its renewals (one or batched), the holder's repeated
 * attempts and a hand-over's confirmation move it with the grant, and a release or `abandon`
 * that deletes the live grant deletes it. So once a grant ends without a release (its TTL ran
 * out), the delay key outlives the lock key by exactly D on the server's clock (the end is
 * Redis's own expiry of the grant, not a bound), and while it lives the lock goes to nobody: not
 * to writers whatever delay they carry, not to readers, not to the head of the line, and no
 * release or abandon hands it over. An attempt meanwhile is refused with `holderTtlMs` = the
 * delay key's PTTL; waiters keep their places and attempt again when it ends (the head goes
 * first). A waiting writer's D rides in its line entry, so a hand-over records it with the
 * grant it makes. An election keeps its leader's delay the same way in
 * `<prefix>:{<key>}:election:delay`. The delay keys expire by themselves; `list` and `inspect`
 * see no holder during a delay.
 *
 * Failover caveat (the Redis documentation, "Distributed locks with Redis"): replication is
 * asynchronous, so a promoted replica may not have the key and grant it again. The fence counter
 * can be lost the same way; the token still rises when the new primary's clock is not behind the
 * old one's by more than the failover took, and on Sentinel whatever the clocks (the failover
 * epoch leads the token). Use a consensus store where tokens must not depend on clocks at all.
 */
import type { Cluster, Redis } from 'ioredis';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  ElectedLeader,
  ElectionWatch,
  Granted,
  LeaseRef,
  ListPage,
  ListRequest,
  LockInfo,
  NotGranted,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { RenewalBatcher, type RenewalRequest } from '../../core/renewal-batch.js';
import { sleep } from '../../core/retry.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { BackendError, PermitsMismatchError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import { LINE_RECHECK_MS, QUEUE_ENTRY_TTL_MS } from '../waiting-line.js';
import { isClusterClient, RedisConnection } from './connection.js';
import { RedisElections } from './election.js';
import { composeToken, counterOf, type FailoverEpoch } from './failover-epoch.js';
import { FENCE_GRACE_MS, fenceTtlMs } from './fence-counter.js';
import { sharedSlot } from './hash-slot.js';
import { RedisListing } from './listing.js';
import { type RedisLockKeys, redisLockKeys, semaphoreKeys } from './lock-keys.js';
import type { NodeRedisClientLike } from './node-redis.js';
import { ReleaseWaiters } from './release-waiters.js';
import {
  attemptAllScript,
  electionAcquireScript,
  inspectLockScript,
  queuedAbandonScript,
  queuedAcquireScript,
  queuedReleaseScript,
  readAcquireScript,
  readRenewScript,
  renewManyScript,
  renewScript,
  semaphoreAbandonScript,
  semaphoreAcquireScript,
  semaphoreReleaseScript,
  semaphoreRenewScript,
} from './scripts.js';

/** Options of `createRedisBackend`. */
export interface RedisBackendOptions {
  /** An ioredis client to use; it stays open after `close()`. Give this or `url`. */
  readonly client?: Redis | Cluster | NodeRedisClientLike;
  /** A `redis://` or `rediss://` URL to connect to. Give this or `client`. */
  readonly url?: string;
  /** Key prefix. @default 'fencelock' */
  readonly prefix?: string;
  /**
   * Wait on release notifications (pub/sub); `false`: waiters stand in the line all the same
   * and poll every 0.5 s at most. @default true
   */
  readonly notifications?: boolean;
  /** Timeout of one command on connections this backend opens, ms. @default 5000 */
  readonly commandTimeoutMs?: number;
  /**
   * After each grant, `WAIT` until this many replicas have the write; if fewer acknowledge
   * within `replicaTimeoutMs`, the grant is released and the acquire fails with a
   * `BackendError`. This narrows the window in which a failover (a replica promoted before it
   * got the key) grants the lock twice; it does not close it: the write can still be lost after
   * the acknowledgement, and `WAIT` does not make Redis strongly consistent. @default 0
   */
  readonly minReplicas?: number;
  /** How long to wait for `minReplicas`, ms. @default 200 */
  readonly replicaTimeoutMs?: number;
}

/** Most renewals sent in one script call (one round trip). */
const RENEW_BATCH_LIMIT = 1_000;

/**
 * Most owners of read grants this backend remembers (to renew them with the readers' script
 * at once); past it the oldest is forgotten, and its next renewal takes one more call.
 */
const READ_GRANTS_REMEMBERED = 10_000;

/**
 * The last arguments of the scripts that may hand a key to the head of its line (release,
 * abandon): the longest first TTL of a handed grant (`QUEUE_ENTRY_TTL_MS`: more than the
 * `LINE_RECHECK_MS` after which a waiter whose message was lost attempts again), and how long the
 * fence counter outlives a grant's TTL.
 */
const HAND_OFF_ARGS = [QUEUE_ENTRY_TTL_MS, FENCE_GRACE_MS] as const;

/** The Redis backend. Build it with `createRedisBackend`. */
export class RedisBackend implements Backend {
  readonly name = 'redis';
  readonly maxTtlMs = MAX_TIMER_MS;
  /**
   * Write and read locks in one FIFO of waiters per key (`leaveQueue`), semaphores, and leader
   * elections (election.ts). Renewals of one turn go as one script call (see `renew`); not on a
   * Cluster, where one call cannot span the slots of many keys, nor for read grants and
   * leaderships (one call each).
   */
  readonly capabilities: BackendCapabilities;
  readonly #renewals = new RenewalBatcher((batch) => this.#sendRenewals(batch), RENEW_BATCH_LIMIT);
  readonly #connection: RedisConnection;
  readonly #prefix: string;
  readonly #notifications: boolean;
  readonly #minReplicas: number;
  readonly #replicaTimeoutMs: number;
  /** On Sentinel: the failover epoch that prefixes every token; undefined on a single node. */
  readonly #epochs: FailoverEpoch | undefined;
  readonly #waiters: ReleaseWaiters;
  /**
   * Owners of the read grants this backend made and has not seen released: their renewals go to
   * the readers' script (`read-renew.lua`) directly. A hint only: a renewal the write path refuses
   * is asked of that script too, so a forgotten owner costs one call more, nothing else.
   */
  readonly #readGrants = new Set<string>();
  /** `list`'s pages (listing.ts). */
  readonly #listing: RedisListing;
  /** The election objects' operations (election.ts). */
  readonly #elections: RedisElections;

  constructor(
    client: Redis | Cluster,
    ownsClient: boolean,
    settings: {
      readonly prefix: string;
      readonly notifications: boolean;
      readonly minReplicas: number;
      readonly replicaTimeoutMs: number;
      /**
       * Bound of each command, and of the first connection of a client this backend opened, ms
       * (a Sentinel client retries unreachable Sentinels forever).
       */
      readonly commandTimeoutMs: number;
      /** The servers' address for errors (`host:port`…), when the backend opened the client. */
      readonly address?: string;
      /** The client has no command timeout: the connection bounds each command itself. */
      readonly boundsCommands?: boolean;
    },
    epochs?: FailoverEpoch,
  ) {
    this.#connection = new RedisConnection(
      client,
      ownsClient,
      this.name,
      settings.commandTimeoutMs,
      settings.address,
      settings.boundsCommands,
    );
    this.#waiters = new ReleaseWaiters(client);
    this.#epochs = epochs;
    this.capabilities = Object.freeze({
      modes: Object.freeze(['write', 'read'] as const),
      sessions: false,
      queue: true,
      batchRenew: !isClusterClient(client),
      permits: true,
      attemptAll: true,
      list: true,
      election: true,
      lockDelay: true,
    });
    this.#prefix = settings.prefix;
    this.#notifications = settings.notifications;
    this.#minReplicas = settings.minReplicas;
    this.#replicaTimeoutMs = settings.replicaTimeoutMs;
    this.#listing = new RedisListing(this.#connection, settings.prefix, epochs);
    this.#elections = new RedisElections(
      this.#connection,
      settings.prefix,
      this.#waiters,
      epochs,
      settings.notifications,
      settings.commandTimeoutMs,
    );
  }

  /**
   * The Redis keys of a lock, all in one hash slot: its writer's lease, its fencing counter, its
   * release channel, its line of waiters (a list of owners and a hash of their entries' expiry,
   * requested TTL and mode), and its readers (a sorted set of their expiry and a hash of their
   * tokens). Each expires: the lease with its TTL, the counter `FENCE_GRACE_MS` after the TTL of
   * its last grant, the line `QUEUE_ENTRY_TTL_MS` after its newest entry, the readers' keys with
   * the latest read grant, the writer's lock-delay key D after the TTL of a grant made with one
   * (`delay`, deleted by its live release).
   */
  keysOf(key: string): RedisLockKeys {
    return redisLockKeys(this.#prefix, key);
  }

  /**
   * Run the acquire script of the request's mode: grant with a fresh token (max(last token + 1,
   * server clock in µs)), or report how long the key may stay unavailable. A writer
   * (queued-acquire.lua) goes when no writer and no reader holds the key and it heads the line; a
   * reader (read-acquire.lua) when no writer holds the key or waits ahead of it (Curator's
   * read-write rule). On Sentinel the token is `failover epoch × 2^53 + counter` (see
   * failover-epoch.ts). Not an async function: on a single node the answer is the script's
   * promise and one reaction (the acquire path of every lease).
   * @throws InvalidArgumentError (`downgradeBlocked`) when a read asked for inside the caller's
   *   write lock (`heldWriter`) finds another writer holding the key or waiting for it; the
   *   attempt is withdrawn first.
   */
  attempt(request: AttemptRequest): Promise<AttemptResult> {
    if (request.permits !== undefined) return this.#attemptPermit(request, request.permits);
    if (request.election !== undefined)
      return this.#attemptCandidate(request, request.election.value);
    if (this.#epochs !== undefined) return this.#attemptWithEpoch(request, this.#epochs);
    const k = this.keysOf(request.key);
    const queue = this.#enterLine(request, k);
    return this.#connection
      .call('acquire', () => this.#acquireScript(request, k, queue))
      .then((reply) => this.#answer(request, k, queue, reply, undefined));
  }

  /** The acquire on Sentinel: the failover epoch is read before the script, on one connection. */
  async #attemptWithEpoch(request: AttemptRequest, epochs: FailoverEpoch): Promise<AttemptResult> {
    const k = this.keysOf(request.key);
    const queue = this.#enterLine(request, k);
    const [epoch, reply] = await this.#connection.call('acquire', async () => {
      const before = await epochs.current();
      return [before, await this.#acquireScript(request, k, queue)] as const;
    });
    return this.#answer(request, k, queue, reply, epoch);
  }

  /**
   * Single attempts at several locks in one script call (attempt-all.lua): each lock decided by
   * the rule of its mode's acquire script for a single attempt (the same line, readers and
   * tokens), every one granted or none, nothing queued. On Sentinel the failover epoch is read
   * before the script, and with `minReplicas` one `WAIT` covers every grant; either check failing
   * withdraws every grant and rejects, as for a single attempt. On a Cluster the keys of every
   * lock must hash to one slot (`{key}` hash tags whose slots match): the server refuses a script
   * that spans slots.
   * @returns null on a Cluster when the locks' keys span several hash slots, and for requests the
   *   script does not take (a semaphore's permits, a contender that waits, mixed modes or TTLs):
   *   the core then attempts key by key.
   * @throws InvalidArgumentError (`downgradeBlocked`) when a read downgrade (`heldWriter`) finds
   *   another writer holding or waiting for its key (nothing was granted); BackendError as
   *   `attempt` does (whether anything was granted is then unknown).
   */
  async attemptAll(requests: readonly AttemptRequest[]): Promise<AttemptResult[] | null> {
    const first = requests[0];
    if (
      first === undefined ||
      requests.some(
        (r) =>
          r.permits !== undefined ||
          r.election !== undefined ||
          r.willWait !== false ||
          r.mode !== first.mode ||
          r.ttlMs !== first.ttlMs,
      )
    ) {
      return null;
    }
    const { client } = this.#connection;
    const locks = requests.map((r) => this.keysOf(r.key));
    const keys = locks.flatMap((k) => grantKeysOf(k));
    if (isClusterClient(client) && sharedSlot(keys) === undefined) return null;
    const args = [
      first.mode,
      first.ttlMs,
      fenceTtlMs(first.ttlMs),
      ...requests.flatMap((r) => [r.owner, r.heldWriter ?? '', r.lockDelayMs ?? 0]),
    ];
    const operation = acquireOf(requests);
    const [epoch, replies] = await this.#connection.call(operation, async () => {
      const before = await this.#epochs?.current();
      return [before, await attemptAllScript.run(client, keys, args)] as const;
    });
    if (replies.length !== requests.length) {
      throw new BackendError(
        this.name,
        operation,
        new Error(`${replies.length} answers to ${requests.length} attempts`),
      );
    }
    const blocked = replies.findIndex((reply) => reply[0] === -2);
    // The script granted nothing (a refused round), as read-acquire.lua keeps nothing of it.
    if (blocked !== -1) throw downgradeBlocked(requests[blocked]!.key);
    const counters: bigint[] = [];
    for (const reply of replies) if (reply[0] === 1) counters.push(BigInt(reply[1]));
    if (counters.length < requests.length) {
      return replies.map((reply, i) =>
        reply[0] === 0
          ? this.#notGranted(requests[i]!, locks[i]!, false, reply[1], epoch)
          : { granted: false },
      );
    }
    if (first.mode === 'read') for (const r of requests) this.#rememberReadGrant(r.owner);
    if (epoch === undefined && this.#minReplicas === 0) {
      return counters.map((token) => ({ granted: true, token, ttlMs: first.ttlMs }));
    }
    return this.#checkedGrants(requests, counters, epoch);
  }

  /** The acquire script of the request's mode, run once. */
  #acquireScript(
    request: AttemptRequest,
    k: RedisLockKeys,
    queue: boolean,
  ): Promise<[1, string] | [0, number] | [-2]> {
    const { client } = this.#connection;
    const keys = grantKeysOf(k);
    const args = this.#acquireArgs(request, queue);
    return request.mode === 'write'
      ? queuedAcquireScript.run(client, keys, [...args, request.lockDelayMs ?? 0])
      : readAcquireScript.run(client, keys, [...args, request.heldWriter ?? '']);
  }

  /**
   * A semaphore's permit (semaphore-acquire.lua), granted and answered as a lock's attempt: the
   * same line of waiters, tokens, failover epoch and replica check; a release wakes the waiters
   * its freed permit lets in, by owner id, and each attempts at once.
   * @throws PermitsMismatchError when the key's holders or waiters use another permit count.
   */
  async #attemptPermit(request: AttemptRequest, permits: number): Promise<AttemptResult> {
    const k = semaphoreKeys(this.#prefix, request.key);
    const queue = this.#enterLine(request, k);
    const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.fence] as const;
    const args = [
      request.owner,
      request.ttlMs,
      permits,
      queue ? QUEUE_ENTRY_TTL_MS : 0,
      fenceTtlMs(request.ttlMs),
      '0',
    ] as const;
    const [epoch, reply] = await this.#connection.call('acquire', async () => {
      const before = await this.#epochs?.current();
      return [
        before,
        await semaphoreAcquireScript.run(this.#connection.client, keys, args),
      ] as const;
    });
    if (reply[0] === -1) {
      if (queue) this.#waiters.leftLine(k.channel, request.owner);
      throw new PermitsMismatchError(request.key, permits, Number(reply[1]));
    }
    return this.#answer(request, k, queue, reply, epoch);
  }

  /**
   * A candidate's attempt at the key's election object (election-acquire.lua): granted, queued
   * and answered as a writer's attempt at a lock (the same line rules, hand-over by the
   * election's channel, failover epoch and replica check); the grant stores `value` and its
   * token is the leader's term, from a counter that never expires (election.ts).
   */
  async #attemptCandidate(request: AttemptRequest, value: string): Promise<AttemptResult> {
    const e = this.#elections.keysOf(request.key);
    const queue = this.#enterLine(request, e);
    const keys = this.#elections.lineKeysOf(e);
    const args = [
      request.owner,
      request.ttlMs,
      queue ? QUEUE_ENTRY_TTL_MS : 0,
      value,
      request.lockDelayMs ?? 0,
    ] as const;
    const [epoch, reply] = await this.#connection.call('acquire', async () => {
      const before = await this.#epochs?.current();
      return [
        before,
        await electionAcquireScript.run(this.#connection.client, keys, args),
      ] as const;
    });
    return this.#answer(request, e, queue, reply, epoch);
  }

  /**
   * Whether the attempt stands in the key's line (it will wait). A wake-up that names this owner
   * while the attempt is in flight must not be lost: it is kept (`missed`) for the wait that
   * follows, as between any attempt and its wait.
   */
  #enterLine(request: AttemptRequest, k: { readonly channel: string }): boolean {
    const queue = request.willWait !== false;
    if (queue) this.#waiters.inLine(k.channel, request.owner);
    return queue;
  }

  #acquireArgs(request: AttemptRequest, queue: boolean): readonly [string, number, number, number] {
    return [
      request.owner,
      request.ttlMs,
      queue ? QUEUE_ENTRY_TTL_MS : 0,
      fenceTtlMs(request.ttlMs),
    ] as const;
  }

  /**
   * The contract's answer to the acquire script's reply (and, on Sentinel, the epoch read).
   * @throws InvalidArgumentError (`downgradeBlocked`) for a blocked downgrade (`[-2]`).
   */
  #answer(
    request: AttemptRequest,
    k: { readonly channel: string },
    queue: boolean,
    reply: [1, string] | [0, number] | [-2],
    epoch: Awaited<ReturnType<FailoverEpoch['current']>> | undefined,
  ): AttemptResult | Promise<AttemptResult> {
    if (reply[0] === -2) {
      // The script kept nothing of the attempt (read-acquire.lua).
      if (queue) this.#waiters.leftLine(k.channel, request.owner);
      throw downgradeBlocked(request.key);
    }
    if (reply[0] === 1) {
      if (queue) this.#waiters.leftLine(k.channel, request.owner);
      if (request.mode === 'read') this.#rememberReadGrant(request.owner);
      const counter = BigInt(reply[1]);
      if (epoch === undefined && this.#minReplicas === 0) {
        return { granted: true, token: counter, ttlMs: request.ttlMs };
      }
      return this.#checkedGrants([request], [counter], epoch).then(([granted]) => granted!);
    }
    return this.#notGranted(request, k, queue, reply[1], epoch);
  }

  /**
   * The answer to an attempt the script refused, `ms` being how long the key can stay unavailable
   * to it with nothing changing: wait for a release message that names this contender (or poll).
   */
  #notGranted(
    request: AttemptRequest,
    k: { readonly channel: string },
    queue: boolean,
    ms: number,
    epoch: Awaited<ReturnType<FailoverEpoch['current']>> | undefined,
  ): NotGranted {
    const holderTtlMs = Math.max(ms, 0);
    return {
      granted: false,
      holderTtlMs,
      // Waiters attempt at least this often, which keeps their line entries alive.
      recheckAfterMs: LINE_RECHECK_MS,
      // A single attempt never joins the line, so it leaves nothing to withdraw.
      queued: queue,
      // Without notifications a waiter still stands in line; it only polls.
      waitForChange: this.#notifications
        ? (signal, maxMs) => this.#waitForTurn(k.channel, request, epoch, signal, maxMs)
        : (signal, maxMs) => sleep(maxMs, signal),
    };
  }

  /**
   * Wait for the release message that names this waiter, and take the grant it hands over: its
   * token (on Sentinel with the failover epoch of the waiter's last attempt, while the connection
   * has not changed since) for its first TTL. Not with `minReplicas`, nor on Sentinel across a
   * reconnection: the attempt that follows is then answered with the handed grant ("the same
   * owner asks again" in queued-acquire.lua) and checked as any attempt's.
   */
  async #waitForTurn(
    channel: string,
    request: AttemptRequest,
    epoch: Awaited<ReturnType<FailoverEpoch['current']>> | undefined,
    signal: AbortSignal,
    maxMs: number,
  ): Promise<Granted | undefined> {
    const handoff = await this.#waiters.wait(channel, request.owner, signal, maxMs);
    if (handoff === undefined || this.#minReplicas > 0) return undefined;
    if (this.#epochs !== undefined && this.#epochs.generation !== epoch?.generation) {
      return undefined;
    }
    this.#waiters.leftLine(channel, request.owner);
    const counter = BigInt(handoff.counter);
    return {
      granted: true,
      token: epoch === undefined ? counter : composeToken(epoch.epoch, counter),
      ttlMs: handoff.ttlMs,
      handedAt: handoff.receivedAt,
    };
  }

  /**
   * Grants of one script call (one, or `attemptAll`'s) on Sentinel (the epoch must not have
   * changed under the script) or with `minReplicas` (the replicas must have them), in the order
   * of `requests`, whose counters they are.
   * @throws BackendError when either check fails (every grant is withdrawn first).
   */
  async #checkedGrants(
    requests: readonly AttemptRequest[],
    counters: readonly bigint[],
    epoch: Awaited<ReturnType<FailoverEpoch['current']>> | undefined,
  ): Promise<Granted[]> {
    if (epoch !== undefined && this.#epochs?.generation !== epoch.generation) {
      // The connection changed while the script ran: the grants may sit on another primary
      // than the epoch read names. Withdraw them; the next attempt reads the epoch again.
      await Promise.all(requests.map((r) => this.abandon(r).catch(() => undefined)));
      throw new BackendError(
        this.name,
        acquireOf(requests),
        new Error('the connection to the primary changed during the grant (a failover?)'),
      );
    }
    if (this.#minReplicas > 0) await this.#awaitReplicas(requests, counters);
    return requests.map((request, i) => {
      const counter = counters[i]!;
      const token = epoch === undefined ? counter : composeToken(epoch.epoch, counter);
      return { granted: true, token, ttlMs: request.ttlMs };
    });
  }

  /** The counter part of a lease's token, as the scripts store it. */
  #counterOf(lease: LeaseRef): string {
    return String(this.#epochs === undefined ? lease.fencingToken : counterOf(lease.fencingToken));
  }

  /**
   * One `WAIT` on the granting connection for `minReplicas`, after the script that made the
   * grants of `requests` (their counters); too few: release every grant and fail.
   * @throws BackendError
   */
  async #awaitReplicas(
    requests: readonly AttemptRequest[],
    counters: readonly bigint[],
  ): Promise<void> {
    const acked = await this.#connection.call('acquire (WAIT for replicas)', () =>
      this.#connection.client.wait(this.#minReplicas, this.#replicaTimeoutMs),
    );
    if (acked >= this.#minReplicas) return;
    await Promise.all(
      requests.map((r, i) =>
        this.#connection
          .call('acquire (release after WAIT)', () =>
            this.#releaseScript(r.key, r.owner, String(counters[i]), r.permits, r.election),
          )
          .catch(() => undefined),
      ),
    );
    const what = requests.length === 1 ? 'the grant' : `the ${requests.length} grants`;
    const it = requests.length === 1 ? 'it was' : 'they were';
    throw new BackendError(
      this.name,
      acquireOf(requests),
      new Error(
        `only ${acked} of ${this.#minReplicas} replicas acknowledged ${what} within ${this.#replicaTimeoutMs} ms; ${it} released, since a failover could lose it`,
      ),
    );
  }

  /**
   * `PEXPIRE` only while owner and token match (never re-creates a vanished key), the writer's
   * lock-delay key with it (to ttlMs + its D, when the grant has one). Renewals asked
   * for in one turn of the event loop go as one script call (`renew-many.lua`), except on a
   * Cluster. A read grant this backend made is renewed by the readers' script, one call each
   * (`read-renew.lua`); a renewal the write path refuses is asked of that script too (a read
   * grant this backend does not know of), which decides `not-held` or `not-owner` for both modes.
   * A leadership (`election`) is renewed with its value by election-renew.lua, one call each.
   */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    if (lease.permits !== undefined) return this.#renewPermit(lease, ttlMs);
    if (lease.election) return this.#elections.renew(lease, ttlMs);
    if (this.#readGrants.has(lease.owner)) return this.#renewRead(lease, ttlMs);
    const renewed = this.capabilities.batchRenew
      ? this.#renewals.renew(lease, ttlMs)
      : this.#renewOne(lease, ttlMs);
    return renewed.then((result) => (result.ok ? result : this.#renewRead(lease, ttlMs)));
  }

  /** A lease of either mode renewed by the readers' script (read-renew.lua). */
  async #renewRead(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const k = this.keysOf(lease.key);
    const reply = await this.#connection.call('renew', () =>
      readRenewScript.run(
        this.#connection.client,
        [k.lock, k.readers, k.readerTokens, k.delay],
        [lease.owner, this.#counterOf(lease), ttlMs],
      ),
    );
    if (reply !== 1) this.#readGrants.delete(lease.owner);
    return renewResultOf(reply, ttlMs);
  }

  /** Remember the owner of a read grant (the oldest is forgotten past the bound). */
  #rememberReadGrant(owner: string): void {
    this.#readGrants.add(owner);
    if (this.#readGrants.size <= READ_GRANTS_REMEMBERED) return;
    for (const oldest of this.#readGrants) {
      this.#readGrants.delete(oldest);
      return;
    }
  }

  async #sendRenewals(batch: readonly RenewalRequest[]): Promise<RenewResult[]> {
    if (batch.length === 1) return [await this.#renewOne(batch[0]!.lease, batch[0]!.ttlMs)];
    const locks = batch.map((r) => this.keysOf(r.lease.key));
    const keys = [...locks.map((k) => k.lock), ...locks.map((k) => k.delay)];
    const args = batch.flatMap((r) => [`${r.lease.owner}:${this.#counterOf(r.lease)}`, r.ttlMs]);
    const codes = await this.#connection.call('renew', () =>
      renewManyScript.run(this.#connection.client, keys, args),
    );
    if (codes.length !== batch.length) {
      throw new BackendError(
        this.name,
        'renew',
        new Error(`${codes.length} answers to ${batch.length} renewals`),
      );
    }
    return batch.map((r, i) => renewResultOf(codes[i]!, r.ttlMs));
  }

  async #renewOne(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const k = this.keysOf(lease.key);
    const reply = await this.#connection.call('renew', () =>
      renewScript.run(
        this.#connection.client,
        [k.lock, k.delay],
        [lease.owner, this.#counterOf(lease), ttlMs],
      ),
    );
    return renewResultOf(reply, ttlMs);
  }

  /** One permit's renewal (semaphore-renew.lua; permits are renewed one script call each). */
  async #renewPermit(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const k = semaphoreKeys(this.#prefix, lease.key);
    const reply = await this.#connection.call('renew', () =>
      semaphoreRenewScript.run(
        this.#connection.client,
        [k.holders, k.tokens, k.permits],
        [lease.owner, this.#counterOf(lease), ttlMs],
      ),
    );
    return renewResultOf(reply, ttlMs);
  }

  /**
   * Compare-and-delete by owner and token, the writer's lease (with its lock-delay: a live
   * release ends the grant without one) or a reader's grant, then hand the key on unless it is
   * in a lock-delay: a writer at the head of the line is granted in the same script once no
   * writer or reader holds the key (its owner, token and first TTL go out on the key's release
   * channel); readers at the head are woken by their owner ids, up to the first writer. A
   * permit's release wakes the waiters the freed permit lets in. A release that finds the grant
   * gone (its TTL ran out) leaves its lock-delay running.
   */
  release(lease: LeaseRef): Promise<ReleaseOutcome> {
    this.#readGrants.delete(lease.owner);
    return this.#connection
      .call('release', () =>
        this.#releaseScript(
          lease.key,
          lease.owner,
          this.#counterOf(lease),
          lease.permits,
          lease.election,
        ),
      )
      .then(releaseOutcomeOf);
  }

  /**
   * The release script of a lock, of a permit (`permits` set) or of a leadership (`election`
   * set: election-release.lua), with its keys.
   */
  #releaseScript(
    key: string,
    owner: string,
    counter: string,
    permits: number | undefined,
    election: unknown,
  ): Promise<1 | 0 | -1> {
    const { client } = this.#connection;
    if (election) return this.#elections.release(key, owner, counter);
    if (permits !== undefined) {
      const k = semaphoreKeys(this.#prefix, key);
      const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
      return semaphoreReleaseScript.run(client, keys, [owner, counter]);
    }
    const k = this.keysOf(key);
    const keys = [
      k.lock,
      k.fence,
      k.channel,
      k.queue,
      k.waiters,
      k.readers,
      k.readerTokens,
      k.delay,
    ] as const;
    return queuedReleaseScript.run(client, keys, [owner, counter, ...HAND_OFF_ARGS]);
  }

  /**
   * Delete this owner's grant, whatever the token (the key as its writer, also a grant a release
   * handed to it meanwhile; its entry among the readers), and take the owner out of the key's
   * line, handing the key on when no writer holds it and this freed it, removed the head of the
   * line or removed a writer that readers behind it waited for.
   */
  async abandon(request: AttemptRequest): Promise<void> {
    await this.#withdraw(request, 'abandon');
  }

  /** Take the owner out of the key's line only; a grant it holds stays. */
  async leaveQueue(request: AttemptRequest): Promise<void> {
    await this.#withdraw(request, 'leave the line');
  }

  /** `abandon` deletes this owner's grant too; `leave the line` never touches a grant. */
  async #withdraw(request: AttemptRequest, operation: 'abandon' | 'leave the line'): Promise<void> {
    const keepGrant = operation === 'leave the line' ? '1' : '0';
    const { client } = this.#connection;
    if (request.election !== undefined) {
      await this.#elections.withdraw(request.key, request.owner, keepGrant, operation);
      return;
    }
    if (request.permits !== undefined) {
      const k = semaphoreKeys(this.#prefix, request.key);
      this.#waiters.leftLine(k.channel, request.owner);
      const keys = [k.holders, k.tokens, k.permits, k.queue, k.waiters, k.channel] as const;
      await this.#connection.call(operation, () =>
        semaphoreAbandonScript.run(client, keys, [request.owner, keepGrant]),
      );
      return;
    }
    const k = this.keysOf(request.key);
    this.#waiters.leftLine(k.channel, request.owner);
    if (keepGrant === '0') this.#readGrants.delete(request.owner);
    await this.#connection.call(operation, () =>
      queuedAbandonScript.run(
        client,
        [k.lock, k.fence, k.channel, k.queue, k.waiters, k.readers, k.readerTokens, k.delay],
        [request.owner, keepGrant, ...HAND_OFF_ARGS],
      ),
    );
  }

  /**
   * Holder, remaining PTTL and the fence counter, read atomically (inspect-lock.lua): the writer
   * when one holds the key, else the earliest reader (lowest token) with its time left.
   * `lastFencingToken` is the largest of the counter and the holders' tokens (a renewed lease
   * outlives the counter), 0n once the key has been idle past the counter's expiry
   * (fence-counter.ts).
   */
  async inspect(key: string): Promise<LockInfo> {
    const k = this.keysOf(key);
    const [epoch, reply] = await this.#connection.call('inspect', async () => {
      const reading = await this.#epochs?.current();
      return [
        reading?.epoch,
        await inspectLockScript.run(
          this.#connection.client,
          [k.lock, k.fence, k.readers, k.readerTokens],
          [],
        ),
      ] as const;
    });
    const [value, pttl, last, reader, readerCounter, readerLeftMs, highestReader] = reply;
    const tokenOf = (counter: string) =>
      epoch === undefined ? BigInt(counter) : composeToken(epoch, BigInt(counter));
    let holder: LockInfo['holder'] = null;
    if (value !== null) {
      const sep = value.indexOf(':');
      holder = {
        owner: value.slice(0, sep),
        fencingToken: tokenOf(value.slice(sep + 1)),
        ttlMs: Math.max(0, pttl),
      };
    } else if (reader !== null && readerCounter !== null) {
      holder = { owner: reader, fencingToken: tokenOf(readerCounter), ttlMs: readerLeftMs };
    }
    let lastFencingToken = last === null ? 0n : tokenOf(last);
    for (const token of [
      holder?.fencingToken,
      highestReader === null ? undefined : tokenOf(highestReader),
    ]) {
      if (token !== undefined && token > lastFencingToken) lastFencingToken = token;
    }
    return { key, holder, lastFencingToken };
  }

  /**
   * One page of the held locks, read locks and semaphores under `request.prefix` (listing.ts): one
   * `SCAN` with `COUNT` `pageSize` (on a Cluster, of one primary at a time), then one read-only
   * script (list.lua; on a Cluster one per hash slot among the page's keys) that reads each
   * object's live holders, tokens and live line atomically, by Redis `TIME`. The cursor is the
   * SCAN cursor (and on a Cluster the primary's index): `SCAN`'s guarantees apply (a key held
   * throughout is listed, one that comes or goes meanwhile may or may not be, a rare key twice).
   * On Sentinel tokens carry the failover epoch, as granted.
   * @throws InvalidArgumentError for a cursor this backend did not make, before any command;
   *   BackendError when Redis fails.
   */
  list(request: ListRequest): Promise<ListPage> {
    return this.#listing.page(request);
  }

  /**
   * Store `value` with the leader's grant by compare-and-set of owner and term, keeping its TTL,
   * and publish the change on the election's channel (election-proclaim.lua, one script call).
   * @throws BackendError when Redis fails.
   */
  proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    return this.#elections.proclaim(lease, value);
  }

  /**
   * The leader of election `key`, or null: owner, term, value and PTTL of its one grant string,
   * and the live candidates of its line, read by one read-only script call (election-leader.lua);
   * on Sentinel the term carries the failover epoch of the connection (read once per connection).
   * @throws BackendError when Redis fails.
   */
  leader(key: string): Promise<ElectedLeader | null> {
    return this.#elections.leader(key);
  }

  /**
   * Subscribe to election `key`'s channel on this backend's one subscriber connection (the
   * release waiters'; none per watch), resolved once Redis confirmed the SUBSCRIBE: `onChange` is
   * called on every grant, hand-over, proclaim, resign and withdrawal, and whenever the
   * subscriber reconnects. A grant's expiry is not published. `recheckAfterMs` 1 s (pub/sub is
   * lossy); with `notifications: false` nothing is subscribed and observers poll every 0.5 s.
   * @throws BackendError when the SUBSCRIBE is not confirmed within `commandTimeoutMs`.
   */
  watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    return this.#elections.watch(key, onChange);
  }

  /** Wake local waiters, quit the subscriber and (if owned) the client, each within 1 s. */
  async close(): Promise<void> {
    if (this.#connection.closed) return;
    await Promise.all([this.#waiters.close(), this.#connection.close()]);
  }
}

/** A lock's keys as the granting scripts take them (`QueueKeys` in scripts.ts). */
function grantKeysOf(k: RedisLockKeys) {
  return [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens, k.delay] as const;
}

/** The operation's name in errors: `acquire of "<key>"`, or of several keys. */
function acquireOf(requests: readonly AttemptRequest[]): string {
  return requests.length === 1
    ? `acquire of "${requests[0]!.key}"`
    : `acquire of ${requests.length} keys ("${requests[0]!.key}"…)`;
}

/** A release script's code (1 released, 0 not held, -1 not owner) as the core's outcome. */
function releaseOutcomeOf(code: 1 | 0 | -1): ReleaseOutcome {
  return code === 1 ? 'released' : code === 0 ? 'not-held' : 'not-owner';
}

/** A renew script's code (1 renewed, 0 not held, -1 not owner) as the core's result. */
function renewResultOf(code: 1 | 0 | -1, ttlMs: number): RenewResult {
  if (code === 1) return { ok: true, ttlMs };
  return { ok: false, reason: code === 0 ? 'not-held' : 'not-owner' };
}

export { QUEUE_ENTRY_TTL_MS };
