/**
 * A waiter's side of Redlock's lines (a lock's, `scripts/line.lua`, and a semaphore's, the Redis
 * backend's `semaphore-line.lua`): its ticket, and the release messages of every node. A line
 * stands on every node, ordered by ticket; a release on a node publishes the ids of the waiters
 * it lets in on the key's channel there, and each waiter listens on every node (one subscriber
 * connection per node, `ReleaseWaiters`), so that only the waiters named wake (no herd).
 */
import type { Redis } from 'ioredis';
import type { AttemptRequest, NotGranted } from '../../core/backend.js';
import { QuorumError } from '../../errors.js';
import { ReleaseWaiters } from '../redis/release-waiters.js';
import { LINE_RECHECK_MS } from '../waiting-line.js';
import { type NodeResult, outcomesOf } from './quorum.js';

/** The release messages of every node, and the tickets of this process's waiting acquires. */
export class LineWaits {
  /** One per node, in the nodes' order; each opens its subscriber on its first wait. */
  readonly #waiters: readonly ReleaseWaiters[];
  /** Each waiting acquire's ticket: the µs it first attempted, on this process's clock. */
  readonly #tickets = new WeakMap<AttemptRequest, string>();

  constructor(clients: readonly Redis[]) {
    this.#waiters = clients.map((client) => new ReleaseWaiters(client));
  }

  /**
   * This waiting acquire's ticket, fixed at its first attempt (decimal µs on this process's
   * clock): every node orders the line by it, so the head of one node's line is the head of
   * every line it stands in.
   */
  ticketOf(request: AttemptRequest): string {
    let ticket = this.#tickets.get(request);
    if (ticket === undefined) {
      ticket = String(Math.floor((performance.timeOrigin + performance.now()) * 1000));
      this.#tickets.set(request, ticket);
    }
    return ticket;
  }

  /**
   * `owner` attempts now and stays in the line of `channel`'s key: a release message that names
   * it while the vote runs is kept for its next wait.
   */
  inLine(channel: string, owner: string): void {
    for (const waiters of this.#waiters) waiters.inLine(channel, owner);
  }

  /** `owner` no longer waits on `channel` (granted or withdrawn): forget messages kept for it. */
  leftLine(channel: string, owner: string): void {
    for (const waiters of this.#waiters) waiters.leftLine(channel, owner);
  }

  /**
   * Wait until a release message on any node names `owner` on `channel`, or `maxMs`, or `signal`
   * aborts. Never rejects.
   */
  async waitForTurn(
    channel: string,
    owner: string,
    signal: AbortSignal,
    maxMs: number,
  ): Promise<void> {
    const done = new AbortController();
    const stop = () => done.abort();
    signal.addEventListener('abort', stop, { once: true });
    try {
      await Promise.race(this.#waiters.map((w) => w.wait(channel, owner, done.signal, maxMs)));
    } finally {
      signal.removeEventListener('abort', stop);
      done.abort();
    }
  }

  /** Wake every waiter and quit the subscriber connections (each within 1 s). */
  async close(): Promise<void> {
    await Promise.all(this.#waiters.map((w) => w.close()));
  }

  /**
   * The answer to a grant vote that reached no majority of grants, once it was withdrawn: with
   * fewer than `quorum` answers, `no-quorum` and a `QuorumError` naming each node's outcome;
   * else held, for the longest TTL a node reported (`[0, ttlMs]`), and for a waiter its place in
   * the lines with the wait for its turn (on the key's `channel`).
   * @param all every node's answer, `[1, …]` for a grant.
   */
  refused(
    all: readonly NodeResult<readonly (number | string)[]>[],
    quorum: number,
    operation: string,
    request: AttemptRequest,
    channel: string,
    waiting: boolean,
  ): NotGranted {
    if (all.filter((r) => r.status === 'ok').length < quorum) {
      const outcomes = outcomesOf(all, (v) => v[0] !== 1);
      const error = new QuorumError(request.key, operation, outcomes);
      return { granted: false, reason: 'no-quorum', error };
    }
    const holderTtlMs = all.reduce(
      (max, r) =>
        r.status === 'ok' && r.value[0] === 0 ? Math.max(max, Number(r.value[1] ?? 0)) : max,
      0,
    );
    if (!waiting) return { granted: false, holderTtlMs };
    return {
      granted: false,
      holderTtlMs,
      // Waiters attempt at least this often, which keeps their line entries alive.
      recheckAfterMs: LINE_RECHECK_MS,
      queued: true,
      waitForChange: (signal, maxMs) => this.waitForTurn(channel, request.owner, signal, maxMs),
    };
  }
}
