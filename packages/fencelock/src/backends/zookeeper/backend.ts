/**
 * ZooKeeper backend (the native `zookeeper` package). Apache Curator's lock recipe
 * (`InterProcessMutex`, `InterProcessReadWriteLock`, `LockInternals`), with a fencing token and a
 * lease-loss signal, and semaphores on the same kind of line:
 *
 * - Every contender creates an EPHEMERAL_SEQUENTIAL node `_c_<owner>-<w|r>-<sequence>` under
 *   `/<namespace>/locks/<key>` in its session. The owner id in the name is Curator's protected
 *   mode: a create whose reply was lost is found again by name, never leaked.
 * - A writer holds the lock when its node has the lowest sequence, a reader when no writer's node
 *   is lower. Everyone else watches only its predecessor (the nearest lower node that blocks it),
 *   so a release wakes one waiter (no herd), and reads the children again when it is deleted.
 *   The rule is `queueVerdict` (src/core/predecessor.ts), shared with the etcd backend.
 * - The fencing token is the czxid of the owner's node (zxids only grow).
 * - Release deletes the owner's node by path and version; a node of another session is never
 *   touched.
 * - A failed attempt deletes its own node (Curator's `internalLockLoop` finally block,
 *   `deleteOurPath`), and so does a withdrawal (`abandon`). Such deletes are guaranteed as in
 *   Curator (`delete().guaranteed()`): one that cannot reach the ensemble is kept and retried in
 *   the background and on reconnection while the session lives, and a node whose create reply
 *   was lost is found by its protected name. Otherwise the node would stay first in line until
 *   its session ends, blocking every later waiter of the key.
 *
 * Semaphores (`request.permits` = N), after Curator's `InterProcessSemaphoreV2` (each permit a
 * lease in the holder's session) with the lock's line instead of its internal mutex:
 *
 * - Every contender creates an EPHEMERAL_SEQUENTIAL node `_c_<owner>-p<N>-<sequence>` under
 *   `/<namespace>/semaphores/<key>` (a container of its own, never the lock's node of the key).
 *   The permit count is in the name, so one read of the children shows the line and the count of
 *   every contender. The token is the node's czxid, as for a lock.
 * - A contender with fewer than N nodes ahead holds a permit. The first waiter (exactly N ahead)
 *   sets an exists watch on each of the N holders and is woken by the first to go; every later
 *   waiter watches only its predecessor. A contender granted while nodes are behind it writes its
 *   own node once (same data, new version): that fires its successor's watch, and the successor
 *   counts again and, now the first waiter, watches the holders. So a release wakes one waiter,
 *   and each grant the one after it (no herd). A waiter whose predecessor's node already has
 *   version > 0 when its watch is set (written, so granted, after the line was read) counts
 *   again at once. The rule is `permitVerdict` (permit-line.ts).
 * - The count is checked before the create: a line with another count refuses the attempt with
 *   `PermitsMismatchError` and nothing written. A contender of another count that gets in
 *   between that read and the create is found by the read after it: the node just made is
 *   deleted before the error is thrown. A single attempt (`willWait: false`) that finds N or
 *   more contenders answers not granted without creating a node.
 *
 * Leader elections (`request.election`), after Curator's `LeaderLatch` and etcd's
 * `concurrency.Election` (election.ts):
 *
 * - Every candidate creates an EPHEMERAL_SEQUENTIAL node `_c_<owner>-e-<sequence>` under
 *   `/<namespace>/elections/<key>` (a container of its own, never the lock's or the semaphore's
 *   node of the key), its data `<ttlMs>:<value>`: the value is stored with the line entry that
 *   becomes the grant. The lowest node leads; the others wait as a lock's writers do (each
 *   watches its predecessor). Release, withdrawal, a lease's own expiry and the end of the
 *   session delete the node, and its value with it.
 * - The term is the node's czxid, as a lock's token: zxids never go back, so terms keep
 *   increasing after the server deleted the idle election's container (whose next sequence
 *   starts again at 0) and across restarts of the ensemble.
 * - `proclaim` writes the leader's own node with the version last written (compare-and-set),
 *   only while the lease's owner holds the node whose czxid is the lease's term.
 * - `leader` is a sync, the children, and the data of the lowest candidate node (2 round trips,
 *   read again if that node went in between); `watchElection` keeps a children watch on the
 *   election's node and a data watch on the leader's node, each set again after it fires.
 * - `list` and `inspect` read only the locks' and semaphores' nodes: elections are not listed.
 *
 * Lock-delay (`request.lockDelayMs`, Chubby's lock-delay, Consul's session `LockDelay`;
 * lock-delay.ts): a write grant or a leadership made with a delay D creates a PERSISTENT marker
 * `_d_<holder node name>` (data D) beside its node. A release or withdrawal that deletes the live
 * node deletes the marker (and an end stamp made in between); a grant that ends otherwise (its
 * session expired or was closed, its own TTL ran out, its node was taken away) leaves it. The
 * end is stamped by a child `end` of the marker, made by the first process that sees the node
 * gone (the holder's backend at the lease's TTL, or the waiter woken by the node's deletion, or
 * the next contender), so its ctime is no earlier than the end. The contender first in line
 * writes the stamp to read the ensemble's clock (mtime − ctime, same leader epoch) and is granted
 * only once D has passed since the stamp; until then it answers `held` with the delay left,
 * keeps its place in line, and waits for the stamp's deletion or the delay's end. Then it
 * deletes the stamp and the marker. `inspect`, `list` and `leader` show no holder while a marker
 * of a gone node is there. A backend whose lease ended at its TTL deletes the marker itself once
 * the delay is over; a marker of a process that died stays until the key's next contender (the
 * servers of scripts/services.sh do not enable TTL nodes).
 *
 * Listing (`list`, listing.ts): a page reads the children of `/<namespace>/locks` (then of
 * `/<namespace>/semaphores`) after a `sync`, keeps the key nodes under the prefix after the
 * cursor, and reads the line of at most `pageSize` of them, one `getChildren` each (the line at
 * one zxid), with one `getData` per holder node (its czxid, and the TTL its holder wrote). A
 * holder's `ttlMs` is this process's own bound when the grant is this backend's, else the TTL in
 * the node (an upper bound: another session's remaining time cannot be read).
 *
 * Sessions: one ZooKeeper session per requested TTL (the negotiated session timeout is the TTL
 * of its locks), or the session the user opened. On a lost connection (SUSPENDED) the granted
 * locks of the session are lost at once by default (Curator's advice; `suspended: 'wait'` keeps
 * them until the session's validity runs out instead), and their nodes are deleted when the
 * connection comes back; on session expiry (LOST) every lock of the session is lost.
 */
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  BackendSession,
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
import { monotonicNow } from '../../core/clock.js';
import { queueVerdict } from '../../core/predecessor.js';
import { downgradeBlocked } from '../../core/rwlock.js';
import { BackendError, InvalidArgumentError, PermitsMismatchError } from '../../errors.js';
import { DEFAULTS, MAX_TIMER_MS } from '../../options.js';
import {
  candidateNodePrefix,
  decodeCandidate,
  ElectionWatcher,
  encodeCandidate,
  parseCandidates,
} from './election.js';
import { listPage } from './listing.js';
import {
  decodeDelay,
  delayInForce,
  END_NODE,
  encodeDelay,
  endedMarkers,
  markerNameOf,
  stampAgeMs,
} from './lock-delay.js';
import { nodeNameOf, parseChildren } from './names.js';
import {
  otherCountInUse,
  parsePermitLine,
  permitNodePrefix,
  permitVerdict,
} from './permit-line.js';
import {
  CREATE_MODE,
  type NativeZooKeeperClass,
  type NodeStat,
  requestUnreachable,
  ZCODE,
  ZkSession,
  zkCode,
} from './session.js';
import type { SuspendedPolicy } from './url.js';

/** How long a waiter trusts its watch before reading the children again, ms. */
const RECHECK_AFTER_MS = 30_000;

interface Contender {
  readonly owner: string;
  readonly path: string;
  readonly name: string;
  readonly session: ZkSession;
  readonly autoRenew: boolean;
  /** czxid of the node, once read. */
  token: bigint | undefined;
  /** Version of the node (its data, the TTL, changes when a lease without watchdog is extended). */
  version: number;
  /** Without the watchdog: the TTL after which the node is deleted, ms. */
  ttlMs: number;
  /** Aborted when the grant is lost (session lost, or suspended under `suspended: 'lose'`). */
  readonly lost: AbortController;
  /** Without the watchdog: deletes the node when its TTL runs out. */
  expiry: NodeJS.Timeout | undefined;
  /** Without the watchdog: when `expiry` fires, on the monotonic clock (`performance.now()`). */
  expiresAt: number | undefined;
  /** Removes the grant's listener on the session's suspension (`suspended: 'lose'`). */
  unlink: (() => void) | undefined;
  /** A semaphore's permit was granted (and its node written if a successor may watch it). */
  announced: boolean;
  /** The value in an election candidate's node (election.ts); undefined for other contenders. */
  value: string | undefined;
  /**
   * Granted at least once: a candidate granted leads until its node goes (no lower node can
   * appear), so `proclaim` needs no read of the line.
   */
  granted: boolean;
  /** The path of the grant's lock-delay marker (lock-delay.ts), once made; else undefined. */
  delayMarker: string | undefined;
}

/** A node to delete once the ensemble can be reached again (Curator's guaranteed delete). */
interface Doomed {
  readonly session: ZkSession;
  readonly dir: string;
  readonly owner: string;
  /** The node's path; undefined when its create reply was lost (found by its protected name). */
  readonly path: string | undefined;
  /** The path of the grant's lock-delay marker, cleared once the node is deleted. */
  readonly marker?: string | undefined;
}

/** How long after a lock-delay's end its marker is checked for deletion (`#stampEnd`), ms. */
const SETTLE_SLACK_MS = 250;

/** First retry of a guaranteed delete that failed while the connection seemed up, ms. */
const DELETE_RETRY_MS = 500;

/** Settings of a ZooKeeper backend. */
export interface ZookeeperBackendSettings {
  readonly connect: string;
  readonly namespace: string;
  readonly connectTimeoutMs: number;
  readonly suspended: SuspendedPolicy;
}

/** The ZooKeeper backend. Build it with `createZookeeperBackend`. */
export class ZookeeperBackend implements Backend {
  readonly name = 'zookeeper';
  readonly maxTtlMs = MAX_TIMER_MS;
  /**
   * Read-write locks, semaphores and leader elections; grants live in the locker's ZooKeeper
   * session; sequential nodes form the line.
   */
  readonly capabilities: BackendCapabilities = Object.freeze({
    modes: Object.freeze(['write', 'read'] as const),
    sessions: true,
    queue: true,
    batchRenew: false,
    permits: true,
    attemptAll: false,
    list: true,
    election: true,
    lockDelay: true,
  });
  readonly #native: NativeZooKeeperClass;
  readonly #settings: ZookeeperBackendSettings;
  /** One session per requested timeout, ms. */
  readonly #sessions = new Map<number, Promise<ZkSession>>();
  readonly #userSessions = new Set<ZkSession>();
  /** Nodes this backend created, by owner. */
  readonly #contenders = new Map<string, Contender>();
  /** Election subscriptions not stopped yet (`watchElection`); `close()` stops them. */
  readonly #electionWatches = new Set<ElectionWatcher>();
  /** Deletes of our own nodes that could not reach the ensemble yet, retried until done. */
  readonly #doomed = new Set<Doomed>();
  /** Clean-ups of lock-delay markers whose grant this backend ended at its TTL (lock-delay.ts). */
  readonly #settles = new Set<NodeJS.Timeout>();
  /** Background retries of `#doomed`, per session. */
  readonly #retries = new Map<ZkSession, NodeJS.Timeout>();
  readonly #retryDelays = new Map<ZkSession, number>();
  #closed = false;
  /** Aborted by `close()`: stops sessions still connecting. */
  readonly #closing = new AbortController();

  constructor(native: NativeZooKeeperClass, settings: ZookeeperBackendSettings) {
    this.#native = native;
    this.#settings = settings;
  }

  /** What a lost connection means for held locks: `lose` (default) or `wait`. */
  get suspendedPolicy(): SuspendedPolicy {
    return this.#settings.suspended;
  }

  /** The node under which the contenders for the lock `key` are created. */
  dirOf(key: string): string {
    return `/${this.#settings.namespace}/locks/${nodeNameOf(key)}`;
  }

  /** The node under which the contenders for the semaphore `key` are created (not the lock's). */
  semaphoreDirOf(key: string): string {
    return `/${this.#settings.namespace}/semaphores/${nodeNameOf(key)}`;
  }

  /**
   * The node under which the candidates of the election `key` are created (not the lock's, nor
   * the semaphore's).
   */
  electionDirOf(key: string): string {
    return `/${this.#settings.namespace}/elections/${nodeNameOf(key)}`;
  }

  /** The contenders' node of a lock (`permits` undefined), a semaphore or an election of `key`. */
  #dirFor(key: string, permits: number | undefined, election?: boolean): string {
    if (election === true) return this.electionDirOf(key);
    return permits === undefined ? this.dirOf(key) : this.semaphoreDirOf(key);
  }

  /**
   * The session the grants for `ttlMs` live in: its timeout is `ttlMs` as the server negotiates
   * it (within [2, 20] × its tickTime). Opened on first use, shared by all such locks.
   */
  session(ttlMs: number): Promise<ZkSession> {
    const existing = this.#sessions.get(ttlMs);
    if (existing) return existing;
    const opening = this.#open(ttlMs);
    this.#sessions.set(ttlMs, opening);
    opening.then(
      (session) =>
        session.signal.addEventListener('abort', () => {
          if (this.#sessions.get(ttlMs) === opening) this.#sessions.delete(ttlMs);
        }),
      () => this.#sessions.delete(ttlMs),
    );
    return opening;
  }

  /**
   * A session of `ttlMs` for the user, kept until closed, orphaned or lost.
   * @throws BackendError when no server answers.
   */
  async openSession(ttlMs: number): Promise<BackendSession> {
    const session = await this.#open(ttlMs);
    this.#userSessions.add(session);
    session.signal.addEventListener('abort', () => this.#userSessions.delete(session), {
      once: true,
    });
    return session;
  }

  /**
   * Create this contender's node (once) and read the children; granted when nothing blocks it
   * (a lock), or when fewer than `request.permits` nodes are ahead of it (a semaphore).
   * @throws PermitsMismatchError when a semaphore's contenders use another permit count.
   */
  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    this.#assertOpen('acquire');
    const { permits } = request;
    const dir = this.#dirFor(request.key, permits, request.election !== undefined);
    let contender = this.#contenders.get(request.owner);
    if (contender !== undefined && !contender.session.alive) {
      this.#forget(request.owner);
      contender = undefined;
    }
    if (contender === undefined) {
      const session = request.session
        ? this.#userSession(request.session)
        : await this.session(request.ttlMs);
      if (permits !== undefined) {
        const full = await this.#permitLineFull(session, dir, request, permits);
        if (full) return { granted: false };
      }
      contender = await this.#enqueue(session, dir, request);
    }
    try {
      return permits === undefined
        ? await this.#check(contender, dir, request)
        : await this.#checkPermit(contender, dir, request, permits);
    } catch (error) {
      // Refused for its count: its node is already deleted (#checkPermit).
      if (error instanceof PermitsMismatchError) throw error;
      // Curator's internalLockLoop (finally: deleteOurPath): a failed attempt leaves no node in
      // line, also when the caller gave up while it was in flight (no withdrawal follows then).
      // In the background, guaranteed: the error reaches the caller without waiting for the
      // ensemble, and a delete that cannot reach it now is retried.
      if (this.#contenders.get(request.owner) === contender) this.#forget(request.owner);
      void this.#deleteOwn(
        contender.session,
        dir,
        request.owner,
        contender.path,
        contender.delayMarker,
      ).catch(() => undefined);
      throw error;
    }
  }

  /**
   * The names of the children of `dir`, and the contender's token the first time (its node's
   * czxid, read in the same round trip: ZooKeeper answers a session's requests in order, so the
   * two are pipelined).
   * @throws BackendError when the contender's node is gone (deleted behind our back): the next
   *   attempt starts again as a new contender.
   */
  async #readLine(contender: Contender, dir: string): Promise<string[]> {
    const { session } = contender;
    const [names, stat] = await this.#call('acquire', () =>
      Promise.all([
        session.children(dir),
        contender.token === undefined ? session.stat(contender.path) : undefined,
      ]),
    );
    if (stat !== undefined) contender.token = BigInt(stat.czxid);
    if (!names.includes(contender.name) || contender.token === undefined) {
      this.#forget(contender.owner);
      throw new BackendError(this.name, 'acquire', new Error('contender node vanished'));
    }
    return names;
  }

  /**
   * Read a lock's (or an election's) line: granted, or what to wait on (its predecessor). A
   * contender first in line is granted only when no lock-delay runs (`#delayGate`), and a grant
   * with `request.lockDelayMs` makes its marker before it is answered (lock-delay.ts).
   */
  async #check(contender: Contender, dir: string, request: AttemptRequest): Promise<AttemptResult> {
    const { session } = contender;
    const names = await this.#readLine(contender, dir);
    // An election's candidates wait as a lock's writers do (election.ts).
    const entries = request.election === undefined ? parseChildren(names) : parseCandidates(names);
    const mine = entries.find((e) => e.name === contender.name)!;
    const verdict = queueVerdict(entries, mine, request.heldWriter);
    if (verdict.outcome === 'granted') {
      const delayed = await this.#delayGate(session, dir, names);
      if (delayed !== undefined) return delayed;
      const { lockDelayMs = 0 } = request;
      if (lockDelayMs > 0 && contender.delayMarker === undefined) {
        await this.#markDelay(contender, dir, lockDelayMs);
      }
      return this.#grant(contender, request);
    }
    if (verdict.outcome === 'downgrade-blocked') {
      await this.abandon(request);
      throw downgradeBlocked(request.key);
    }
    const predecessorPath = `${dir}/${verdict.predecessor.name}`;
    return {
      granted: false,
      queued: true,
      recheckAfterMs: RECHECK_AFTER_MS,
      waitForChange: (signal, maxMs) =>
        session.waitForDelete(predecessorPath, signal, maxMs).catch(() => undefined),
    };
  }

  /**
   * The lock-delay gate of a contender the line would grant (lock-delay.ts): for each marker in
   * `names` whose holder node is gone, its delay left (stamping the end first when nobody has);
   * a delay over is cleared (stamp and marker deleted). Undefined when nothing delays the grant,
   * else the answer `held` with the longest delay left as `holderTtlMs`, the contender's node kept
   * in line, and a wait for that stamp's deletion (a release that raced the stamp clears it) or
   * for the delay left, whichever comes first.
   * @throws BackendError when the ensemble cannot answer.
   */
  async #delayGate(
    session: ZkSession,
    dir: string,
    names: readonly string[],
  ): Promise<AttemptResult | undefined> {
    let longest = 0;
    let endPath = '';
    for (const marker of endedMarkers(names)) {
      const path = `${dir}/${marker}`;
      const left = await this.#delayLeft(session, path);
      if (left > longest) {
        longest = left;
        endPath = `${path}/${END_NODE}`;
      }
    }
    if (longest <= 0) return undefined;
    // Judged at the stamp's write, before this answer: what is left now is no more.
    const leftMs = Math.max(1, Math.floor(longest));
    return {
      granted: false,
      queued: true,
      holderTtlMs: leftMs,
      recheckAfterMs: leftMs,
      waitForChange: (signal, maxMs) =>
        session.waitForDelete(endPath, signal, Math.min(maxMs, leftMs)).catch(() => undefined),
    };
  }

  /**
   * The delay left of the ended grant whose marker is `markerPath`, ms, on the ensemble's clock:
   * the marker's delay less the age of its end stamp (made now when missing, made again when its
   * age cannot be judged; lock-delay.ts). At 0 or less, the stamp and the marker are deleted
   * first. 0 when the marker is gone (a release cleared it).
   * @throws BackendError when the ensemble cannot answer.
   */
  async #delayLeft(session: ZkSession, markerPath: string): Promise<number> {
    const marker = await this.#call('acquire', () => session.read(markerPath));
    if (marker === undefined) return 0;
    const delayMs = decodeDelay(marker.data);
    const endPath = `${markerPath}/${END_NODE}`;
    for (let tries = 0; tries < 3; tries++) {
      try {
        await session.create(endPath, marker.data, CREATE_MODE.persistent);
      } catch (error) {
        const code = zkCode(error);
        if (code === ZCODE.noNode) return 0;
        if (code !== ZCODE.nodeExists) throw await this.#wrap('acquire', error);
      }
      let stat: NodeStat;
      try {
        // The write's mtime is the ensemble's now; the stamp's ctime its end.
        stat = await session.setData(endPath, marker.data, -1);
      } catch (error) {
        if (zkCode(error) === ZCODE.noNode) continue;
        throw await this.#wrap('acquire', error);
      }
      const ageMs = stampAgeMs(stat);
      if (ageMs === undefined) {
        // Stamped under another leader (or its clock went back): count afresh from now.
        await this.#call('acquire', () => session.delete(endPath, -1));
        continue;
      }
      if (ageMs < delayMs) return delayMs - ageMs;
      await this.#call('acquire', () => this.#clearMarker(session, markerPath));
      return 0;
    }
    return delayMs;
  }

  /** Delete a lock-delay marker and its end stamp (a stamp made in between is deleted too). */
  async #clearMarker(session: ZkSession, markerPath: string): Promise<void> {
    for (let tries = 0; ; tries++) {
      await session.delete(`${markerPath}/${END_NODE}`, -1);
      try {
        await session.delete(markerPath, -1);
        return;
      } catch (error) {
        if (zkCode(error) !== ZCODE.notEmpty || tries >= 3) throw error;
      }
    }
  }

  /**
   * Record a grant's lock-delay: its marker, `_d_<node name>` with the delay as data (persistent:
   * it outlives the session; lock-delay.ts). Made before the grant is answered.
   * @throws BackendError when the ensemble cannot answer.
   */
  async #markDelay(contender: Contender, dir: string, delayMs: number): Promise<void> {
    const path = `${dir}/${markerNameOf(contender.name)}`;
    try {
      await contender.session.create(path, encodeDelay(delayMs), CREATE_MODE.persistent);
    } catch (error) {
      // Made by an attempt whose reply was lost: the same grant's.
      if (zkCode(error) !== ZCODE.nodeExists) throw await this.#wrap('acquire', error);
    }
    contender.delayMarker = path;
  }

  /**
   * After this backend ended a grant with a lock-delay at its TTL (deleted its live node): stamp
   * the end at once, and delete the marker once its delay is over (while the session lives and
   * the backend is open), so an ended grant nobody contends for leaves nothing behind.
   */
  #stampEnd(session: ZkSession, markerPath: string): void {
    const settle = (afterMs: number) => {
      const timer = setTimeout(() => {
        this.#settles.delete(timer);
        if (this.#closed || !session.alive) return;
        this.#delayLeft(session, markerPath).then(
          (left) => left > 0 && settle(left + SETTLE_SLACK_MS),
          () => undefined,
        );
      }, afterMs);
      timer.unref();
      this.#settles.add(timer);
    };
    session.create(`${markerPath}/${END_NODE}`, '', CREATE_MODE.persistent).then(
      () => undefined,
      () => undefined,
    );
    void session.read(markerPath).then(
      (marker) => {
        if (marker !== undefined) settle(decodeDelay(marker.data) + SETTLE_SLACK_MS);
      },
      () => undefined,
    );
  }

  /**
   * Before a semaphore contender's node is made, read the line: a contender using another permit
   * count refuses this one with nothing written; a single attempt (`willWait: false`) that would
   * not get a permit answers not granted without joining the line (true).
   * @throws PermitsMismatchError
   */
  async #permitLineFull(
    session: ZkSession,
    dir: string,
    request: AttemptRequest,
    permits: number,
  ): Promise<boolean> {
    const entries = parsePermitLine(await this.#call('acquire', () => session.children(dir)));
    const inUse = otherCountInUse(entries, permits);
    if (inUse !== undefined) throw new PermitsMismatchError(request.key, permits, inUse);
    return request.willWait === false && entries.length >= permits;
  }

  /**
   * Read a semaphore's line (and the token, the first time): a permit, or what to wait on
   * (permit-line.ts). A contender that finds a node ahead with another count (made after the
   * check before its own create) deletes its node before it answers with the mismatch.
   * @throws PermitsMismatchError
   */
  async #checkPermit(
    contender: Contender,
    dir: string,
    request: AttemptRequest,
    permits: number,
  ): Promise<AttemptResult> {
    const { session } = contender;
    const entries = parsePermitLine(await this.#readLine(contender, dir));
    const mine = entries.find((e) => e.name === contender.name)!;
    const verdict = permitVerdict(entries, mine, permits);
    if (verdict.outcome === 'mismatch') {
      this.#forget(request.owner);
      // A delete that cannot reach the ensemble now is kept and retried (guaranteed, #deleteOwn).
      await this.#deleteOwn(session, dir, request.owner, contender.path).catch(() => undefined);
      throw new PermitsMismatchError(request.key, permits, verdict.inUse);
    }
    if (verdict.outcome === 'granted') {
      if (!contender.announced) await this.#announce(contender, verdict.behind);
      return this.#grant(contender, request);
    }
    if (request.willWait === false) return { granted: false, queued: true };
    const paths = verdict.watch.map((entry) => `${dir}/${entry.name}`);
    // A later waiter's predecessor written since the line was read (version 0 at its create) was
    // granted meanwhile: count again at once instead of missing that write.
    const changed = verdict.firstWaiter ? undefined : (node: NodeStat) => node.version > 0;
    return {
      granted: false,
      queued: true,
      recheckAfterMs: RECHECK_AFTER_MS,
      waitForChange: (signal, maxMs) =>
        session.waitForChange(paths, signal, maxMs, changed).catch(() => undefined),
    };
  }

  /**
   * A semaphore contender's first grant: when nodes are behind it (`behind`), write its node once
   * (same data, new version), which wakes a successor that watches it as its predecessor, so
   * that it counts again and, now the first waiter, watches the holders (permit-line.ts). A
   * contender granted with nobody behind writes nothing: whoever comes later reads the line after
   * this grant and counts it as a holder.
   */
  async #announce(contender: Contender, behind: boolean): Promise<void> {
    if (behind) {
      const written = await this.#call('acquire', () =>
        contender.session.setData(contender.path, String(contender.ttlMs), contender.version),
      );
      contender.version = written.version;
    }
    contender.announced = true;
  }

  /**
   * Confirm that the owner's node still exists with the lease's czxid. The session is kept
   * alive by the client, and its negotiated timeout is the TTL of a lease with the watchdog (a
   * node cannot move to another session). A lease without the watchdog gets its TTL restarted:
   * `ttlMs` (the session's timeout when `ttlMs` is what the session was opened with), written
   * into the node for `inspect`; it is never believed past the session's own validity.
   */
  async renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    const dir = this.#dirFor(lease.key, lease.permits, lease.election);
    const contender = this.#contenderIn(dir, lease.owner);
    if (contender === undefined || !contender.session.alive || contender.lost.signal.aborted) {
      return { ok: false, reason: await this.#othersOrNobody(dir, lease.permits, lease.election) };
    }
    if (contender.token !== lease.fencingToken) return { ok: false, reason: 'not-owner' };
    const { session } = contender;
    const applied =
      contender.autoRenew || ttlMs === session.requestedTimeoutMs ? session.timeoutMs : ttlMs;
    let stat: NodeStat | undefined;
    if (contender.value !== undefined && applied !== contender.ttlMs) {
      // A candidate's node keeps its value beside the TTL.
      stat = await this.#writeCandidate(
        contender,
        encodeCandidate(applied, contender.value),
        'renew',
      );
    } else {
      try {
        stat = await this.#call('renew', () =>
          applied === contender.ttlMs
            ? session.stat(contender.path)
            : session.setData(contender.path, String(applied), contender.version),
        );
      } catch (error) {
        const code = zkCode(error);
        if (code !== ZCODE.noNode && code !== ZCODE.badVersion) throw error;
        stat = undefined;
      }
    }
    if (stat === undefined || BigInt(stat.czxid) !== lease.fencingToken) {
      this.#forget(lease.owner);
      return { ok: false, reason: await this.#othersOrNobody(dir, lease.permits, lease.election) };
    }
    contender.version = stat.version;
    contender.ttlMs = applied;
    if (!contender.autoRenew) this.#startExpiry(contender);
    return { ok: true, ttlMs: applied, validUntil: session.validUntil };
  }

  /**
   * Delete the owner's node by path and version, if its czxid is the token. A delete whose outcome
   * is unknown (the connection dropped) is kept and done once the ensemble answers again
   * (Curator's guaranteed delete), and the error is thrown; a later release asks the ensemble.
   */
  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const dir = this.#dirFor(lease.key, lease.permits, lease.election);
    const known = this.#contenderIn(dir, lease.owner);
    if (known !== undefined && known.token !== lease.fencingToken) {
      // Not this owner's grant: leave its node (if any) alone.
      return this.#othersOrNobody(dir, lease.permits, lease.election);
    }
    // A release that failed before left its node's delete pending: its session and path.
    const own = known ?? this.#pendingDelete(dir, lease.owner);
    const session = own?.session.alive ? own.session : await this.session(DEFAULTS.ttlMs);
    const path = own?.path ?? (await this.#findNode(session, dir, lease.owner));
    if (path === undefined) {
      return this.#othersOrNobody(dir, lease.permits, lease.election);
    }
    let version = known?.version ?? -1;
    if (known === undefined) {
      const stat = await this.#call('release', () => session.stat(path));
      if (stat !== undefined && BigInt(stat.czxid) !== lease.fencingToken) return 'not-owner';
      version = stat?.version ?? -1;
    }
    let deleted: boolean;
    try {
      deleted = await this.#call('release', () => session.delete(path, version));
    } catch (error) {
      // Deleted in the background once the ensemble answers (on reconnection, or by the retry).
      known?.lost.abort(error);
      this.#forget(lease.owner);
      this.#doom({ session, dir, owner: lease.owner, path, marker: known?.delayMarker });
      throw error;
    }
    this.#forget(lease.owner);
    if (deleted) {
      // The live grant is released: its lock-delay with it. A grant made by another process (an
      // owner-addressed one) may have a marker this backend does not know of.
      const marker =
        known === undefined && lease.permits === undefined
          ? `${dir}/${markerNameOf(path.slice(dir.length + 1))}`
          : known?.delayMarker;
      if (marker !== undefined) {
        // Left in force (the conservative side) when the ensemble cannot be reached.
        await this.#clearMarker(session, marker).catch(() => undefined);
      }
      return 'released';
    }
    return this.#othersOrNobody(dir, lease.permits, lease.election);
  }

  /** Delete this contender's node (waiting or granted). */
  async abandon(request: AttemptRequest): Promise<void> {
    const dir = this.#dirFor(request.key, request.permits, request.election !== undefined);
    const known = this.#contenders.get(request.owner);
    const session = known?.session.alive ? known.session : await this.session(DEFAULTS.ttlMs);
    this.#forget(request.owner);
    await this.#deleteOwn(session, dir, request.owner, known?.path, known?.delayMarker);
  }

  /**
   * Replace a leader's value: setData on its own candidate node, with the version this backend
   * last wrote (compare-and-set), only while `lease.owner` holds the election with
   * `lease.fencingToken` (the node's czxid; a candidate leads from its grant until its node goes).
   * A version moved by a write of this backend whose reply was lost, or by a renewal sent at the
   * same time, is read again (the node's czxid still the term) and the write retried. The write
   * fires the data watch that observers keep on the leader's node (`watchElection`).
   * @returns `proclaimed`; `not-owner` for a candidate not granted or another term;
   *   `not-held` / `not-owner` as `renew` answers when the node is gone.
   * @throws BackendError when the ensemble cannot answer.
   */
  async proclaim(lease: LeaseRef, value: string): Promise<ProclaimOutcome> {
    this.#assertOpen('proclaim');
    const dir = this.electionDirOf(lease.key);
    const contender = this.#contenderIn(dir, lease.owner);
    if (
      contender === undefined ||
      contender.value === undefined ||
      !contender.session.alive ||
      contender.lost.signal.aborted
    ) {
      return this.#othersOrNobody(dir, undefined, true);
    }
    if (!contender.granted || contender.token !== lease.fencingToken) return 'not-owner';
    const data = encodeCandidate(contender.ttlMs, value);
    const stat = await this.#writeCandidate(contender, data, 'proclaim');
    if (stat === undefined) {
      this.#forget(lease.owner);
      return this.#othersOrNobody(dir, undefined, true);
    }
    contender.value = value;
    return 'proclaimed';
  }

  /**
   * Write `data` into a candidate's own node, if its czxid is still the candidate's token, with
   * the version last seen (the data of a candidate node is written by its holder only): on a
   * version moved by another write of ours (a renewal and a proclaim at once, or a write whose
   * reply was lost), the node is read again and the write retried.
   * @returns the node's new stat, or undefined when the node is gone or is not this grant's.
   * @throws BackendError when the ensemble cannot answer.
   */
  async #writeCandidate(
    contender: Contender,
    data: string,
    operation: 'renew' | 'proclaim',
  ): Promise<NodeStat | undefined> {
    const { session, path } = contender;
    for (let tries = 0; ; tries++) {
      try {
        const stat = await this.#call(operation, () =>
          session.setData(path, data, contender.version),
        );
        contender.version = stat.version;
        return stat;
      } catch (error) {
        const code = zkCode(error);
        if (code === ZCODE.noNode) return undefined;
        if (code !== ZCODE.badVersion || tries >= 3) throw error;
      }
      const now = await this.#call(operation, () => session.stat(path));
      if (now === undefined || BigInt(now.czxid) !== contender.token) return undefined;
      contender.version = now.version;
    }
  }

  /**
   * The leader of election `key`: after a `sync` (so that the read sees every write committed
   * before it, whichever server this session talks to), the children of the election's node, then
   * the data of the lowest candidate node. ZooKeeper answers a session's requests in order: the
   * sync and the children go out together (one round trip), the data read follows (a second).
   * The read is consistent: a node made after the children read has a higher sequence, so the
   * lowest node, while it exists, is the leader, and its data read is the leader's value at that
   * zxid. A head deleted in between (no node) is read again from the children. Its owner is in
   * its name, its term is its czxid; `candidates` counts the candidate nodes of the children
   * read; `ttlMs` is this process's bound when the leader is one of its own grants, else the TTL
   * its holder wrote into the node (an upper bound: another session's remaining time cannot be
   * read).
   * @throws BackendError when the ensemble cannot answer.
   */
  async leader(key: string): Promise<ElectedLeader | null> {
    this.#assertOpen('leader');
    const dir = this.electionDirOf(key);
    const session = await this.session(DEFAULTS.ttlMs);
    for (;;) {
      const [, names] = await this.#call('leader', () =>
        Promise.all([session.sync(dir), session.children(dir)]),
      );
      const candidates = parseCandidates(names);
      const head = candidates[0];
      // In a lock-delay after a leadership that ended without a resignation, nobody leads.
      if (head === undefined || delayInForce(names)) return null;
      const path = `${dir}/${head.name}`;
      const read = await this.#call('leader', () => session.read(path));
      if (read === undefined) continue;
      const term = BigInt(read.stat.czxid);
      const data = decodeCandidate(read.data);
      if (data === undefined) {
        const malformed = new Error(`candidate node ${path} holds no TTL and value`);
        throw new BackendError(this.name, 'leader', malformed);
      }
      const ttlMs = this.#ownRemainingMs(head.owner, path, term) ?? data.ttlMs;
      return { owner: head.owner, term, value: data.value, ttlMs, candidates: candidates.length };
    }
  }

  /**
   * Watch election `key` (election.ts, `ElectionWatcher`): a children watch on the election's node
   * (an exists watch while it does not exist) and a data watch on the leader's node, in the
   * backend's shared session, each set again after it fires; `onChange` is called after every
   * fire: a candidate joining or leaving (a grant, a resign, a withdrawal, a session's end), a
   * proclaim, and the creation of the election's node. Resolves once the watches are set.
   * `recheckAfterMs` is 30 s: ZooKeeper's watches are not lost while the session lives, and a
   * session that ends or moves to a new client fires them (they are then set again).
   * @throws BackendError when the watches cannot be set.
   */
  async watchElection(key: string, onChange: () => void): Promise<ElectionWatch> {
    this.#assertOpen('watch');
    const watcher: ElectionWatcher = new ElectionWatcher(
      {
        dir: this.electionDirOf(key),
        session: () => this.session(DEFAULTS.ttlMs),
        call: (run) => this.#call('watch', run),
        onStop: () => this.#electionWatches.delete(watcher),
      },
      onChange,
    );
    this.#electionWatches.add(watcher);
    await watcher.start();
    return watcher;
  }

  /** Lowest node (owner, czxid, its session's timeout) and the newest node's czxid. */
  async inspect(key: string): Promise<LockInfo> {
    const dir = this.dirOf(key);
    const session = await this.session(DEFAULTS.ttlMs);
    const names = await this.#call('inspect', () => session.children(dir));
    const entries = parseChildren(names);
    const first = entries[0];
    const last = entries.at(-1);
    if (first === undefined || last === undefined)
      return { key, holder: null, lastFencingToken: 0n };
    if (delayInForce(names)) {
      // In a lock-delay: nobody holds the key; the first in line waits for the delay's end.
      const tail = await this.#call('inspect', () => session.stat(`${dir}/${last.name}`));
      if (tail === undefined) return this.inspect(key);
      return { key, holder: null, lastFencingToken: BigInt(tail.czxid) };
    }
    const [head, tail] = await Promise.all([
      this.#call('inspect', () => session.read(`${dir}/${first.name}`)),
      last === first ? undefined : this.#call('inspect', () => session.stat(`${dir}/${last.name}`)),
    ]);
    if (head === undefined) return this.inspect(key);
    const headToken = BigInt(head.stat.czxid);
    return {
      key,
      holder: { owner: first.owner, fencingToken: headToken, ttlMs: Number(head.data) || 0 },
      lastFencingToken: tail === undefined ? headToken : BigInt(tail.czxid),
    };
  }

  /**
   * One page of the held locks, read locks and semaphores under `request.prefix`, in the order of
   * the keys' node names (listing.ts): one `sync` and one `getChildren` of the namespace's
   * `locks` node (then of its `semaphores` node) per page, then, for each of at most
   * `request.pageSize` keys, one `getChildren` of its node (its line at one zxid) and one
   * `getData` per holder node (czxid = fencing token, data = the holder's TTL).
   * @throws InvalidArgumentError for a cursor this backend did not make, before any request.
   * @throws BackendError when the ensemble cannot answer.
   */
  async list(request: ListRequest): Promise<ListPage> {
    return listPage(
      {
        root: `/${this.#settings.namespace}`,
        session: () => this.session(DEFAULTS.ttlMs),
        call: (run) => this.#call('list', run),
        ownRemainingMs: (owner, path, token) => this.#ownRemainingMs(owner, path, token),
      },
      request,
    );
  }

  /**
   * The remaining validity of `owner`'s grant at `path` with czxid `token` when it is one of ours
   * and live, ms (at least 1):
   * until its session's `validUntil` (the start of the session's last answered request plus its
   * negotiated timeout, less drift: the ensemble keeps the session at least that long), and for a
   * lease without the watchdog until its own expiry if sooner. Undefined for any other node.
   */
  #ownRemainingMs(owner: string, path: string, token: bigint): number | undefined {
    const contender = this.#contenders.get(owner);
    if (
      contender === undefined ||
      contender.path !== path ||
      contender.token !== token ||
      !contender.session.alive ||
      contender.lost.signal.aborted
    ) {
      return undefined;
    }
    const now = monotonicNow();
    const until = Math.min(contender.session.validUntil, contender.expiresAt ?? Infinity);
    return Math.max(1, Math.floor(until - now));
  }

  /** Close every session this backend opened (the server deletes their nodes). */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    for (const watcher of [...this.#electionWatches]) watcher.stop();
    for (const contender of this.#contenders.values()) clearTimeout(contender.expiry);
    this.#contenders.clear();
    for (const timer of this.#settles) clearTimeout(timer);
    this.#settles.clear();
    for (const timer of this.#retries.values()) clearTimeout(timer);
    this.#retries.clear();
    this.#retryDelays.clear();
    this.#doomed.clear();
    const sessions = await Promise.allSettled(this.#sessions.values());
    this.#sessions.clear();
    for (const s of sessions) if (s.status === 'fulfilled') await s.value.close();
    for (const session of [...this.#userSessions]) await session.close();
  }

  async #open(ttlMs: number): Promise<ZkSession> {
    this.#assertOpen('open session');
    const session = await ZkSession.open(this.#native, {
      connect: this.#settings.connect,
      requestedTimeoutMs: ttlMs,
      connectTimeoutMs: this.#settings.connectTimeoutMs,
      signal: this.#closing.signal,
    });
    if (this.#closed) {
      await session.close();
      this.#assertOpen('open session');
    }
    session.signal.addEventListener(
      'abort',
      () => {
        for (const contender of this.#contenders.values()) {
          if (contender.session === session) contender.lost.abort(session.signal.reason);
        }
        // The server deletes the session's nodes itself.
        for (const doomed of this.#doomed) {
          if (doomed.session === session) this.#doomed.delete(doomed);
        }
        clearTimeout(this.#retries.get(session));
        this.#retries.delete(session);
        this.#retryDelays.delete(session);
      },
      { once: true },
    );
    session.onReconnect = () => void this.#sweep(session);
    return session;
  }

  /** Create the contender's node in `session`, creating the parents when missing. */
  async #enqueue(session: ZkSession, dir: string, request: AttemptRequest): Promise<Contender> {
    const prefix =
      request.election !== undefined
        ? candidateNodePrefix(request.owner)
        : request.permits === undefined
          ? `_c_${request.owner}-${request.mode === 'read' ? 'r' : 'w'}-`
          : permitNodePrefix(request.owner, request.permits);
    const data =
      request.election === undefined
        ? String(session.timeoutMs)
        : encodeCandidate(session.timeoutMs, request.election.value);
    let path: string | undefined;
    for (let tries = 0; path === undefined; tries++) {
      try {
        path = await session.create(`${dir}/${prefix}`, data, CREATE_MODE.ephemeralSequential);
      } catch (error) {
        const code = zkCode(error);
        if (code === ZCODE.noNode && tries < 3) {
          await this.#call('acquire', () => this.#createParents(session, dir));
        } else if (
          code === ZCODE.connectionLoss ||
          code === ZCODE.operationTimeout ||
          code === ZCODE.closing
        ) {
          // The create may have been applied with its reply lost: find it by owner (protected mode).
          try {
            path = await this.#findNode(session, dir, request.owner);
          } catch {
            // Not even that answered: delete it by name once the ensemble can be reached.
            this.#doom({ session, dir, owner: request.owner, path: undefined });
            throw await this.#wrap('acquire', error);
          }
          if (path === undefined) throw await this.#wrap('acquire', error);
        } else throw await this.#wrap('acquire', error);
      }
    }
    const contender: Contender = {
      owner: request.owner,
      path,
      name: path.slice(dir.length + 1),
      session,
      autoRenew: request.autoRenew,
      token: undefined,
      version: 0,
      ttlMs: session.timeoutMs,
      lost: new AbortController(),
      expiry: undefined,
      expiresAt: undefined,
      unlink: undefined,
      announced: false,
      value: request.election?.value,
      granted: false,
      delayMarker: undefined,
    };
    this.#contenders.set(request.owner, contender);
    return contender;
  }

  /**
   * The key's node, a container (CreateMode.CONTAINER, ZooKeeper 3.5.3 and later): once its last
   * contender node is gone, the leader deletes it on its next container check
   * (`znode.container.checkIntervalMs`), so a released key leaves nothing behind. Its parents,
   * `/<namespace>` and `/<namespace>/locks` (or `/<namespace>/semaphores`), are persistent and
   * made only when missing (the first lock or semaphore of a namespace), shared by every key.
   */
  async #createParents(session: ZkSession, dir: string): Promise<void> {
    const root = `/${this.#settings.namespace}`;
    const create = async (path: string, mode: number) => {
      try {
        await session.create(path, '', mode);
      } catch (error) {
        if (zkCode(error) !== ZCODE.nodeExists) throw error;
      }
    };
    try {
      await create(dir, CREATE_MODE.container);
    } catch (error) {
      if (zkCode(error) !== ZCODE.noNode) throw error;
      await create(root, CREATE_MODE.persistent);
      await create(dir.slice(0, dir.lastIndexOf('/')), CREATE_MODE.persistent);
      await create(dir, CREATE_MODE.container);
    }
  }

  #grant(contender: Contender, request: AttemptRequest): AttemptResult {
    const { session } = contender;
    const token = contender.token as bigint;
    contender.granted = true;
    if (this.#settings.suspended === 'lose' && contender.unlink === undefined) {
      // Through the session's fan-out, not a listener per grant on its shared `suspended` signal.
      contender.unlink = session.onceSuspended((reason) => contender.lost.abort(reason));
    }
    if (!request.autoRenew && contender.expiry === undefined) this.#startExpiry(contender);
    return {
      granted: true,
      token,
      ttlMs: session.timeoutMs,
      lost: contender.lost.signal,
      validUntil: session.validUntil,
      atRisk: () => session.suspended.aborted,
    };
  }

  /** Without the watchdog, the node is deleted when the session timeout passes unrenewed. */
  #startExpiry(contender: Contender): void {
    clearTimeout(contender.expiry);
    contender.expiry = setTimeout(() => {
      if (this.#contenders.get(contender.owner) !== contender) return;
      this.#forget(contender.owner);
      const { session, delayMarker } = contender;
      session.delete(contender.path, contender.version).then(
        // Ended without a release: a lock-delay counts from here.
        (deleted) => deleted && delayMarker !== undefined && this.#stampEnd(session, delayMarker),
        () => undefined,
      );
    }, contender.ttlMs);
    contender.expiresAt = monotonicNow() + contender.ttlMs;
    contender.expiry.unref();
  }

  /**
   * After a reconnection (and as the background retry): delete the nodes of grants lost while
   * the connection was down, and our own nodes whose delete could not reach the ensemble.
   */
  async #sweep(session: ZkSession): Promise<void> {
    for (const contender of [...this.#contenders.values()]) {
      if (contender.session !== session || !contender.lost.signal.aborted) continue;
      this.#forget(contender.owner);
      await session.delete(contender.path, -1).catch(() => undefined);
    }
    for (const doomed of [...this.#doomed]) {
      if (doomed.session !== session || !this.#doomed.has(doomed)) continue;
      this.#doomed.delete(doomed);
      // Kept again (by #deleteOwn) when the ensemble still cannot be reached.
      await this.#deleteOwn(session, doomed.dir, doomed.owner, doomed.path, doomed.marker).catch(
        () => undefined,
      );
    }
  }

  /**
   * Delete our own node of `owner` under `dir` (by `path`, or found by its protected name), never
   * the node of a contender this backend has live for that owner now. A delete that fails is
   * kept and retried in the background and on reconnection while `session` lives (Curator's
   * guaranteed delete), and the error is rethrown.
   */
  async #deleteOwn(
    session: ZkSession,
    dir: string,
    owner: string,
    path: string | undefined,
    marker?: string,
  ): Promise<void> {
    if (!session.alive) return;
    const live = () => this.#contenders.get(owner)?.path;
    try {
      if (path === undefined) {
        const names = await this.#call('abandon', () => session.children(dir));
        for (const name of names) {
          const found = `${dir}/${name}`;
          if (name.startsWith(`_c_${owner}-`) && found !== live()) {
            const deleted = await this.#call('abandon', () => session.delete(found, -1));
            // A live grant withdrawn: its lock-delay goes with it.
            const itsMarker = markerNameOf(name);
            if (deleted && names.includes(itsMarker)) {
              await this.#call('abandon', () => this.#clearMarker(session, `${dir}/${itsMarker}`));
            }
          }
        }
      } else if (path !== live()) {
        const deleted = await this.#call('abandon', () => session.delete(path, -1));
        if (deleted && marker !== undefined) {
          await this.#call('abandon', () => this.#clearMarker(session, marker));
        }
      }
    } catch (error) {
      if (!this.#closed) this.#doom({ session, dir, owner, path, marker });
      throw error;
    }
  }

  /**
   * Keep a delete for later: done on reconnection, or by a background retry while connected
   * (first after DELETE_RETRY_MS, then doubling up to 10 s, while the session lives).
   */
  #doom(doomed: Doomed): void {
    const { session } = doomed;
    if (!session.alive) return;
    this.#doomed.add(doomed);
    if (this.#retries.has(session)) return;
    const delayMs = this.#retryDelays.get(session) ?? DELETE_RETRY_MS;
    this.#retryDelays.set(session, Math.min(delayMs * 2, 10_000));
    const timer = setTimeout(() => {
      this.#retries.delete(session);
      const pending = [...this.#doomed].filter((d) => d.session === session);
      if (pending.length === 0) {
        this.#retryDelays.delete(session);
        return;
      }
      // While suspended, the reconnection sweeps; keep waiting for it.
      if (session.suspended.aborted) {
        for (const d of pending) this.#doom(d);
        return;
      }
      void this.#sweep(session).then(() => {
        if (![...this.#doomed].some((d) => d.session === session)) {
          this.#retryDelays.delete(session);
        }
      });
    }, delayMs);
    timer.unref();
    this.#retries.set(session, timer);
  }

  /** A pending delete (`#doom`) of `owner`'s node under `dir` whose path is known. */
  #pendingDelete(dir: string, owner: string): { session: ZkSession; path: string } | undefined {
    for (const d of this.#doomed) {
      if (d.dir === dir && d.owner === owner && d.path !== undefined && d.session.alive) {
        return { session: d.session, path: d.path };
      }
    }
    return undefined;
  }

  /** The node of `owner` under `dir`, found by its protected name. */
  async #findNode(session: ZkSession, dir: string, owner: string): Promise<string | undefined> {
    const names = await this.#call('lookup', () => session.children(dir));
    const name = names.find((n) => n.startsWith(`_c_${owner}-`));
    return name === undefined ? undefined : `${dir}/${name}`;
  }

  /**
   * The answer for an owner and token that hold nothing under `dir` (a lock's, a semaphore's
   * when `permits` is set, an election's when `election` is true): `not-owner` while any
   * contender node is there (the first ones hold the lock, the permits or the election), else
   * `not-held`.
   */
  async #othersOrNobody(
    dir: string,
    permits: number | undefined,
    election?: boolean,
  ): Promise<'not-owner' | 'not-held'> {
    const session = await this.session(DEFAULTS.ttlMs);
    const names = await this.#call('lookup', () => session.children(dir));
    const line =
      election === true
        ? parseCandidates(names)
        : permits === undefined
          ? parseChildren(names)
          : parsePermitLine(names);
    return line.length > 0 ? 'not-owner' : 'not-held';
  }

  /**
   * This backend's contender of `owner` when its node is under `dir`: a lease of the lock, the
   * semaphore or the election of a key never acts on another object's node of the same owner.
   */
  #contenderIn(dir: string, owner: string): Contender | undefined {
    const contender = this.#contenders.get(owner);
    return contender?.path.startsWith(`${dir}/`) ? contender : undefined;
  }

  #forget(owner: string): void {
    const contender = this.#contenders.get(owner);
    if (contender === undefined) return;
    clearTimeout(contender.expiry);
    contender.unlink?.();
    this.#contenders.delete(owner);
  }

  /** The live user session behind `session`. */
  #userSession(session: BackendSession): ZkSession {
    if (session instanceof ZkSession && this.#userSessions.has(session)) return session;
    if (session.signal.aborted) {
      throw new BackendError(this.name, 'acquire', new Error(`session ${session.id} ended`));
    }
    throw new InvalidArgumentError('session', 'a session of this ZooKeeper store', session.id);
  }

  #assertOpen(operation: string): void {
    if (this.#closed) throw new BackendError(this.name, operation, new Error('backend is closed'));
  }

  async #call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    this.#assertOpen(operation);
    try {
      return await run();
    } catch (error) {
      throw await this.#wrap(operation, error);
    }
  }

  /**
   * `error` as the BackendError of `operation`: in the one form of an unreachable engine when
   * the request found no connection or no answer (`requestUnreachable`), the ensemble of the URL
   * as its address.
   */
  async #wrap(operation: string, error: unknown): Promise<BackendError> {
    if (error instanceof BackendError) return error;
    const { connect, connectTimeoutMs } = this.#settings;
    const unreachable = await requestUnreachable(error, connect, connectTimeoutMs);
    return new BackendError(this.name, operation, error, unreachable);
  }
}
