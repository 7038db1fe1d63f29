/**
 * The resource-side half of fencing (Kleppmann, "How to do distributed locking", 2016) for data
 * kept in Redis: a write carries the writer's fencing token, and the resource refuses it when it
 * has already accepted a newer one. Works with a lease from any backend (the token is a bigint).
 *
 * Keep the guarded data on a Redis that is not the lock's own when the lock's Redis may fail over:
 * a failover can lose the guard's record as well as the lock.
 */
import type { Redis } from 'ioredis';
import { fencedCompareAndSetScript, fencedWriteScript } from '../backends/redis/scripts.js';
import { BackendError, InvalidArgumentError, StaleTokenError } from '../errors.js';
import { checkToken, type FencedValue } from './shared.js';

export type { FencedValue } from './shared.js';

/**
 * Outcome of `RedisFence.compareAndSet` when the token rule passed: either the value was written,
 * or it was not because the resource's value differs from the expected one. Then `current` is
 * the resource's value with the newest token it has seen (the caller's own, which the refusal
 * recorded), or null if no value was ever written; retry with `current.value` (or null) as
 * `expected`.
 */
export type CompareAndSetResult =
  | { readonly applied: true }
  | { readonly applied: false; readonly current: FencedValue | null };

/**
 * Fenced writes to Redis hashes `<prefix>:<resource>` (fields `token` and `value`): a plain fenced
 * register (`write` / `read`) and a fenced compare-and-set (`compareAndSet`).
 *
 * Every method rejects with `BackendError` (backend `'redis'`, the ioredis error as `cause`) when
 * Redis fails or answers an error, e.g. `WRONGTYPE` when the resource's key holds another type.
 */
export class RedisFence {
  readonly #client: Redis;
  readonly #prefix: string;

  /**
   * @param client an ioredis client (yours; the fence never closes it).
   * @param prefix key prefix of the guarded resources. @default 'fencelock:fenced'
   * @throws InvalidArgumentError for a client that is not ioredis or a bad prefix.
   */
  constructor(client: Redis, prefix = 'fencelock:fenced') {
    const c = client as unknown as Record<string, unknown>;
    if (typeof c?.evalsha !== 'function' || typeof c?.hgetall !== 'function') {
      throw new InvalidArgumentError('client', 'an ioredis Redis client', client);
    }
    if (typeof prefix !== 'string' || prefix === '') {
      throw new InvalidArgumentError('prefix', 'a non-empty string', prefix);
    }
    this.#client = client;
    this.#prefix = prefix;
  }

  /**
   * Write `value` to `resource` only if no newer token has reached it (written it, or been
   * recorded by a refused `compareAndSet`); an equal token is accepted (the same holder writing
   * again, or a reentrant hold). Atomic (one Lua script).
   * @throws StaleTokenError with both tokens when a newer token already reached the resource.
   * @throws InvalidArgumentError for an empty resource or a token that is not a bigint ≥ 0.
   * @throws BackendError when Redis fails (its error is `cause`).
   */
  async write(resource: string, token: bigint, value: string): Promise<void> {
    const key = this.#keyOf(resource);
    checkToken(token);
    if (typeof value !== 'string') throw new InvalidArgumentError('value', 'a string', value);
    const [written, current] = await engine(`fenced write of "${resource}"`, () =>
      fencedWriteScript.run(this.#client, [key], [token.toString(), value]),
    );
    if (written !== 1) throw new StaleTokenError(resource, token, BigInt(current));
  }

  /**
   * Write `value` to `resource` only if the token rule of `write` passes AND the resource's
   * current value equals `expected` (`null`: the resource was never written). Both checks and the
   * write run in one Lua script, atomically. The token rule is checked first: a stale writer gets
   * `StaleTokenError` even when the value also differs, and nothing changes.
   *
   * A refusal because the value differs writes no value, but records the caller's token when it
   * is newer than the stored one: that token has reached the resource, so from then on every
   * older token is stale here (`write` and `compareAndSet` both throw `StaleTokenError`), as with
   * `PgFence.transaction`, which records the token before the caller's own checks. Without this,
   * a holder whose lease was already superseded could still write after the newer holder's
   * refused attempt.
   *
   * @param resource name of the guarded resource (non-empty).
   * @param token the writer's fencing token (`lease.fencingToken`), a bigint ≥ 0.
   * @param expected the value the caller last read, or null for "never written".
   * @param value the value to store.
   * @returns `{ applied: true }` when written; `{ applied: false, current }` when the value
   *   differed (`current`: the resource's value and the newest token it has seen — this call's,
   *   now recorded — or null if no value was ever written).
   * @throws StaleTokenError with both tokens when a newer token already reached the resource.
   * @throws InvalidArgumentError for an empty resource, a token that is not a bigint ≥ 0, or an
   *   `expected` / `value` of the wrong type; before any Redis call.
   * @throws BackendError when Redis fails (its error is `cause`).
   */
  async compareAndSet(
    resource: string,
    token: bigint,
    expected: string | null,
    value: string,
  ): Promise<CompareAndSetResult> {
    const key = this.#keyOf(resource);
    checkToken(token);
    if (expected !== null && typeof expected !== 'string') {
      throw new InvalidArgumentError('expected', 'a string or null (never written)', expected);
    }
    if (typeof value !== 'string') throw new InvalidArgumentError('value', 'a string', value);
    const reply = await engine(`fenced compare-and-set of "${resource}"`, () =>
      fencedCompareAndSetScript.run(
        this.#client,
        [key],
        [token.toString(), expected === null ? '0' : '1', expected ?? '', value],
      ),
    );
    switch (reply[0]) {
      case 1:
        return { applied: true };
      case 0:
        throw new StaleTokenError(resource, token, BigInt(reply[1]));
      default:
        return {
          applied: false,
          current: reply.length === 3 ? { token: BigInt(reply[1]), value: reply[2] } : null,
        };
    }
  }

  /**
   * The resource's value with the newest token it has seen (the token of its last write, or a
   * newer one a refused `compareAndSet` recorded), or null if no value was ever written.
   * @throws InvalidArgumentError for an empty resource, before any Redis call.
   * @throws BackendError when Redis fails (its error is `cause`).
   */
  async read(resource: string): Promise<FencedValue | null> {
    const key = this.#keyOf(resource);
    const fields = await engine(`fenced read of "${resource}"`, () => this.#client.hgetall(key));
    if (fields.token === undefined || fields.value === undefined) return null;
    return { token: BigInt(fields.token), value: fields.value };
  }

  #keyOf(resource: string): string {
    if (typeof resource !== 'string' || resource === '') {
      throw new InvalidArgumentError('resource', 'a non-empty string', resource);
    }
    return `${this.#prefix}:${resource}`;
  }
}

/** Run one Redis call; its failure becomes a `BackendError` naming `operation`. */
async function engine<T>(operation: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    throw new BackendError('redis', operation, error);
  }
}
