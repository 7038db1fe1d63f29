/**
 * An etcd session: one etcd lease and what fencelock knows about its validity.
 *
 * - A shared session (etcd's `concurrency.Session`) is kept alive in the background and carries
 *   every lock granted under it with the watchdog on. Its `signal` aborts when the lease can no
 *   longer be proven alive: the server said it expired or was revoked, or no keepalive succeeded
 *   before `validUntil` (start of the last successful keepalive + granted TTL − drift). So loss
 *   is reported within the TTL, not after twice the TTL as the etcd3 package's own `lost` event.
 * - The keepalive is ours, not the etcd3 package's long-lived stream: every third of the TTL one
 *   keepalive on a fresh stream, with a deadline, to a member the client picks at random; a
 *   failed or unanswered one is retried at once on another pick. A member that froze while it
 *   carried the stream therefore costs one deadline, not the lease.
 * - A single-use session is granted for one lock whose lease is not renewed (`autoRenew: false`):
 *   nothing keeps it alive, so the lock ends with its TTL unless `renewOnce` is called.
 * - A kept-alive session may have companion leases (`companion`: the leases of the lock-delay
 *   markers of its grants, lock-delay.ts), longer by a delay: each beat of the session keeps them
 *   alive first, then its own lease, so a companion outlives the session's lease by its extra
 *   TTL whenever the beats stop. They are revoked with a live session, and left to expire with a
 *   lost or orphaned one.
 */
import type { Etcd3 } from 'etcd3';
import type { BackendSession } from '../../core/backend.js';
import { driftMs, monotonicNow } from '../../core/clock.js';
import { BackendError } from '../../errors.js';
import { DEFAULTS } from '../../options.js';
import type { KeepaliveRoute } from './keepalive-route.js';

/** Pause between a failed keepalive and the next try, ms (a new pick of member). */
const KEEPALIVE_RETRY_MS = 100;

/** A live etcd lease. */
export class EtcdSession implements BackendSession {
  /** Lease id, decimal. */
  readonly leaseId: string;
  /** Lease id, hex (as etcdctl prints it); part of every key written under this session. */
  readonly leaseHex: string;
  /** TTL the server granted (its minimum applies), ms. */
  readonly grantedTtlMs: number;
  /** Kept alive in the background (shared), or granted for one lock. */
  readonly shared: boolean;
  /** TTL asked for, in whole seconds (the server may grant more). */
  readonly requestedSeconds: number;
  /** Aborted (with the cause as reason) when the lease is lost. */
  readonly signal: AbortSignal;
  readonly #client: Etcd3;
  readonly #route: KeepaliveRoute;
  readonly #timeoutMs: number;
  readonly #abort = new AbortController();
  #validUntil: number;
  /** Fires at `validUntil`: the lease is lost unless a keepalive moved it. */
  #expiry: NodeJS.Timeout | undefined;
  /** Next background keepalive of a shared session. */
  #next: NodeJS.Timeout | undefined;
  #keepingAlive: boolean;
  /** Companion leases by TTL in whole seconds (`companion`), kept alive before this one. */
  readonly #companions = new Map<number, Promise<EtcdSession>>();

  private constructor(
    client: Etcd3,
    route: KeepaliveRoute,
    shared: boolean,
    requestedSeconds: number,
    leaseId: string,
    grantedTtlMs: number,
    startedAt: number,
    timeoutMs: number,
  ) {
    this.#client = client;
    this.#route = route;
    // Several tries must fit in one TTL: a frozen member costs one deadline, then another pick.
    this.#timeoutMs = Math.min(timeoutMs, Math.max(500, grantedTtlMs / 6));
    this.requestedSeconds = requestedSeconds;
    this.shared = shared;
    this.#keepingAlive = shared;
    this.leaseId = leaseId;
    this.leaseHex = BigInt(leaseId).toString(16);
    this.grantedTtlMs = grantedTtlMs;
    this.signal = this.#abort.signal;
    this.#validUntil = this.#bound(startedAt);
    this.#arm();
    this.#scheduleKeepAlive(this.grantedTtlMs / 3);
  }

  /**
   * Grant a lease of `ttlSeconds` kept alive in the background until revoked, orphaned or lost.
   * @throws BackendError when the cluster does not answer within `timeoutMs`.
   */
  static openShared(
    client: Etcd3,
    route: KeepaliveRoute,
    ttlSeconds: number,
    timeoutMs: number,
  ): Promise<EtcdSession> {
    return EtcdSession.#grant(client, route, true, ttlSeconds, timeoutMs);
  }

  /**
   * Grant a lease of `ttlSeconds` for one lock, not kept alive.
   * @throws BackendError when the cluster does not answer within `timeoutMs`.
   */
  static openSingleUse(
    client: Etcd3,
    route: KeepaliveRoute,
    ttlSeconds: number,
    timeoutMs: number,
  ): Promise<EtcdSession> {
    return EtcdSession.#grant(client, route, false, ttlSeconds, timeoutMs);
  }

  static async #grant(
    client: Etcd3,
    route: KeepaliveRoute,
    shared: boolean,
    ttlSeconds: number,
    timeoutMs: number,
  ): Promise<EtcdSession> {
    const startedAt = monotonicNow();
    try {
      const res = await withTimeout(client.leaseClient.leaseGrant({ TTL: ttlSeconds }), timeoutMs);
      return new EtcdSession(
        client,
        route,
        shared,
        ttlSeconds,
        String(res.ID),
        Number(res.TTL) * 1000,
        startedAt,
        timeoutMs,
      );
    } catch (error) {
      throw new BackendError('etcd', `lease grant (ttl ${ttlSeconds} s)`, error);
    }
  }

  /** The lease id in hex. */
  get id(): string {
    return this.leaseHex;
  }

  /** TTL the server granted, ms. */
  get ttlMs(): number {
    return this.grantedTtlMs;
  }

  /** Deadline of each keepalive of this lease, ms (several fit in its TTL). */
  get keepaliveDeadlineMs(): number {
    return this.#timeoutMs;
  }

  /** Monotonic time until which the lease is believed alive. */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** True until the session is lost or closed. */
  get alive(): boolean {
    return !this.signal.aborted;
  }

  /**
   * One keepalive now, on a fresh stream with a deadline (a single-use lease's renewal, and each
   * beat of a shared session's background keepalive).
   * @returns false when the server no longer has the lease (the session is then lost).
   * @throws BackendError when the cluster does not answer within the deadline.
   */
  async renewOnce(): Promise<boolean> {
    const startedAt = monotonicNow();
    const via = this.#route.client;
    let ttl: number;
    try {
      const stream = await withTimeout(
        via.leaseClient.leaseKeepAlive({ deadline: Date.now() + this.#timeoutMs }),
        this.#timeoutMs,
      );
      try {
        ttl = await withTimeout(
          new Promise<number>((resolve, reject) => {
            stream.on('data', (res) => resolve(Number(res.TTL)));
            stream.on('error', reject);
            stream.on('end', () => reject(new Error('keepalive stream ended')));
            stream.write({ ID: this.leaseId });
          }),
          this.#timeoutMs,
        );
      } finally {
        stream.on('error', () => undefined);
        stream.cancel();
      }
    } catch (error) {
      this.#route.failed(via);
      throw new BackendError('etcd', 'lease keepalive', error);
    }
    if (ttl <= 0) {
      this.lose(new Error('etcd lease expired or was revoked'));
      return false;
    }
    this.#extendFrom(startedAt);
    return true;
  }

  /**
   * A lease of `seconds` kept alive by this session's beats, each time just before its own lease
   * (a lock-delay marker's, lock-delay.ts): granted on first use, shared by every caller asking
   * for the same TTL, replaced when it is found gone. Not kept alive once this session is lost or
   * orphaned; revoked by `revoke` of a live session.
   * @throws BackendError when the session has ended, or the cluster does not grant the lease.
   */
  companion(seconds: number): Promise<EtcdSession> {
    const existing = this.#companions.get(seconds);
    if (existing) return existing;
    if (!this.alive) {
      return Promise.reject(
        new BackendError('etcd', 'lock-delay lease', new Error(`session ${this.id} ended`)),
      );
    }
    const opening = EtcdSession.openSingleUse(this.#client, this.#route, seconds, this.#timeoutMs);
    this.#companions.set(seconds, opening);
    const forget = () => {
      if (this.#companions.get(seconds) === opening) this.#companions.delete(seconds);
    };
    opening.then((lease) => lease.signal.addEventListener('abort', forget, { once: true }), forget);
    return opening;
  }

  /** Declare the session lost (idempotent): stop keepalives and abort `signal`. */
  lose(cause: unknown): void {
    if (this.signal.aborted) return;
    this.#keepingAlive = false;
    clearTimeout(this.#expiry);
    clearTimeout(this.#next);
    this.#abort.abort(cause);
  }

  /**
   * Stop the keepalives without revoking (etcd's `Session.Orphan`): the lease, and every key
   * under it, ends on the server after its TTL; `signal` aborts when the validity runs out.
   */
  orphan(): void {
    this.#keepingAlive = false;
    clearTimeout(this.#next);
  }

  /** As `revoke`. */
  close(): Promise<void> {
    return this.revoke();
  }

  /** Revoke the lease: etcd deletes every key written under it. */
  async revoke(): Promise<void> {
    const wasAlive = this.alive;
    this.lose(new Error('session closed'));
    if (!wasAlive) return;
    // A closed session ends its grants as releases do: their lock-delays go with them.
    const companions = [...this.#companions.values()];
    this.#companions.clear();
    for (const opening of companions) {
      opening.then((lease) => lease.revoke()).catch(() => undefined);
    }
    try {
      await withTimeout(
        this.#client.leaseClient.leaseRevoke({ ID: this.leaseId }),
        this.#timeoutMs,
      );
    } catch {
      // Already gone, or the cluster is unreachable: the lease then expires by its TTL.
    }
  }

  #scheduleKeepAlive(delayMs: number): void {
    if (!this.#keepingAlive) return;
    this.#next = setTimeout(() => void this.#keepAlive(), delayMs);
    this.#next.unref();
  }

  async #keepAlive(): Promise<void> {
    let alive: boolean;
    // The companions first: a beat that stops between the two leaves them the longer ones; and
    // not this lease without them (they would fall behind it), until validity runs out.
    if (!(await this.#keepCompanionsAlive())) {
      this.#scheduleKeepAlive(KEEPALIVE_RETRY_MS);
      return;
    }
    try {
      alive = await this.renewOnce();
    } catch {
      // No answer from the member picked: try another at once, until validity runs out.
      this.#scheduleKeepAlive(KEEPALIVE_RETRY_MS);
      return;
    }
    if (alive) this.#scheduleKeepAlive(this.grantedTtlMs / 3);
  }

  /**
   * One keepalive of every companion lease.
   * @returns false when one got no answer (a companion found gone is dropped, not a failure).
   */
  async #keepCompanionsAlive(): Promise<boolean> {
    if (this.#companions.size === 0) return true;
    const beats = await Promise.allSettled(
      [...this.#companions.values()].map(async (opening) => {
        const lease = await opening.catch(() => undefined);
        if (lease?.alive === true) await lease.renewOnce();
      }),
    );
    return beats.every((beat) => beat.status === 'fulfilled');
  }

  #bound(startedAt: number): number {
    return startedAt + this.grantedTtlMs - driftMs(this.grantedTtlMs, DEFAULTS.driftFactor);
  }

  #extendFrom(startedAt: number): void {
    this.#validUntil = Math.max(this.#validUntil, this.#bound(startedAt));
    this.#arm();
  }

  #arm(): void {
    clearTimeout(this.#expiry);
    // A lease of its own is nobody's to keep alive: the core times the lock's own expiry.
    if (!this.alive || !this.shared) return;
    this.#expiry = setTimeout(
      () => {
        if (monotonicNow() >= this.#validUntil) {
          this.lose(new Error('etcd lease was not renewed within its TTL'));
        } else this.#arm();
      },
      Math.max(0, this.#validUntil - monotonicNow()),
    );
    this.#expiry.unref();
  }
}

async function withTimeout<T>(pending: Promise<T>, timeoutMs: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([pending, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
