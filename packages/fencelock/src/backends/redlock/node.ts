/**
 * One Redis node of a Redlock: the connection a vote runs on, and who closes it. Its own module
 * so that the backend and the restart watch (`restarts.ts`) both use it without importing each
 * other.
 */
import type { Redis } from 'ioredis';

/** One Redis node of a Redlock. */
export interface RedlockNode {
  /** `host:port`, for reports. */
  readonly name: string;
  readonly client: Redis;
  /** Opened by the backend (closed by `close()`), or the user's. */
  readonly owned: boolean;
}
