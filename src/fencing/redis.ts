/**
 * The resource-side half of fencing (Kleppmann, "How to do distributed locking", 2016) for data
 * kept in Redis: a write carries the writer's fencing token, and the resource refuses it when it
 * has already accepted a newer one. Works with a lease from any backend (the token is a bigint).
 *
 * Keep the guarded data on a Redis that is not the lock's own when the lock's Redis may fail over:
 * a failover can lose the guard's record as well as the lock.
 */
import type { Redis } from 'ioredis';
import { fencedWriteScript } from '../backends/redis/scripts.js';
import { InvalidArgumentError, StaleTokenError } from '../errors.js';

/** A fenced resource's last accepted write. */
export interface FencedValue {
  readonly token: bigint;
  readonly value: string;
}

/** Fenced writes to Redis hashes `<prefix>:<resource>` (fields `token` and `value`). */
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
   * Write `value` to `resource` only if no newer token has written it; an equal token is
   * accepted (the same holder writing again, or a reentrant hold). Atomic (one Lua script).
   * @throws StaleTokenError with both tokens when a newer token already wrote the resource.
   * @throws InvalidArgumentError for an empty resource or a token that is not a bigint ≥ 0.
   */
  async write(resource: string, token: bigint, value: string): Promise<void> {
    const key = this.#keyOf(resource);
    if (typeof token !== 'bigint' || token < 0n) {
      throw new InvalidArgumentError('token', 'a fencing token (bigint ≥ 0)', token);
    }
    if (typeof value !== 'string') throw new InvalidArgumentError('value', 'a string', value);
    const [written, current] = await fencedWriteScript.run(
      this.#client,
      [key],
      [token.toString(), value],
    );
    if (written !== 1) throw new StaleTokenError(resource, token, BigInt(current));
  }

  /** The last accepted write of `resource`, or null if it was never written. */
  async read(resource: string): Promise<FencedValue | null> {
    const fields = await this.#client.hgetall(this.#keyOf(resource));
    if (fields.token === undefined) return null;
    return { token: BigInt(fields.token), value: fields.value ?? '' };
  }

  #keyOf(resource: string): string {
    if (typeof resource !== 'string' || resource === '') {
      throw new InvalidArgumentError('resource', 'a non-empty string', resource);
    }
    return `${this.#prefix}:${resource}`;
  }
}
