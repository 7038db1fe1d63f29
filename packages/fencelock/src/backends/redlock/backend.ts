/**
 * Redlock over N independent Redis nodes (the algorithm of the Redis documentation,
 * "Distributed locks with Redis"), with Lua scripts of its own (`scripts/`: grant, release,
 * withdraw and settle on one node, and a permit's withdrawal and settling) and the single-node
 * backend's renew many and inspect (locks) and semaphore scripts (permits):
 *
 * - Acquire runs the grant script on every node at once, each bounded by the per-node timeout.
 *   Granted when a majority (N/2+1) granted; the core then believes the lease valid until
 *   `start of the attempt + ttlMs − drift`, on the monotonic clock, so the time the vote took is
 *   charged to the lease. Otherwise the grants are withdrawn on every node (also where the reply
 *   was lost) before the core waits and attempts again.
 * - Waiters line up per key on every node (`line.lua`), in the order of their tickets: the time
 *   each started waiting on its own clock, so every node orders them alike and the head of one
 *   line is the head of every line it stands in (a node its attempts did not reach takes it in
 *   by ticket on the next). A free key goes to the head only; a release publishes the head's id
 *   on the key's channel on every node, and that waiter (subscribed on every node,
 *   `ReleaseWaiters`) attempts at once, so nobody else wakes. A waiter that lost a vote keeps its
 *   place; one that gives up leaves the line; an entry expires `REDLOCK_ENTRY_TTL_MS` after its
 *   owner's latest attempt there. Waiters whose clocks differ by d are served out of arrival
 *   order by up to d; none is passed over for good, as a new ticket is later than every old one
 *   on the same clock.
 * - Fencing token: each node's grant script issues its last token for the key + 1, or, where its
 *   counter is gone, its clock (whole ms, in µs); the token is the highest among the granting
 *   nodes. When fewer than a majority of them agree on it, a second round (`settle-token.lua`)
 *   writes it into their lock values and raises their counters to it, on a majority; counters
 *   that live agree, so only a key's first grant after an idle spell may take that second round
 *   (nodes that read different milliseconds). Any later grant needs a majority too, which
 *   shares a node with that one, so its counter (and the token) is higher. Where that node lost
 *   its counter (restarted empty, or the counter expired: fence-counter.ts), its clock is past
 *   the token, as long as the nodes' clocks do not step back and differ by less than the time
 *   between the two grants (a restart, or the counter's lifetime). Use a consensus store (etcd,
 *   ZooKeeper) where tokens must not depend on clocks at all.
 * - Renew and release run on every node and need a majority too. A failed vote lists every node's
 *   outcome (`QuorumError.nodes`).
 *
 * Read locks (`mode: 'read'`, Curator's InterProcessReadWriteLock): every node keeps the
 * key's readers beside its writer key, under the same hash tag (`readWriteLockKeys`): a sorted
 * set of reading owners by grant expiry and a hash of their tokens, both expiring with the latest
 * grant. A read grant is voted on like a write grant, by a majority: a node grants a reader when
 * no writer holds the key there and no live writer's entry is ahead of the reader's ticket in its
 * line (`read-grant-on-node.lua`), and a writer only when no live reader holds it there either;
 * any read majority and write majority share a node, so a reader and a writer are never both
 * valid, while readers never conflict among themselves. Each read grant has its own owner and
 * token, from the key's counter on each node and settled as a lock's. One line per key holds
 * both modes (an entry of a waiting reader is marked `<owner>:read`): a writer's release wakes
 * the consecutive readers at the head of the line, each by its owner id, and nobody behind the
 * next writer; the last reader's release wakes the writer at the head. Release and renew find a
 * grant by owner and token in either mode (`release-on-node.lua`, `renew-many-on-node.lua`); a
 * plain write lock pays one EXISTS of the readers' key in the grant script on each node (no
 * extra round trip); its renewal and release, matched by the GET they did before, nothing more
 * (a release asks for readers only when a writer heads the line, to wake it). A downgrade (`heldWriter`) passes the caller's writer; another
 * writer holding or waiting makes a node answer -2, and the attempt is withdrawn and refused
 * (`downgradeBlocked`). A crashed reader's grant lapses by its TTL on every node.
 *
 * Semaphores (`locker.semaphore(key, { permits })`, permits.ts): every node keeps the
 * single-node backend's semaphore state under `semaphoreKeys` (apart from the lock of the same
 * key): its live permits (holder → expiry, holder → token), the permit count in use, its line of
 * waiters (owner → ticket, owner → entry expiry) and its fence counter, each expiring once the
 * semaphore is idle; the single-node scripts (`semaphore-acquire.lua`, `-renew`, `-release`,
 * `-abandon`) run on every node as they are, with the waiter's ticket. A majority does not bound
 * the holders of N permits: with 5 nodes and 2 permits, 3 holders granted on 3 nodes each take 9
 * of the 10 permit slots the nodes have. A permit needs q nodes with (N + 1) · q > nodes · N,
 * q = ⌊nodes · N / (N + 1)⌋ + 1 (`permitQuorumOf`): N + 1 valid holders would need
 * (N + 1) · q > nodes · N slots, more than the nodes hold (each at most N live permits). With 5
 * nodes: 3 for 1 permit (a majority), 4 for 2 or 3 permits, 5 (every node) for 4 or more; with 3
 * nodes: 2 for 1 permit, 3 for 2 or more. So from N = nodes − 1 on, no node may be down for a
 * permit to be granted or renewed. Renew needs q nodes; a release is `released` once the permit
 * is deleted on nodes − q + 1 of them. A lost vote withdraws the permit on every node and the
 * waiter keeps its place in every line by its ticket; a release on a node publishes the ids of
 * the waiters its freed permit lets in on the semaphore's channel there, and only they wake.
 * Tokens are the highest a quorum issued, settled on q nodes (`settle-permit-token.lua`), rising
 * under the same clock assumptions as a lock's (any two permit quorums share a node). *
 * Listing (`list`, listing.ts): each node's keyspace in turn, one `SCAN` per page, and the Redis
 * backend's read-only list.lua on every node; a holder is listed when a quorum of nodes (the
 * lock's, or the permit quorum) shows its owner and token, once, from the first node showing it.
 * Elections are not listed.
 *
 * Lock-delay (`AttemptRequest.lockDelayMs`, Chubby's lock-delay: Burrows, OSDI 2006, section
 * 2.4; Consul's session `LockDelay`), for write locks and leaderships: every node that grants
 * such a grant writes `<owner>:<D>` beside it in the same script (`RedlockLockKeys.delay`, an
 * election's `delay`), with PX = the grant's TTL + D, moved by every renewal and repeated attempt
 * of its holder and deleted by a release or withdrawal that deletes the live grant there
 * (scripts/line.lua). So on each node it outlives the grant by exactly D on that node's own
 * clock; while it does and no grant holds the object, the node grants it to nobody (readers,
 * the head of the line and contenders without a delay included) and answers `[0, delay left]`,
 * a waiter keeping its place in the line and polling (no release is published when a delay
 * ends). A new grant needs a majority, which shares a node with the majority that granted (or
 * last renewed) the ended one, so it comes no earlier than D after that grant's end on that
 * node: the attempt's (or renewal's) start + TTL + D, on the holder's monotonic clock, as far
 * as the node's clock runs at the rate of real time (the TTL's own assumption, Redlock's "clock
 * drift"); a node that restarted empty has lost its delay as it lost the grant (the delayed
 * restart rule, restarts.ts). A release that finds the grant gone (a paused holder) leaves the
 * delay; one that deletes it on a majority clears it there (a node where the grant ran out first
 * keeps its delay, and is one vote out of the next majority until it ends). Delay keys expire by
 * themselves; `list` and `inspect` do not show them.
 *
 * Leader elections (`locker.election(key)`, election.ts): a third object of the key on every
 * node (`electionKeys`: `<prefix>:{<key>}:election:*`), apart from its lock and semaphore: the
 * leader's hash (owner, term, value) with the grant's TTL, a term counter that never expires, and
 * a line as a lock's. A campaign, a renewal, a proclaim (compare-and-set of the value by owner and
 * term) and a resignation each need a majority, as a lock's grant does; the term is the grant's
 * fencing token: each node issues max(last term + 1, its clock in µs), and the term is the one a
 * majority issued, else the highest, settled on a majority before the grant is answered.
 * `leader` is one read-only script call per node (all at once) and reports the (owner, term,
 * value) a majority shows. Watches subscribe to the election's channel on every node (armed on a
 * majority); every change publishes there, the expiry of a grant does not.
 */
import type { Redis } from 'ioredis';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  ElectedLeader,
  ElectionWatch,
  LeaseRef,
  ListPage,
  ListRequest,
  LockInfo,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { RenewalBatcher, type RenewalRequest } from '../../core/renewal-batch.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { QuorumError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import { CLOSE_TIMEOUT_MS, quit } from '../redis/connection.js';
import { fenceTtlMs } from '../redis/fence-counter.js';
import {
  type ReadWriteLockKeys,
  readWriteLockKeys,
  type SemaphoreKeys,
} from '../redis/lock-keys.js';
import { REDLOCK_ENTRY_TTL_MS } from '../waiting-line.js';
import { type ElectionKeys, RedlockElections } from './election.js';
import { ElectionWatches } from './election-watch.js';
import { LineWaits } from './line-waits.js';
import { RedlockListing } from './listing.js';
import type { RedlockNode } from './node.js';
import { RedlockPermits } from './permits.js';
import { type NodeResult, outcomesOf, quorumOf } from './quorum.js';
import { RestartWatch } from './restarts.js';
import {
  grantOnNodeScript,
  inspectOnNodeScript,
  readGrantOnNodeScript,
  releaseOnNodeScript,
  renewManyOnNodeScript,
  settleTokenScript,
  withdrawOnNodeScript,
} from './scripts.js';
import { NodeVoter } from './voter.js';

/** Most renewals sent to a node in one script call. */
const RENEW_BATCH_LIMIT = 1_000;

/** The Redlock backend. Build it with `createRedlockBackend`. */
export class RedlockBackend implements Backend {
  readonly name = 'redlock';
  readonly maxTtlMs = MAX_TIMER_MS;
  /**
   * Renewals of one turn go to each node as one script call (see `renew`): a burst of one
   * command per lease and node would queue behind itself past the per-node timeout.
   */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write', 'read'] as const),
    sessions: false,
    queue: true,
    batchRenew: true,
    permits: true,
    attemptAll: false,
    list: true,
    election: true,
    lockDelay: true,
  });
  readonly #renewals = new RenewalBatcher((batch) => this.#sendRenewals(batch), RENEW_BATCH_LIMIT);
  /** Votes a lock needs: a majority of the nodes. */
  readonly quorum: number;
  readonly #nodes: readonly RedlockNode[];
  readonly #prefix: string;
  readonly #nodeTimeoutMs: number;
  readonly #voter: NodeVoter;
  readonly #restarts: RestartWatch;
  /** Tickets, and release notifications (one subscriber connection per node, on first wait). */
  readonly #line: LineWaits;
  /** A semaphore's permits (`AttemptRequest.permits`), voted on with the permit quorum. */
  readonly #permits: RedlockPermits;
  /** `list`'s pages (listing.ts). */
  readonly #listing: RedlockListing;
  /** Leader elections (`AttemptRequest.election`, election.ts), voted on by a majority. */
  readonly #elections: RedlockElections;
  /** The elections' watches: one subscriber connection per node while any is live. */
  readonly #watches: ElectionWatches;

  /**
   * @param nodes an odd number ≥ 3 of independent nodes (checked by `createRedlockBackend`).
   * @param nodeTimeoutMs longest wait for one node's answer, ms.
   */
  constructor(nodes: readonly RedlockNode[], prefix: string, nodeTimeoutMs: number) {
    this.#nodes = nodes;
    this.#prefix = prefix;
    this.#nodeTimeoutMs = nodeTimeoutMs;
    this.quorum = quorumOf(nodes.length);
    this.#voter = new NodeVoter(this.name, nodes, nodeTimeoutMs);
    this.#restarts = new RestartWatch(nodes);
    this.#line = new LineWaits(nodes.map((node) => node.client));
    this.#permits = new RedlockPermits(this.#voter, this.#line, this.#restarts, {
      prefix,
      nodeTimeoutMs,
      releaseTimeoutMs: Math.max(nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS),
    });
    this.#listing = new RedlockListing(
      this.#voter,
      prefix,
      Math.max(nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS),
    );
    const slowTimeoutMs = Math.max(nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS);
    this.#watches = new ElectionWatches(this.name, nodes, this.quorum, slowTimeoutMs);
    this.#elections = new RedlockElections(this.#voter, this.#line, this.#restarts, this.#watches, {
      prefix,
      nodeTimeoutMs,
      slowTimeoutMs,
    });
  }

  /** The nodes, in the order given. */
  get nodes(): readonly RedlockNode[] {
    return this.#nodes;
  }

  /**
   * The Redis keys of a lock on every node, its readers' included (as the single-node backend's),
   * and its lock-delay key.
   */
  keysOf(key: string): RedlockLockKeys {
    const keys = readWriteLockKeys(this.#prefix, key);
    return { ...keys, delay: `${this.#prefix}:{${key}}:delay` };
  }

  /** The Redis keys of a semaphore on every node (as the single-node backend's). */
  semaphoreKeysOf(key: string): SemaphoreKeys {
    return this.#permits.keysOf(key);
  }

  /** The Redis keys of an election on every node (election.ts). */
  electionKeysOf(key: string): ElectionKeys {
    return this.#elections.keysOf(key);
  }

  /** Votes a permit of a semaphore of `permits` needs (`permitQuorumOf`). */
  permitQuorum(permits: number): number {
    return this.#permits.quorumFor(permits);
  }

  /**
   * Acquire on every node; granted on a majority, else withdrawn everywhere. When fewer than a
   * majority of the nodes answered (or the token could not be settled on a majority), the answer
   * is `{ granted: false, reason: 'no-quorum', error: QuorumError }`. A semaphore's permit is
   * voted on with the permit quorum instead (permits.ts). A read lock (`mode: 'read'`) is voted
   * on with the same majority: any two majorities share a node, where a reader and a writer
   * cannot both be granted, so a read grant and a write grant are never valid together.
   * @throws PermitsMismatchError for a permit whose semaphore uses another count.
   * @throws InvalidArgumentError (`downgradeBlocked`) for a downgrade (`heldWriter`) that another
   *   writer waiting or holding on some node blocks; the attempt is withdrawn first.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    if (request.permits !== undefined) return this.#permits.attempt(request, request.permits);
    if (request.election !== undefined) return this.#elections.attempt(request);
    const k = this.keysOf(request.key);
    const waiting = request.willWait !== false;
    // A release message that names this owner while the vote runs is kept for its next wait.
    if (waiting) this.#line.inLine(k.channel, request.owner);
    const ticket = waiting ? this.#line.ticketOf(request) : '0';
    const isGrant = (r: NodeResult<GrantReply>) => r.status === 'ok' && r.value[0] === 1;
    const keys = [k.lock, k.fence, k.queue, k.waiters, k.readers, k.readerTokens, k.delay] as const;
    const args = [
      request.owner,
      request.ttlMs,
      fenceTtlMs(request.ttlMs),
      ticket,
      REDLOCK_ENTRY_TTL_MS,
    ] as const;
    const reads = request.mode === 'read';
    const heldWriter = reads ? (request.heldWriter ?? '') : '';
    const acquiring = this.#vote<GrantReply>(
      this.#voter.timeoutFor(request.ttlMs),
      (client) =>
        reads
          ? readGrantOnNodeScript.run(client, keys, [...args, heldWriter])
          : grantOnNodeScript.run(client, keys, [...args, request.lockDelayMs ?? 0]),
      (results) => this.#voter.decided(this.quorum, results.filter(isGrant).length, results.length),
    );
    const early = await acquiring.early;
    const grants = early.flatMap((r) =>
      r.status === 'ok' && r.value[0] === 1 ? [{ node: r.node, value: r.value }] : [],
    );
    if (grants.length >= this.quorum) {
      const token = maxOf(grants.map((r) => BigInt(r.value[1])));
      const agreeing = grants.filter((r) => BigInt(r.value[1]) === token).length;
      const unsettled = agreeing < this.quorum ? await this.#settle(request, token) : undefined;
      if (unsettled) return { granted: false, reason: 'no-quorum', error: unsettled };
      this.#leftLine(request);
      // Nodes that granted after the vote was decided, or did not answer in time (the script
      // may still run there, before anything sent after it), carry their own counter: settle
      // them in the background so that release and renew find the combined token there too.
      // Only writes the token where this owner holds the key; never withdraws the grant.
      void acquiring.all.then((all) => {
        const unsettled = all.some(
          (r) =>
            r.status === 'timeout' ||
            (r.status === 'ok' && r.value[0] === 1 && BigInt(r.value[1]) !== token),
        );
        if (!unsettled || this.#voter.closed) return;
        return this.#settleVote(request, token, () => false).all;
      });
      const on = (results: readonly NodeResult<GrantReply>[]) =>
        results.filter(isGrant).map((r) => r.node);
      this.#restarts.granted(request.owner, request.key, request.ttlMs, on(early));
      void acquiring.all.then((all) => this.#restarts.alsoOn(request.owner, on(all)));
      return { granted: true, token, ttlMs: request.ttlMs };
    }
    // No majority: withdraw the grants on every node (where the reply was lost too) before the
    // core waits; a waiter keeps its place in the lines.
    const all = await acquiring.all;
    const blocked = heldWriter !== '' && all.some((r) => r.status === 'ok' && r.value[0] === -2);
    const keepPlace = waiting && !blocked;
    if (!keepPlace) this.#leftLine(request);
    await this.#withdraw(request, keepPlace ? 'grant' : 'everything').catch(() => undefined);
    // A downgrade that another writer blocks would wait for itself (core/rwlock.ts).
    if (blocked) throw downgradeBlocked(request.key);
    return this.#line.refused(all, this.quorum, 'acquire', request, k.channel, waiting);
  }

  /** This process no longer waits for `request`'s key: forget any release message kept for it. */
  #leftLine(request: AttemptRequest): void {
    this.#line.leftLine(this.keysOf(request.key).channel, request.owner);
  }

  /**
   * Extend on every node; renewed when a majority did. Renewals asked for in one turn of the
   * event loop go to each node as one script call (`renew-many-on-node.lua`), voted on lease by lease.
   * A permit is renewed on its own, on the permit quorum.
   * @throws QuorumError when fewer than a majority answered.
   */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    if (lease.permits !== undefined) return this.#permits.renew(lease, lease.permits, ttlMs);
    return this.#renewals.renew(lease, ttlMs);
  }

  async #sendRenewals(batch: readonly RenewalRequest[]): Promise<(RenewResult | Error)[]> {
    // Each lease is voted on with its own per-node timeout (a tenth of its TTL at most): one
    // script call per node for each timeout among the batch.
    // Leaderships (`lease.election`) go in calls of their own (renew-leaders-on-node.lua).
    const byTimeout = new Map<string, number[]>();
    batch.forEach((r, i) => {
      const group = `${r.lease.election === true ? 'e' : 'l'}${this.#voter.timeoutFor(r.ttlMs)}`;
      byTimeout.set(group, [...(byTimeout.get(group) ?? []), i]);
    });
    const outcomes: (RenewResult | Error)[] = new Array(batch.length);
    await Promise.all(
      [...byTimeout].map(async ([kind, indexes]) => {
        const group = indexes.map((i) => batch[i]!);
        const timeoutMs = Number(kind.slice(1));
        const results = kind.startsWith('e')
          ? await this.#elections.renewGroup(group, timeoutMs)
          : await this.#renewGroup(group, timeoutMs);
        indexes.forEach((i, n) => {
          outcomes[i] = results[n]!;
        });
      }),
    );
    return outcomes;
  }

  /** One vote over every node on renewing `batch`, each node answering for every lease. */
  async #renewGroup(
    batch: readonly RenewalRequest[],
    timeoutMs: number,
  ): Promise<(RenewResult | Error)[]> {
    const keys = batch.flatMap((r) => {
      const k = this.keysOf(r.lease.key);
      return [k.lock, k.readers, k.readerTokens, k.delay];
    });
    const args = batch.flatMap((r) => [r.lease.owner, String(r.lease.fencingToken), r.ttlMs]);
    return this.#voter.renewBatch(
      batch,
      this.quorum,
      timeoutMs,
      (client) => renewManyOnNodeScript.run(client, keys, args),
      (r) => this.#restarts.renewed(r.lease.owner, r.ttlMs),
      (key, votes) => this.#verdict(key, 'renew', votes),
    );
  }

  /**
   * Compare-and-delete on every node; `released` when a majority deleted this lease (a permit:
   * when it is deleted on too many nodes for its quorum, permits.ts).
   * @throws QuorumError when fewer than a majority answered.
   */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    if (lease.permits !== undefined) return this.#permits.release(lease, lease.permits);
    if (lease.election === true) return this.#elections.release(lease);
    const k = this.keysOf(lease.key);
    const released = (r: NodeResult<1 | 0 | -1>) => r.status === 'ok' && r.value === 1;
    const early = await this.#vote(
      // Nothing is granted on this answer: a burst of releases (a process letting go of
      // thousands of leases) may queue past the per-node timeout without harm.
      Math.max(this.#nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS),
      (client) =>
        releaseOnNodeScript.run(
          client,
          [k.lock, k.queue, k.waiters, k.channel, k.readers, k.readerTokens, k.delay],
          [lease.owner, String(lease.fencingToken)],
        ),
      // Done once a majority deleted it (the rest finish in the background); any other verdict
      // waits for every node, so that a QuorumError is only for want of answers.
      (results) => results.filter(released).length >= this.quorum,
    ).early;
    this.#restarts.ended(lease.owner);
    return this.#verdict(lease.key, 'release', early);
  }

  /**
   * Delete this owner's key (or permit) on every node, whatever its token, and its line entries.
   * @throws QuorumError when no node answered.
   */
  async abandon(request: AttemptRequest): Promise<void> {
    if (request.permits !== undefined) return this.#permits.abandon(request, request.permits);
    if (request.election !== undefined) return this.#elections.abandon(request);
    this.#restarts.ended(request.owner);
    this.#leftLine(request);
    await this.#withdraw(request, 'everything');
  }

  /**
   * Take this owner out of the key's line on every node, leaving any grant it holds.
   * @throws QuorumError when no node answered.
   */
  async leaveQueue(request: AttemptRequest): Promise<void> {
    if (request.permits !== undefined) return this.#permits.leaveQueue(request, request.permits);
    if (request.election !== undefined) return this.#elections.leaveQueue(request);
    this.#leftLine(request);
    await this.#withdraw(request, 'place');
  }

  /**
   * Run the withdraw script on every node for this owner: `grant` deletes its key whatever its
   * token and leaves it standing in the line with its ticket (a lost vote of a waiter); `place`
   * takes it out of the line only; `everything` does both.
   * @throws QuorumError when no node answered.
   */
  async #withdraw(request: AttemptRequest, what: 'grant' | 'place' | 'everything'): Promise<void> {
    const k = this.keysOf(request.key);
    const args = [
      request.owner,
      what === 'place' ? '1' : '0',
      what === 'grant' ? '1' : '0',
      what === 'grant' ? this.#line.ticketOf(request) : '0',
      REDLOCK_ENTRY_TTL_MS,
      request.mode === 'read' ? '1' : '0',
    ] as const;
    const keys = [
      k.lock,
      k.queue,
      k.waiters,
      k.channel,
      k.readers,
      k.readerTokens,
      k.delay,
    ] as const;
    const all = await this.#vote(
      this.#nodeTimeoutMs,
      (client) => withdrawOnNodeScript.run(client, keys, args),
      () => false,
    ).all;
    if (!all.some((r) => r.status === 'ok')) {
      throw new QuorumError(
        request.key,
        what === 'place' ? 'leave line' : 'abandon',
        outcomesOf(all, () => false),
      );
    }
  }

  /**
   * The owner holding the key on a majority (its token, and the time a majority still holds it),
   * and the last token: the highest counter a majority of the nodes has reached (every later
   * grant counts past it; a node that granted after a vote was decided may have counted from its
   * own clock, above the token the vote settled on), or the holder's token if higher (a renewed
   * lease outlives the counters); 0n once the key has been idle past their expiry
   * (fence-counter.ts).
   * @throws QuorumError when fewer than a majority answered.
   */
  async inspect(key: string): Promise<LockInfo> {
    const k = this.keysOf(key);
    const all = await this.#vote(
      // Nothing is granted on this answer, so no validity shrinks while waiting: give nodes time
      // to connect (the first call of a fresh locker) rather than fail for want of a quorum.
      Math.max(this.#nodeTimeoutMs, SLOW_VOTE_TIMEOUT_MS),
      (client) => inspectOnNodeScript.run(client, [k.lock, k.fence, k.readers, k.readerTokens], []),
      () => false,
    ).all;
    const answers = all.flatMap((r) => (r.status === 'ok' ? [r.value] : []));
    if (answers.length < this.quorum) {
      throw new QuorumError(
        key,
        'inspect',
        outcomesOf(all, (v) => v[0] !== null || v[3].length > 0),
      );
    }
    // The quorum-th highest counter (a node without one counts as 0n).
    const counters = answers.map(([, , last]) => (last === null ? 0n : BigInt(last)));
    counters.sort((a, b) => (a > b ? -1 : a < b ? 1 : 0));
    let lastFencingToken = counters[this.quorum - 1] ?? 0n;
    const writers = new Map<string, { tokens: bigint[]; ttls: number[] }>();
    const readers = new Map<string, { tokens: bigint[]; ttls: number[] }>();
    const add = (to: typeof writers, owner: string, token: string, ttlMs: number) => {
      const entry = to.get(owner) ?? { tokens: [], ttls: [] };
      entry.tokens.push(BigInt(token));
      entry.ttls.push(Math.max(0, ttlMs));
      to.set(owner, entry);
    };
    for (const [value, pttl, , reading] of answers) {
      if (value !== null) {
        const sep = value.indexOf(':');
        add(writers, value.slice(0, sep), value.slice(sep + 1), pttl);
      }
      for (let i = 0; i + 2 < reading.length; i += 3) {
        add(readers, String(reading[i]), String(reading[i + 1]), Number(reading[i + 2]));
      }
    }
    // Holders granted on a majority: the writer, else the reader with the lowest token (the
    // earliest grant).
    const holders = [...writers, ...readers].flatMap(([owner, { tokens, ttls }]) => {
      if (tokens.length < this.quorum) return [];
      // The token a majority carries; a node that granted late may still show its own counter
      // until it is settled in the background.
      const fencingToken = majorityToken(tokens, this.quorum) ?? maxOf(tokens);
      // The majority holds the key until the quorum-th longest remaining TTL runs out.
      const ttlMs = [...ttls].sort((a, b) => b - a)[this.quorum - 1] ?? 0;
      if (fencingToken > lastFencingToken) lastFencingToken = fencingToken;
      return [{ owner, fencingToken, ttlMs, writes: writers.has(owner) }];
    });
    const holder =
      holders.find((h) => h.writes) ??
      holders.reduce<(typeof holders)[number] | undefined>(
        (first, h) => (first === undefined || h.fencingToken < first.fencingToken ? h : first),
        undefined,
      );
    if (holder === undefined) return { key, holder: null, lastFencingToken };
    const { owner, fencingToken, ttlMs } = holder;
    return { key, holder: { owner, fencingToken, ttlMs }, lastFencingToken };
  }

  /**
   * One page of the held locks, read locks and semaphores under `request.prefix` (listing.ts): one
   * `SCAN` (`COUNT` `pageSize`) of one node, nodes in the order given, then one read-only script
   * call per node (the Redis backend's list.lua) over the objects found. An object is listed with
   * the holders a quorum of nodes shows with the same owner and token (a majority; for a
   * semaphore the permit quorum), each with the time until fewer than that quorum hold it, and
   * from the first node that shows them only. A node whose SCAN fails is skipped.
   * @throws InvalidArgumentError for a cursor this backend did not make, before any command;
   *   QuorumError when fewer than a quorum of nodes answer.
   */
  list(request: ListRequest): Promise<ListPage> {
    return this.#listing.page(request);
  }

  /**
   * Compare-and-set a leader's value by owner and term on every node (election.ts): `proclaimed`
   * once a majority stored it, `not-held` / `not-owner` once a majority refused it.
   * @throws QuorumError when neither (nothing is rolled back: the value is then the old or the
   *   new one, as after a lost reply; proclaiming again settles it).
   */
  proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    return this.#elections.proclaim(lease, value);
  }

  /**
   * The (owner, term, value) a majority of the nodes shows, with the candidates a majority shows
   * (one read-only script call per node, all at once), or null when none has a majority.
   * @throws QuorumError when fewer than a majority answered.
   */
  leader(key: string): Promise<ElectedLeader | null> {
    return this.#elections.leader(key);
  }

  /**
   * Subscribe to the election's channel on every node (one subscriber connection per node while
   * any watch is live); armed once a majority confirmed. `recheckAfterMs`: 1 s (pub/sub is lossy).
   * @throws QuorumError when fewer than a majority confirmed.
   */
  watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    return this.#elections.watch(key, onChange);
  }

  /** Quit the connections this backend opened, each within 1 s. */
  async close(): Promise<void> {
    if (this.#voter.closed) return;
    this.#voter.close();
    this.#restarts.close();
    await Promise.all([
      this.#watches.close(),
      this.#line.close(),
      ...this.#nodes.filter((n) => n.owned).map((n) => quit(n.client, CLOSE_TIMEOUT_MS)),
    ]);
  }

  /**
   * Write the combined token on every node that holds this owner's key; needs a majority.
   * @returns undefined when settled, else the failed vote (the key is then withdrawn everywhere).
   */
  async #settle(request: AttemptRequest, token: bigint): Promise<QuorumError | undefined> {
    const settled = (r: NodeResult<1 | 0>) => r.status === 'ok' && r.value === 1;
    const settling = this.#settleVote(request, token, (results) =>
      this.#voter.decided(this.quorum, results.filter(settled).length, results.length),
    );
    const early = await settling.early;
    if (early.filter(settled).length >= this.quorum) return undefined;
    const all = await settling.all;
    const what = request.willWait !== false ? 'grant' : 'everything';
    await this.#withdraw(request, what).catch(() => undefined);
    return new QuorumError(
      request.key,
      'acquire (settle token)',
      outcomesOf(all, (v) => v === 0),
    );
  }

  /**
   * Run the settle-token script on every node: it writes `token` where this owner holds the key
   * (1), and leaves any other node alone (0).
   */
  #settleVote(
    request: AttemptRequest,
    token: bigint,
    decided: (results: readonly NodeResult<1 | 0>[]) => boolean,
  ) {
    const k = this.keysOf(request.key);
    return this.#vote(
      this.#voter.timeoutFor(request.ttlMs),
      (client) =>
        settleTokenScript.run(
          client,
          [k.lock, k.fence, k.readers, k.readerTokens],
          [request.owner, String(token), fenceTtlMs(request.ttlMs)],
        ),
      decided,
    );
  }

  /** released / not-owner / not-held from every node's 1 / -1 / 0; QuorumError without a majority. */
  #verdict(key: string, operation: string, all: readonly NodeResult<1 | 0 | -1>[]): ReleaseOutcome {
    const answers = all.flatMap((r) => (r.status === 'ok' ? [r.value] : []));
    if (answers.filter((a) => a === 1).length >= this.quorum) return 'released';
    if (answers.length < this.quorum) {
      throw new QuorumError(
        key,
        operation,
        outcomesOf(all, (v) => v === -1),
      );
    }
    return answers.includes(-1) ? 'not-owner' : 'not-held';
  }

  /** Run a script on every node (`NodeVoter.run`). */
  #vote<T>(
    timeoutMs: number,
    run: (client: Redis) => Promise<T>,
    decided: (results: readonly NodeResult<T>[]) => boolean,
  ) {
    return this.#voter.run(timeoutMs, run, decided);
  }
}

/**
 * The Redis keys of a lock on every node (`readWriteLockKeys`) and its lock-delay's
 * (scripts/line.lua): `<prefix>:{<key>}:delay`.
 */
export interface RedlockLockKeys extends ReadWriteLockKeys {
  /**
   * `<owner>:<D>` of the last write grant made with a lock-delay of D ms, with PX = the grant's
   * TTL + D on the node (moved by its renewals, deleted by its live release): while it outlives
   * the grant, nobody is granted the key on that node.
   */
  readonly delay: string;
}

/** One node's answer to a grant script: granted, not yet, or a blocked downgrade (readers). */
type GrantReply = [1, string] | [0, number] | [-2];

/** Per-node timeout of `inspect` and `release`, which grant nothing, ms. */
export const SLOW_VOTE_TIMEOUT_MS = 2_000;

/** The value at least `quorum` of `values` share, if any. */
function majorityToken(values: readonly bigint[], quorum: number): bigint | undefined {
  const counts = new Map<bigint, number>();
  for (const value of values) counts.set(value, (counts.get(value) ?? 0) + 1);
  for (const [value, count] of counts) if (count >= quorum) return value;
  return undefined;
}

/** The largest of `values` (0n for none). */
function maxOf(values: readonly bigint[]): bigint {
  let max = 0n;
  for (const value of values) if (value > max) max = value;
  return max;
}
