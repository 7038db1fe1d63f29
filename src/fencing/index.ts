/**
 * `fencelock/fencing`: resource-side guards that refuse a stale lock holder's write (a write
 * whose fencing token is older than one the resource already accepted).
 *
 * @example
 * import { RedisFence } from 'fencelock/fencing';
 * const fence = new RedisFence(redis);
 * await locker.withLock('stock:42', (lease) => fence.write('stock:42', lease.fencingToken, '17'));
 */
export { type FencedValue, RedisFence } from './redis.js';
