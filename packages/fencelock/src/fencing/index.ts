/**
 * `fencelock/fencing`: resource-side guards that refuse a stale lock holder's write (a write
 * whose fencing token is older than one the resource already accepted), after Kleppmann, "How to
 * do distributed locking" (2016). They work with a lease from any backend: the token is a bigint.
 *
 * - `RedisFence`: a fenced register and compare-and-set in Redis hashes (Lua, atomic).
 * - `PgFence`: a fenced register in PostgreSQL, and `transaction()`, which commits your own SQL
 *   only while your token is the newest the resource has seen.
 *
 * This module needs the types of both `ioredis` and `pg`; `fencelock/fencing/redis` and
 * `fencelock/fencing/postgres` export one guard each and need only its own engine's client.
 *
 * @example
 * import { RedisFence } from 'fencelock/fencing/redis';
 * const fence = new RedisFence(redis);
 * await locker.withLock('stock:42', (lease) => fence.write('stock:42', lease.fencingToken, '17'));
 */
export {
  PG_FENCE_DEFAULTS,
  PG_MAX_TOKEN,
  PgFence,
  type PgFenceOptions,
  type PgFenceRecord,
} from './postgres.js';
export { type CompareAndSetResult, RedisFence } from './redis.js';
export type { FencedValue } from './shared.js';
