/**
 * The four naive lock designs of the versions demo (v1–v4), written straight on ioredis the way
 * they keep getting written. They are NOT fencelock's API and are not exported by the package:
 * each one has the flaw the demo shows, on purpose.
 *
 * - v1 `SetnxLock`: `SETNX key owner`, no TTL. A crashed holder's key stays forever.
 * - v2 `ExpiringLock`: `SET key owner NX PX ttl`, released with a plain delete. A holder whose
 *   work outlasted the TTL deletes whoever holds the key by then.
 * - v3 `OwnerCheckedLock`: as v2, released by compare-and-delete in Lua. Work longer than the TTL
 *   still lets a second holder in.
 * - v4 `WatchdogLock`: as v3, plus a timer renewing the TTL (compare-and-PEXPIRE) every ttl / 3
 *   while held. Long work is covered; a paused process renews nothing, so the key expires under
 *   it, and on waking it writes as if nothing happened.
 *
 * v1 and v2 delete with GETDEL, which deletes exactly like DEL whatever the key holds; its reply
 * only lets the demo see whose lock went.
 */
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { ReleaseResult } from './protocol.js';

/** Compare-and-delete: 1 deleted (ours), 0 no key, -1 another owner's key (left alone). */
const COMPARE_AND_DELETE = `
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if current then return -1 end
return 0`;

/** Compare-and-PEXPIRE: 1 renewed, 0 the key is gone or another owner's. */
const COMPARE_AND_RENEW = `
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`;

/** How a naive release ended, and whose lock a plain delete removed. */
export interface NaiveRelease {
  readonly result: ReleaseResult;
  /** Owner id of the lock a plain delete removed; null when none was there or not known. */
  readonly deletedOwner: string | null;
}

/** One client's handle on one naive lock. */
export interface NaiveLock {
  /** Random owner id (128 bits, hex). */
  readonly owner: string;
  /** One attempt; true when granted. */
  tryAcquire(): Promise<boolean>;
  /** Whether this client believes it holds the lock (its own view; Redis may disagree). */
  believesHeld(): boolean;
  /** Release the design's way. */
  release(): Promise<NaiveRelease>;
  /** Renewals made by the watchdog during the current hold (v4; 0 for the others). */
  readonly renewals: number;
  /** Whether the design noticed that its lock was gone (v4's watchdog; false for the others). */
  readonly lossNoticed: boolean;
  /** Stop background work (the watchdog timer). */
  stop(): void;
}

/** Build the naive lock of `version` on `key`. */
export function createNaiveLock(
  version: 'v1' | 'v2' | 'v3' | 'v4',
  client: Redis,
  key: string,
  ttlMs: number,
): NaiveLock {
  switch (version) {
    case 'v1':
      return new SetnxLock(client, key, ttlMs);
    case 'v2':
      return new ExpiringLock(client, key, ttlMs);
    case 'v3':
      return new OwnerCheckedLock(client, key, ttlMs);
    case 'v4':
      return new WatchdogLock(client, key, ttlMs);
  }
}

/** v1: SETNX, no TTL, plain delete. */
class SetnxLock implements NaiveLock {
  readonly owner = randomBytes(16).toString('hex');
  protected readonly client: Redis;
  protected readonly key: string;
  /** Lease length, ms (not used by v1, which sets no TTL). */
  protected readonly ttlMs: number;
  protected held = false;

  constructor(client: Redis, key: string, ttlMs: number) {
    this.client = client;
    this.key = key;
    this.ttlMs = ttlMs;
  }

  async tryAcquire(): Promise<boolean> {
    this.held = (await this.client.setnx(this.key, this.owner)) === 1;
    return this.held;
  }

  get renewals(): number {
    return 0;
  }

  get lossNoticed(): boolean {
    return false;
  }

  believesHeld(): boolean {
    return this.held;
  }

  async release(): Promise<NaiveRelease> {
    this.held = false;
    const deleted = await this.client.getdel(this.key);
    const result =
      deleted === null ? 'not-held' : deleted === this.owner ? 'released' : 'deleted-other';
    return { result, deletedOwner: deleted };
  }

  stop(): void {}
}

/** v2: SET NX PX, plain delete. */
class ExpiringLock extends SetnxLock {
  override async tryAcquire(): Promise<boolean> {
    this.held = (await this.client.set(this.key, this.owner, 'PX', this.ttlMs, 'NX')) === 'OK';
    return this.held;
  }
}

/** v3: SET NX PX, compare-and-delete. */
class OwnerCheckedLock extends ExpiringLock {
  override async release(): Promise<NaiveRelease> {
    this.held = false;
    const reply = (await this.client.eval(COMPARE_AND_DELETE, 1, this.key, this.owner)) as
      | 1
      | 0
      | -1;
    return {
      result: reply === 1 ? 'released' : reply === 0 ? 'not-held' : 'not-owner',
      deletedOwner: reply === 1 ? this.owner : null,
    };
  }
}

/** v4: v3 plus a watchdog that renews the TTL every ttl / 3 while held. */
class WatchdogLock extends OwnerCheckedLock {
  #renewals = 0;
  #lossNoticed = false;
  #timer: NodeJS.Timeout | undefined;
  #renewing = false;

  override get renewals(): number {
    return this.#renewals;
  }

  override get lossNoticed(): boolean {
    return this.#lossNoticed;
  }

  override async tryAcquire(): Promise<boolean> {
    if (!(await super.tryAcquire())) return false;
    this.#renewals = 0;
    this.#lossNoticed = false;
    this.#timer = setInterval(() => void this.#renew(), Math.max(1, Math.floor(this.ttlMs / 3)));
    return true;
  }

  override believesHeld(): boolean {
    return this.held && !this.#lossNoticed;
  }

  override async release(): Promise<NaiveRelease> {
    this.stop();
    return super.release();
  }

  override stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async #renew(): Promise<void> {
    if (this.#renewing) return;
    this.#renewing = true;
    try {
      const reply = await this.client.eval(COMPARE_AND_RENEW, 1, this.key, this.owner, this.ttlMs);
      if (reply === 1) {
        this.#renewals += 1;
      } else {
        // The key is gone or someone else's: this design stops renewing and notes it; nothing
        // stops the work already under way.
        this.#lossNoticed = true;
        this.stop();
      }
    } catch {
      // A failed renewal is retried at the next tick, as such watchdogs do.
    } finally {
      this.#renewing = false;
    }
  }
}
