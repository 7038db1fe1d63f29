/**
 * A leader election on ZooKeeper, over plain data and one session's watches: the candidate node
 * names under the election's node, what a candidate node holds, and the subscription behind
 * `watchElection`.
 *
 * Curator's `LeaderLatch` and etcd's `concurrency.Election`: every candidate creates an
 * EPHEMERAL_SEQUENTIAL node `_c_<owner>-e-<10-digit sequence>` under
 * `/<namespace>/elections/<key>` (the election object of the key, apart from its lock's and its
 * semaphore's nodes), with the value it campaigns with as the node's data. The candidate with the
 * lowest sequence leads; the others wait in line, each watching its predecessor, as a lock's
 * writers do. A leader stays the lowest until its node goes (a node made later has a higher
 * sequence), so a leader's node, while it exists, is the election's one leader.
 *
 * The term is the czxid of the leader's node, as a lock's fencing token is. Zxids are the
 * ensemble's one transaction counter: they never go back, across idle elections and restarts
 * (a new epoch raises the high 32 bits). The election's node is a container, deleted by the
 * server once its last candidate is gone, and the sequence of the next one starts again at 0; the
 * term does not, since the next candidate's node is created after every earlier node's create.
 */
import type { ElectionWatch } from '../../core/backend.js';
import type { Entry } from './names.js';
import type { ZkSession } from './session.js';

/** How long an observer trusts the watches before it reads the leader again, ms. */
export const ELECTION_RECHECK_AFTER_MS = 30_000;

/** First pause before a watch that could not be set again is retried, ms (then doubled). */
const REARM_FIRST_MS = 250;
/** Longest pause between retries of a watch that cannot be set, ms. */
const REARM_MAX_MS = 5_000;

/**
 * An election candidate node name: the owner id (32 to 128 hex digits), `e`, the sequence. Other
 * children of an election's node are not candidates (ignored by the line, `leader` and the watch).
 */
const CANDIDATE_NODE_NAME = /^_c_([0-9a-f]{32,128})-e-(\d{10})$/;

/** The prefix of a candidate node's name of `owner` (the server appends the sequence). */
export function candidateNodePrefix(owner: string): string {
  return `_c_${owner}-e-`;
}

/**
 * The candidate entries among `names`, lowest sequence first, as a lock's line of writers: the
 * first holds the election, each other waits for the one just ahead (`queueVerdict`).
 */
export function parseCandidates(names: readonly string[]): Entry[] {
  const entries: Entry[] = [];
  for (const name of names) {
    const m = CANDIDATE_NODE_NAME.exec(name);
    if (m === null) continue;
    entries.push({ name, owner: m[1]!, mode: 'write', order: BigInt(m[2]!) });
  }
  return entries.sort((a, b) => (a.order < b.order ? -1 : a.order > b.order ? 1 : 0));
}

/**
 * A candidate node's data: `<ttlMs>:<value>`, the TTL its holder applies (the session timeout,
 * or a lease's own TTL without the watchdog; what `leader` reports for another process's leader)
 * and the value, UTF-8. The value may contain anything, `:` too: only the first one splits.
 */
export function encodeCandidate(ttlMs: number, value: string): string {
  return `${ttlMs}:${value}`;
}

/** The TTL and value of a candidate node's data; undefined when not `encodeCandidate`'s shape. */
export function decodeCandidate(data: string): { ttlMs: number; value: string } | undefined {
  const at = data.indexOf(':');
  if (at < 1) return undefined;
  const ttlMs = Number(data.slice(0, at));
  if (!Number.isSafeInteger(ttlMs) || ttlMs < 1) return undefined;
  return { ttlMs, value: data.slice(at + 1) };
}

/** What an election watch needs from its backend. */
export interface ElectionWatchSource {
  /** The election's node, `/<namespace>/elections/<key>`. */
  readonly dir: string;
  /** The session the watches are set in (the backend's shared one; a new one after its loss). */
  session(): Promise<ZkSession>;
  /** Run a request, its failure as a BackendError. */
  call<T>(run: () => Promise<T>): Promise<T>;
  /** Called once by `stop()`. */
  onStop(): void;
}

/** A one-shot watch set in a session: where it was set, and its callback (to forget it). */
interface Pending {
  readonly session: ZkSession;
  readonly fire: () => void;
  /** For the head's data watch: the node watched. */
  readonly path?: string;
}

/**
 * The subscription behind `watchElection`: at most three one-shot watches of one session at a
 * time, each set again after it fires (Curator's `NodeCache` / `PathChildrenCache` way):
 *
 * - a children watch on the election's node: fires when a candidate joins or leaves the line
 *   (a grant to the next candidate, a resign, a withdrawal, the end of a leader's session, and
 *   the expiry of a lease without the watchdog, whose node its holder deletes);
 * - while the election's node does not exist (no candidate yet, or the server deleted the empty
 *   container), an exists watch on it instead: fires at its creation, by the first candidate;
 * - a data watch on the head, the leader's node: fires at a `proclaim` (setData on that node).
 *
 * After each fire, `onChange` is called, then the watches that fired are set again. A session
 * that ends (lost, closed) or moves to a new native client (whose server knows none of the old
 * client's watches) fires them all: they are set again in the backend's current session. A watch
 * that cannot be set is retried with backoff, and `onChange` is called again once it is set
 * (changes may have gone unseen meanwhile).
 */
export class ElectionWatcher implements ElectionWatch {
  readonly recheckAfterMs = ELECTION_RECHECK_AFTER_MS;
  readonly #source: ElectionWatchSource;
  readonly #onChange: () => void;
  #stopped = false;
  #children: Pending | undefined;
  #exists: Pending | undefined;
  #head: Pending | undefined;
  /** A round of setting the watches is running; `#again`: another is due after it. */
  #arming = false;
  #again = false;
  /** A round failed: changes may have gone unseen until the next one succeeds. */
  #missed = false;
  #retry: NodeJS.Timeout | undefined;
  #retryMs = REARM_FIRST_MS;

  constructor(source: ElectionWatchSource, onChange: () => void) {
    this.#source = source;
    this.#onChange = onChange;
  }

  /**
   * Set the watches for the first time.
   * @throws BackendError when they cannot be set (the watcher is then stopped).
   */
  async start(): Promise<void> {
    this.#arming = true;
    try {
      await this.#armOnce();
    } catch (error) {
      this.stop();
      throw error;
    } finally {
      this.#arming = false;
    }
    if (this.#again) this.#rearm();
  }

  /** End the subscription: no `onChange` after it, no timer, the session forgets the watches. */
  stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    clearTimeout(this.#retry);
    this.#retry = undefined;
    for (const pending of [this.#children, this.#exists, this.#head]) {
      pending?.session.unwatch(pending.fire);
    }
    this.#children = this.#exists = this.#head = undefined;
    this.#source.onStop();
  }

  /** One watch fired (or its session went): tell, then set the watches again. */
  #fired(pending: Pending): void {
    if (this.#children === pending) this.#children = undefined;
    if (this.#exists === pending) this.#exists = undefined;
    if (this.#head === pending) this.#head = undefined;
    if (this.#stopped) return;
    this.#onChange();
    this.#rearm();
  }

  /** Set the missing watches, once at a time; after a failure, again with backoff. */
  #rearm(): void {
    if (this.#stopped) return;
    if (this.#arming) {
      this.#again = true;
      return;
    }
    clearTimeout(this.#retry);
    this.#retry = undefined;
    this.#arming = true;
    void (async () => {
      try {
        do {
          this.#again = false;
          await this.#armOnce();
        } while (this.#again && !this.#stopped);
        this.#retryMs = REARM_FIRST_MS;
        if (this.#missed && !this.#stopped) {
          this.#missed = false;
          this.#onChange();
        }
      } catch {
        if (this.#stopped) return;
        this.#missed = true;
        this.#retry = setTimeout(() => {
          this.#retry = undefined;
          this.#rearm();
        }, this.#retryMs);
        this.#retry.unref();
        this.#retryMs = Math.min(this.#retryMs * 2, REARM_MAX_MS);
      } finally {
        this.#arming = false;
      }
    })();
  }

  /**
   * Set whichever watch is not pending in the current session: on the line (children, or exists
   * while the election's node is missing), then on the head of the line read with it (or after
   * it, when the line's watch was still pending). A head deleted before its data watch is set
   * needs none: its deletion fires the line's watch.
   */
  async #armOnce(): Promise<void> {
    const { dir, call } = this.#source;
    const session = await this.#source.session();
    if (this.#stopped) return;
    let names: string[] | undefined;
    while (names === undefined) {
      if (this.#children?.session === session) {
        names = await call(() => session.children(dir));
        break;
      }
      const children = this.#pending(session);
      names = await call(() => session.watchChildren(dir, children.fire));
      if (this.#stopped) return session.unwatch(children.fire);
      if (names !== undefined) {
        this.#children = children;
        break;
      }
      // No election node: wait for its creation (an exists watch is set on a missing node).
      if (this.#exists?.session === session) {
        names = [];
        break;
      }
      const exists = this.#pending(session);
      const stat = await call(() => session.watchExists(dir, exists.fire));
      if (this.#stopped) return session.unwatch(exists.fire);
      this.#exists = exists;
      if (stat === undefined) names = [];
      // Created in between: go round to set the children watch too.
    }
    const head = parseCandidates(names)[0];
    if (head === undefined) return;
    const path = `${dir}/${head.name}`;
    if (this.#head?.session === session && this.#head.path === path) return;
    const watch = this.#pending(session, path);
    const read = await call(() => session.watchData(path, watch.fire));
    if (this.#stopped) return session.unwatch(watch.fire);
    if (read === undefined) return;
    // A former head's watch left (it goes with its node, which a newer read no longer lists).
    if (this.#head !== undefined) this.#head.session.unwatch(this.#head.fire);
    this.#head = watch;
  }

  /** A watch callback for `session` (to pass to its `watch…` methods). */
  #pending(session: ZkSession, path?: string): Pending {
    const pending: Pending = {
      session,
      fire: () => this.#fired(pending),
      ...(path !== undefined && { path }),
    };
    return pending;
  }
}
