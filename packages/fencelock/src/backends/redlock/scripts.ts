/**
 * The Lua scripts only the Redlock backend runs, one per operation in `scripts/*.lua`, each run
 * on one node of a vote through the Redis backend's typed loader (`defineScript`); the lock
 * scripts begin with `line.lua`, the key's line of waiters and its readers on the node. Redlock
 * also runs single-node scripts as they are: for a
 * semaphore's permits `semaphore-acquire.lua`, `-renew`, `-release` and `-abandon`; its own two
 * permit scripts (the withdrawal of a lost vote, the token's settling) begin with that backend's
 * `semaphore-line.lua`.
 */
import { defineScript, type Optional, type QueueKeys } from '../redis/scripts.js';

/** This module's folder of scripts. */
const SCRIPTS = new URL('./scripts/', import.meta.url);

type LockKeys = readonly [
  lockKey: string,
  fenceKey: string,
  readersKey: string,
  readerTokensKey: string,
];

/**
 * A lock's keys on one node that the grant scripts touch (`readWriteLockKeys`), and its
 * lock-delay key (`RedlockLockKeys.delay`; without it a script keeps no delay).
 */
type GrantKeys = QueueKeys;

/** A lock's keys on one node that release and withdraw touch (the delay's as `GrantKeys`). */
type LineKeys = Optional<
  readonly [
    lockKey: string,
    queueKey: string,
    waitersKey: string,
    channel: string,
    readersKey: string,
    readerTokensKey: string,
  ],
  readonly [delayKey: string]
>;

/** The fragment of shared functions the line's scripts begin with. */
const LINE = ['line'];

/** The single-node backend's fragment the semaphore scripts begin with (relative to `SCRIPTS`). */
const SEMAPHORE_LINE = ['../../redis/scripts/semaphore-line'];

/**
 * Grant on one node, in the order of the key's line: `[1, node token]` (the node's last token +
 * 1, or its clock in whole ms, in µs, where the counter is gone), or `[0, ms]` where `ms` bounds
 * how long the key can stay unavailable to this contender without a change (the holder's PTTL,
 * the lock-delay left, or the head's remaining entry time). A waiting contender (`ticket`: the
 * µs it started waiting, on its clock) joins the line or keeps its place, its entry living
 * `waiterTtlMs` past this attempt; ticket `'0'`: a single attempt, never queued. The fence
 * counter expires `fenceTtlMs` after a grant. With the delay key: a free key still in the
 * lock-delay of a grant that ended without a release goes to nobody, and a grant with
 * `lockDelayMs` > 0 records its delay there, PX = `ttlMs` + `lockDelayMs` (line.lua).
 */
export const grantOnNodeScript = defineScript<
  GrantKeys,
  Optional<
    readonly [
      owner: string,
      ttlMs: number,
      fenceTtlMs: number,
      ticket: string,
      waiterTtlMs: number,
    ],
    readonly [lockDelayMs: number]
  >,
  [1, string] | [0, number]
>('grant-on-node', SCRIPTS, LINE);

/**
 * Grant a read lock on one node (Curator's read-write rule, in the order of the key's line):
 * `[1, node token]`, `[0, ms]` (a writer holds the key or waits ahead, or a writer's lock-delay is
 * left while none holds it), or `[-2]` for a downgrade
 * (`heldWriter`, the caller's write lock's owner, or `''`) that another writer blocks (nothing of
 * it stays). A waiting reader (`ticket` > 0) keeps its place in the line, marked as a reader.
 */
export const readGrantOnNodeScript = defineScript<
  GrantKeys,
  readonly [
    owner: string,
    ttlMs: number,
    fenceTtlMs: number,
    ticket: string,
    waiterTtlMs: number,
    heldWriter: string,
  ],
  [1, string] | [0, number] | [-2]
>('read-grant-on-node', SCRIPTS, LINE);

/**
 * Compare-and-delete a grant of either mode on one node, then wake the front of the line on the
 * key's channel (the readers at the head, or the head writer; the last reader's release wakes the
 * head writer), and take the owner out of the line where its entry was left: 1 released, 0 not
 * held, -1 not owner. Deleting a live writer's grant deletes its lock-delay (with the delay key).
 */
export const releaseOnNodeScript = defineScript<
  LineKeys,
  readonly [owner: string, token: string],
  1 | 0 | -1
>('release-on-node', SCRIPTS, LINE);

/**
 * Withdraw on one node: delete this owner's grant (writer's key or read grant) whatever its token
 * (unless `keepGrant` is `'1'`), and take it out of the line (unless `keepPlace` is `'1'`: then
 * its entry is written with `ticket`, living `waiterTtlMs`, a reader's when `reads` is `'1'`),
 * waking the front of the line where that may let others in. 1 deleted this owner's grant, 0
 * nothing deleted. Deleting a live writer's grant deletes its lock-delay (with the delay key).
 */
export const withdrawOnNodeScript = defineScript<
  LineKeys,
  readonly [
    owner: string,
    keepGrant: '0' | '1',
    keepPlace: '0' | '1',
    ticket: string,
    waiterTtlMs: number,
    reads: '0' | '1',
  ],
  1 | 0
>('withdraw-on-node', SCRIPTS, LINE);

/**
 * After a grant on a quorum, write the combined token on one node (on this owner's key or its
 * live read grant) and raise its counter to it (expiring `fenceTtlMs` later): 1 this owner's
 * grant now carries the token, 0 this owner holds nothing here.
 */
export const settleTokenScript = defineScript<
  LockKeys,
  readonly [owner: string, token: string, fenceTtlMs: number],
  1 | 0
>('settle-token', SCRIPTS, LINE);

/**
 * Renew many leases of either mode on one node in one call: keys in fours (lock, readers,
 * reader tokens, lock-delay), arguments in triples (owner, token, ttlMs); one code per lease, 1
 * renewed, 0 not held, -1 not owner. A renewed writer's lock-delay moves to end its D past the
 * renewed end.
 */
export const renewManyOnNodeScript = defineScript<
  readonly string[],
  readonly (string | number)[],
  (1 | 0 | -1)[]
>('renew-many-on-node', SCRIPTS, LINE);

/**
 * A lock's state on one node: `[writer "<owner>:<token>" | null, its PTTL, last token | null,
 * readers as flat (owner, token, ms left) triples]`.
 */
export const inspectOnNodeScript = defineScript<
  LockKeys,
  readonly [],
  [string | null, number, string | null, (string | number)[]]
>('inspect-on-node', SCRIPTS);

/** The keys of a semaphore's permit scripts that may change its line (semaphore-line.lua). */
type PermitLineKeys = readonly [
  holdersKey: string,
  tokensKey: string,
  permitsKey: string,
  queueKey: string,
  waitersKey: string,
  channel: string,
];

/**
 * A waiter lost the vote on a permit: on one node, drop its permit whatever the token, stand in
 * the semaphore's line with `ticket` (its entry living `waiterTtlMs`; not where the holders or
 * waiters use another count), and wake the waiters a dropped permit lets in, except this owner. 1
 * dropped this owner's permit, 0 none held here.
 */
export const withdrawPermitOnNodeScript = defineScript<
  PermitLineKeys,
  readonly [owner: string, permits: number, ticket: string, waiterTtlMs: number],
  1 | 0
>('withdraw-permit-on-node', SCRIPTS, SEMAPHORE_LINE);

/**
 * After a permit's grant on a quorum, write the combined token on one node (where this owner
 * holds a live permit) and raise the semaphore's fence counter to it (expiring `fenceTtlMs`
 * later): 1 settled, 0 no live permit of this owner here.
 */
export const settlePermitTokenScript = defineScript<
  readonly [holdersKey: string, tokensKey: string, fenceKey: string],
  readonly [owner: string, token: string, fenceTtlMs: number],
  1 | 0
>('settle-permit-token', SCRIPTS, SEMAPHORE_LINE);

/** The fragments the election scripts begin with: the line's, then the leader hash's. */
const ELECTION_LINE = ['line', 'election-line'];

/** An election's keys on one node that a campaign touches (`ElectionKeys`, election.ts). */
type CampaignKeys = Optional<
  readonly [
    leaderKey: string,
    termKey: string,
    queueKey: string,
    waitersKey: string,
    changedChannel: string,
  ],
  readonly [delayKey: string]
>;

/** An election's keys on one node that a resignation or a withdrawal touches. */
type CandidateLineKeys = Optional<
  readonly [
    leaderKey: string,
    queueKey: string,
    waitersKey: string,
    channel: string,
    changedChannel: string,
  ],
  readonly [delayKey: string]
>;

/**
 * Grant an election on one node, in the order of its line, storing the candidate's value with
 * the grant: `[1, node term]` (the larger of the node's last term + 1 and its clock in whole ms,
 * in µs; the counter never expires) or `[0, ms]` as `grantOnNodeScript` answers. The same owner
 * asking again has its grant refreshed, its value kept. Publishes on the watchers' channel. The
 * lock-delay as `grantOnNodeScript` keeps it (the election's delay key and `lockDelayMs`).
 */
export const campaignOnNodeScript = defineScript<
  CampaignKeys,
  Optional<
    readonly [owner: string, ttlMs: number, ticket: string, waiterTtlMs: number, value: string],
    readonly [lockDelayMs: number]
  >,
  [1, string] | [0, number]
>('campaign-on-node', SCRIPTS, ELECTION_LINE);

/**
 * After an election's grant on a quorum, write the combined term on one node where this owner
 * leads, and raise its term counter to it: 1 settled, 0 this owner does not lead here.
 */
export const settleTermOnNodeScript = defineScript<
  readonly [leaderKey: string, termKey: string, changedChannel: string],
  readonly [owner: string, term: string],
  1 | 0
>('settle-term-on-node', SCRIPTS, ELECTION_LINE);

/**
 * Compare-and-set an election's value on one node by owner and term: 1 stored (watchers told), 0
 * nobody leads here, -1 another owner or term leads.
 */
export const proclaimOnNodeScript = defineScript<
  readonly [leaderKey: string, changedChannel: string],
  readonly [owner: string, term: string, value: string],
  1 | 0 | -1
>('proclaim-on-node', SCRIPTS, ['election-line']);

/**
 * An election's leader on one node, read atomically: `[owner, term, value, PTTL ms, candidates]`
 * (the leader and the live entries of the node's line) or `[]`.
 */
export const leaderOnNodeScript = defineScript<
  readonly [leaderKey: string, queueKey: string, waitersKey: string],
  readonly [],
  [string, string, string, number, number] | []
>('leader-on-node', SCRIPTS, ['../../redis/scripts/live-line']);

/**
 * Compare-and-delete an election's leader on one node by owner and term, waking the head of the
 * line and telling the watchers: 1 released, 0 nobody leads here, -1 another owner or term.
 * Deleting the live leadership deletes its lock-delay (with the delay key).
 */
export const resignOnNodeScript = defineScript<
  CandidateLineKeys,
  readonly [owner: string, term: string],
  1 | 0 | -1
>('resign-on-node', SCRIPTS, ELECTION_LINE);

/**
 * Withdraw a candidate on one node: delete its leadership whatever the term (unless `keepGrant`),
 * and take it out of the line (unless `keepPlace`: its entry is then written with `ticket`,
 * living `waiterTtlMs`). 1 deleted its leadership, 0 nothing of it led here. Deleting the live
 * leadership deletes its lock-delay (with the delay key).
 */
export const withdrawCandidateOnNodeScript = defineScript<
  CandidateLineKeys,
  readonly [
    owner: string,
    keepGrant: '0' | '1',
    keepPlace: '0' | '1',
    ticket: string,
    waiterTtlMs: number,
  ],
  1 | 0
>('withdraw-candidate-on-node', SCRIPTS, ELECTION_LINE);

/**
 * Renew many leaderships on one node in one call: keys in pairs (leader hash, lock-delay),
 * arguments in triples (owner, term, ttlMs); one code per leadership, 1 renewed, 0 nobody leads,
 * -1 another leads. A renewed leadership's lock-delay moves with it.
 */
export const renewLeadersOnNodeScript = defineScript<
  readonly string[],
  readonly (string | number)[],
  (1 | 0 | -1)[]
>('renew-leaders-on-node', SCRIPTS, ELECTION_LINE);
