/**
 * An etcd session: one etcd lease and what fencelock knows about its validity.
 *
 * - A shared session (etcd's `concurrency.Session`) is kept alive in the background and carries
 *   every lock granted under it with the watchdog on. Its `signal` aborts when the lease can no
 *   longer be proven alive: the server said it expired or was revoked, or no keepalive succeeded
 *   before `validUntil` (start of the last successful keepalive + granted TTL − drift). So loss
 *   is reported within the TTL, not after twice the TTL as the etcd3 package's own `lost` event.
 * - A single-use session is granted for one lock whose lease is not renewed (`autoRenew: false`):
 *   nothing keeps it alive, so the lock ends with its TTL unless `renewOnce` is called.
 */
import type { Etcd3, Lease as EtcdLease } from 'etcd3';
import type { BackendSession } from '../../core/backend.js';
import { monotonicNow } from '../../core/clock.js';
import { BackendError } from '../../errors.js';
import { DEFAULTS, driftMs } from '../../options.js';

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
  readonly #keptAlive: EtcdLease | undefined;
  readonly #abort = new AbortController();
  #validUntil: number;
  #firedAt: number;
  #timer: NodeJS.Timeout | undefined;

  private constructor(
    client: Etcd3,
    keptAlive: EtcdLease | undefined,
    requestedSeconds: number,
    leaseId: string,
    grantedTtlMs: number,
    startedAt: number,
  ) {
    this.#client = client;
    this.requestedSeconds = requestedSeconds;
    this.#keptAlive = keptAlive;
    this.shared = keptAlive !== undefined;
    this.leaseId = leaseId;
    this.leaseHex = BigInt(leaseId).toString(16);
    this.grantedTtlMs = grantedTtlMs;
    this.signal = this.#abort.signal;
    this.#firedAt = startedAt;
    this.#validUntil = this.#bound(startedAt);
    keptAlive?.on('keepaliveFired', () => {
      this.#firedAt = monotonicNow();
    });
    keptAlive?.on('keepaliveSucceeded', () => this.#extendFrom(this.#firedAt));
    keptAlive?.on('lost', (error) => this.lose(error));
    this.#arm();
  }

  /**
   * Grant a shared lease of `ttlSeconds` and wait for its first keepalive, which tells the TTL
   * the server granted.
   * @throws BackendError when the cluster does not answer within `timeoutMs`.
   */
  static async openShared(
    client: Etcd3,
    ttlSeconds: number,
    timeoutMs: number,
  ): Promise<EtcdSession> {
    const startedAt = monotonicNow();
    const lease = client.lease(ttlSeconds, { autoKeepAlive: true });
    lease.on('lost', () => undefined);
    try {
      const first = new Promise<number>((resolve, reject) => {
        lease.once('keepaliveSucceeded', (res) => resolve(Number(res.TTL)));
        lease.once('lost', reject);
      });
      const [leaseId, ttl] = await withTimeout(Promise.all([lease.grant(), first]), timeoutMs);
      return new EtcdSession(client, lease, ttlSeconds, leaseId, ttl * 1000, startedAt);
    } catch (error) {
      lease.release();
      throw new BackendError('etcd', `lease grant (ttl ${ttlSeconds} s)`, error);
    }
  }

  /**
   * Grant a lease of `ttlSeconds` for one lock, not kept alive.
   * @throws BackendError when the cluster does not answer within `timeoutMs`.
   */
  static async openSingleUse(
    client: Etcd3,
    ttlSeconds: number,
    timeoutMs: number,
  ): Promise<EtcdSession> {
    const startedAt = monotonicNow();
    try {
      const res = await withTimeout(client.leaseClient.leaseGrant({ TTL: ttlSeconds }), timeoutMs);
      return new EtcdSession(
        client,
        undefined,
        ttlSeconds,
        String(res.ID),
        Number(res.TTL) * 1000,
        startedAt,
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

  /** Monotonic time until which the lease is believed alive. */
  get validUntil(): number {
    return this.#validUntil;
  }

  /** True until the session is lost or closed. */
  get alive(): boolean {
    return !this.signal.aborted;
  }

  /**
   * One keepalive now (a single-use lease's renewal).
   * @returns false when the server no longer has the lease.
   * @throws BackendError when the cluster does not answer.
   */
  async renewOnce(): Promise<boolean> {
    const startedAt = monotonicNow();
    let ttl: number;
    try {
      const stream = await this.#client.leaseClient.leaseKeepAlive();
      ttl = await new Promise<number>((resolve, reject) => {
        stream.on('data', (res) => resolve(Number(res.TTL)));
        stream.on('error', reject);
        stream.write({ ID: this.leaseId });
      }).finally(() => stream.end());
    } catch (error) {
      throw new BackendError('etcd', 'lease keepalive', error);
    }
    if (ttl <= 0) {
      this.lose(new Error('etcd lease expired'));
      return false;
    }
    this.#extendFrom(startedAt);
    return true;
  }

  /** Declare the session lost (idempotent): stop keepalives and abort `signal`. */
  lose(cause: unknown): void {
    if (this.signal.aborted) return;
    clearTimeout(this.#timer);
    this.#keptAlive?.release();
    this.#abort.abort(cause);
  }

  /**
   * Stop the keepalives without revoking (etcd's `Session.Orphan`): the lease, and every key
   * under it, ends on the server after its TTL; `signal` aborts when the validity runs out.
   */
  orphan(): void {
    this.#keptAlive?.release();
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
    try {
      await this.#client.leaseClient.leaseRevoke({ ID: this.leaseId });
    } catch {
      // Already gone, or the cluster is unreachable: the lease then expires by its TTL.
    }
  }

  #bound(startedAt: number): number {
    return startedAt + this.grantedTtlMs - driftMs(this.grantedTtlMs, DEFAULTS.driftFactor);
  }

  #extendFrom(startedAt: number): void {
    this.#validUntil = Math.max(this.#validUntil, this.#bound(startedAt));
    this.#arm();
  }

  #arm(): void {
    clearTimeout(this.#timer);
    // A lease of its own is nobody's to keep alive: the core times the lock's own expiry.
    if (!this.alive || !this.shared) return;
    this.#timer = setTimeout(
      () => {
        if (monotonicNow() >= this.#validUntil) {
          this.lose(new Error('etcd lease was not renewed within its TTL'));
        } else this.#arm();
      },
      Math.max(0, this.#validUntil - monotonicNow()),
    );
    this.#timer.unref();
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
