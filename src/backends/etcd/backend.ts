/**
 * etcd backend (the `etcd3` package). The recipe of etcd's `concurrency` package
 * (`mutex.go`, `key.go`), with a fencing token, read-write modes and per-acquisition owners:
 *
 * - Every contender puts `<namespace>/locks/<key>/<w|r>-<lease hex>-<owner>` bound to its
 *   session's lease, in one transaction that also lists the contenders under the key in
 *   create-revision order. The fencing token is the create revision of the contender's key.
 * - A writer holds the lock when no key is older than its own; a reader when no writer's key is.
 *   Otherwise it watches only its predecessor (the newest older key that blocks it) for
 *   deletion, so a release wakes one waiter (no herd), and asks again when that key is gone.
 * - Release deletes the contender's key only if its create revision still equals the token.
 *
 * The owner id is part of the key (not only the lease id, as in `mutex.go`), so two handles in
 * one process never share a lock by accident.
 */
import { Etcd3, type IKeyValue, type IRequestOp, type ITxnResponse } from 'etcd3';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
  LeaseRef,
  LockInfo,
  LockMode,
  ReleaseOutcome,
  RenewResult,
} from '../../core/backend.js';
import { BackendError } from '../../errors.js';
import { MAX_TIMER_MS } from '../../options.js';
import { EtcdSession } from './session.js';
import type { EtcdUrlConfig } from './url.js';

/**
 * How long a waiter trusts its watch before asking again, ms. The watch on the predecessor is
 * reliable (etcd resumes it from the last revision after a reconnect); the recheck only bounds
 * the cost of a bug or an unexpected stream end.
 */
const RECHECK_AFTER_MS = 30_000;

interface Contender {
  readonly key: string;
  readonly session: EtcdSession;
}

/** The etcd backend. Build it with `createEtcdBackend`. */
export class EtcdBackend implements Backend {
  readonly name = 'etcd';
  readonly maxTtlMs = MAX_TIMER_MS;
  readonly modes: readonly LockMode[] = ['write', 'read'];
  readonly #client: Etcd3;
  readonly #ownsClient: boolean;
  readonly #namespace: string;
  readonly #timeoutMs: number;
  /** One session per lease TTL in whole seconds. */
  readonly #sessions = new Map<number, Promise<EtcdSession>>();
  /** Keys this backend wrote, by owner. */
  readonly #contenders = new Map<string, Contender>();
  #closed = false;

  constructor(client: Etcd3, ownsClient: boolean, namespace: string, timeoutMs: number) {
    this.#client = client;
    this.#ownsClient = ownsClient;
    this.#namespace = namespace;
    this.#timeoutMs = timeoutMs;
  }

  /** The folder under which the contenders for `key` are written. */
  dirOf(key: string): string {
    return `${this.#namespace}/locks/${encodeURIComponent(key)}/`;
  }

  /**
   * The session (etcd lease) grants for `ttlMs` live in: `ceil(ttlMs / 1000)` seconds, raised
   * by the server to its minimum TTL if lower. Opened on first use, shared by all such locks.
   */
  session(ttlMs: number): Promise<EtcdSession> {
    const seconds = ttlSeconds(ttlMs);
    const existing = this.#sessions.get(seconds);
    if (existing) return existing;
    const opening = EtcdSession.openShared(this.#client, seconds, this.#timeoutMs);
    this.#sessions.set(seconds, opening);
    opening.then(
      (session) => {
        // A lost session is replaced by a new one on the next acquire.
        session.signal.addEventListener('abort', () => {
          if (this.#sessions.get(seconds) === opening) this.#sessions.delete(seconds);
        });
      },
      () => this.#sessions.delete(seconds),
    );
    return opening;
  }

  async attempt(request: AttemptRequest): Promise<AttemptResult> {
    this.#assertOpen('acquire');
    const dir = this.dirOf(request.key);
    // A waiter keeps its key, and so its place in line, across attempts while its session lives.
    const known = this.#contenders.get(request.owner);
    let contender: Contender;
    if (known?.session.alive === true) {
      contender = known;
    } else {
      // Without the watchdog the lock gets a lease of its own that nobody keeps alive.
      const session = request.autoRenew
        ? await this.session(request.ttlMs)
        : await EtcdSession.openSingleUse(this.#client, ttlSeconds(request.ttlMs), this.#timeoutMs);
      const mark = request.mode === 'read' ? 'r' : 'w';
      contender = { key: `${dir}${mark}-${session.leaseHex}-${request.owner}`, session };
    }
    const { key, session: contenderSession } = contender;
    this.#contenders.set(request.owner, { key, session: contenderSession });
    const list = this.#listOp(dir);
    const txn = await this.#call('acquire', () =>
      this.#client
        .if(key, 'Create', '==', 0)
        .then(this.#client.put(key).value(request.mode).lease(contenderSession.leaseId), list)
        .else(list)
        .commit(),
    );
    const kvs = rangeOf(txn, txn.succeeded ? 1 : 0);
    const mine = kvs.find((kv) => kv.key.toString() === key);
    if (mine === undefined) {
      // Our key vanished (its lease expired between two attempts): start again as a new contender.
      this.#forget(request.owner);
      throw new BackendError(this.name, 'acquire', new Error('contender key vanished'));
    }
    const token = BigInt(mine.create_revision);
    const blocking = kvs.filter(
      (kv) => BigInt(kv.create_revision) < token && (request.mode === 'write' || isWriter(kv, dir)),
    );
    const predecessor = blocking.at(-1);
    if (predecessor === undefined) {
      return {
        granted: true,
        token,
        ttlMs: contenderSession.grantedTtlMs,
        lost: contenderSession.signal,
      };
    }
    const revision = BigInt(txn.header.revision);
    return {
      granted: false,
      queued: true,
      recheckAfterMs: RECHECK_AFTER_MS,
      waitForChange: (signal, maxMs) =>
        this.#waitForDelete(predecessor.key.toString(), revision, signal, maxMs),
    };
  }

  async renew(lease: LeaseRef): Promise<RenewResult> {
    const contender = this.#contenders.get(lease.owner);
    if (contender === undefined || !contender.session.alive) {
      return { ok: false, reason: 'not-held' };
    }
    const { session } = contender;
    // A shared session renews every grant under it in the background: only check it is alive.
    if (!session.shared && !(await session.renewOnce())) return { ok: false, reason: 'not-held' };
    return { ok: true, ttlMs: session.grantedTtlMs };
  }

  async release(lease: LeaseRef): Promise<ReleaseOutcome> {
    const key = await this.#keyOf(lease.key, lease.owner);
    this.#forget(lease.owner);
    if (key === undefined) return 'not-held';
    const txn = await this.#call('release', () =>
      this.#client
        .if(key, 'Create', '==', String(lease.fencingToken))
        .then(this.#client.delete().key(key))
        .else(this.#client.get(key))
        .commit(),
    );
    if (txn.succeeded) return 'released';
    return rangeOf(txn, 0).length === 0 ? 'not-held' : 'not-owner';
  }

  async abandon(request: AttemptRequest): Promise<void> {
    const key = await this.#keyOf(request.key, request.owner);
    this.#forget(request.owner);
    if (key !== undefined) await this.#call('abandon', () => this.#client.delete().key(key).exec());
  }

  async inspect(key: string): Promise<LockInfo> {
    const dir = this.dirOf(key);
    const kvs = await this.#call('inspect', async () => {
      const response = await this.#client.getAll().prefix(dir).sort('Create', 'Ascend').exec();
      return response.kvs;
    });
    const first = kvs[0];
    const lastFencingToken = kvs.reduce(
      (max, kv) => (BigInt(kv.create_revision) > max ? BigInt(kv.create_revision) : max),
      0n,
    );
    if (first === undefined) return { key, holder: null, lastFencingToken };
    const ttl = await this.#call('inspect', () =>
      this.#client.leaseClient.leaseTimeToLive({ ID: first.lease }),
    );
    return {
      key,
      holder: {
        owner: first.key.toString().split('-').at(-1) ?? '',
        fencingToken: BigInt(first.create_revision),
        ttlMs: Math.max(0, Number(ttl.TTL) * 1000),
      },
      lastFencingToken,
    };
  }

  /**
   * The compare that makes a caller's own etcd transaction commit only while `lease` holds its
   * lock (etcd's `Mutex.IsOwner()`): the owner's key still has the lease's create revision.
   * @returns `{ key, createRevision }` for `client.if(key, 'Create', '==', createRevision)`.
   * Undefined when this backend has no key for the lease (released, or granted elsewhere).
   */
  ownerCompare(lease: LeaseRef): { key: string; createRevision: string } | undefined {
    const contender = this.#contenders.get(lease.owner);
    if (contender === undefined) return undefined;
    return { key: contender.key, createRevision: String(lease.fencingToken) };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const sessions = await Promise.allSettled(this.#sessions.values());
    this.#sessions.clear();
    const singleUse = [...this.#contenders.values()].filter((c) => !c.session.shared);
    this.#contenders.clear();
    await Promise.allSettled(singleUse.map((c) => c.session.revoke()));
    await Promise.allSettled(
      sessions.map((s) => (s.status === 'fulfilled' ? s.value.revoke() : undefined)),
    );
    if (this.#ownsClient) this.#client.close();
  }

  /** Drop what this backend knows of `owner`, revoking a single-use lease (in the background). */
  #forget(owner: string): void {
    const contender = this.#contenders.get(owner);
    this.#contenders.delete(owner);
    if (contender !== undefined && !contender.session.shared) void contender.session.revoke();
  }

  /** The contender key of `owner` for `key`: known locally, or found by its owner suffix. */
  async #keyOf(key: string, owner: string): Promise<string | undefined> {
    const known = this.#contenders.get(owner)?.key;
    if (known !== undefined) return known;
    const keys = await this.#call('lookup', () =>
      this.#client.getAll().prefix(this.dirOf(key)).keys(),
    );
    return keys.find((k) => k.endsWith(`-${owner}`));
  }

  #listOp(dir: string): IRequestOp {
    return {
      request_range: {
        key: Buffer.from(dir),
        range_end: prefixEnd(Buffer.from(dir)),
        sort_order: 'Ascend',
        sort_target: 'Create',
        keys_only: true,
      },
    };
  }

  /** Resolve when `key` is deleted (watched from `afterRevision` + 1), or at `maxMs`, or on abort. */
  async #waitForDelete(
    key: string,
    afterRevision: bigint,
    signal: AbortSignal,
    maxMs: number,
  ): Promise<void> {
    if (signal.aborted || this.#closed) return;
    const watcher = await this.#call('watch', () =>
      this.#client
        .watch()
        .key(key)
        .startRevision(String(afterRevision + 1n))
        .create(),
    );
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, maxMs);
      signal.addEventListener('abort', done, { once: true });
      watcher.on('delete', done);
      watcher.on('error', done);
    });
    await watcher.cancel().catch(() => undefined);
  }

  #assertOpen(operation: string): void {
    if (this.#closed) throw new BackendError(this.name, operation, new Error('backend is closed'));
  }

  async #call<T>(operation: string, run: () => Promise<T>): Promise<T> {
    this.#assertOpen(operation);
    try {
      return await run();
    } catch (error) {
      throw new BackendError(this.name, operation, error);
    }
  }
}

/** Lease TTL for `ttlMs`: whole seconds, rounded up (the server raises it to its minimum). */
function ttlSeconds(ttlMs: number): number {
  return Math.max(1, Math.ceil(ttlMs / 1000));
}

function rangeOf(txn: ITxnResponse, index: number): IKeyValue[] {
  return txn.responses[index]?.response_range?.kvs ?? [];
}

function isWriter(kv: IKeyValue, dir: string): boolean {
  return kv.key.toString().startsWith(`${dir}w-`);
}

/** The end of the range of all keys that start with `prefix` (etcd's `GetPrefixRangeEnd`). */
function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i] = end[i]! + 1;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

/** Create an etcd backend from a checked URL config. No connection is made until first use. */
export function createEtcdBackendFromConfig(config: EtcdUrlConfig): EtcdBackend {
  const client = new Etcd3({
    hosts: [...config.endpoints],
    dialTimeout: config.dialTimeoutMs,
    ...(config.auth
      ? { auth: { username: config.auth.username, password: config.auth.password } }
      : {}),
  });
  return new EtcdBackend(client, true, config.namespace, config.dialTimeoutMs);
}
