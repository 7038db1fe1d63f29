/**
 * What the versions demo's orchestrator (`run.ts`, through `clients.ts`) and its client processes
 * (`worker.ts`) say to each other over the `child_process.fork` IPC channel (JSON, so tokens
 * travel as decimal strings).
 *
 * The orchestrator drives every step: a client does nothing on its own except what its lock
 * design does in the background (the v4 and v5 watchdogs). Each command gets exactly one reply,
 * and a client handles one command at a time.
 *
 * A client's critical section is split in two so the orchestrator can fault it in between:
 * `prepare` is the holder's last look (at its lease, where its design has one, and at the
 * resource), `write` is its write. A pause between them is the GC pause of Kleppmann's
 * "How to do distributed locking" (2016): the holder checked, stopped, and writes on waking.
 */
import type { VersionId } from './defaults.js';

/** Name of v5's resource inside its `RedisFence` key prefix. */
export const FENCED_RESOURCE = 'resource';

/** Settings of one client process (`argv[2]`, JSON). */
export interface ClientConfig {
  /** `A`, `B` or `C`. */
  readonly name: string;
  /** Which lock design the client uses. */
  readonly version: VersionId;
  /** `redis://…` the naive designs and the resource connect to (no query string). */
  readonly redisUrl: string;
  /** v5: the fencelock store URL (the same Redis, with this version's key prefix). */
  readonly store: string;
  /** v1–v4: the lock's Redis key. v5: the fencelock lock key. */
  readonly lockKey: string;
  /** v1–v4: the unfenced resource's Redis key. v5: the `RedisFence` key prefix. */
  readonly resourceKey: string;
  /** Lease length, ms (v2–v5). */
  readonly ttlMs: number;
  /** Pause between two attempts while waiting for a naive lock, ms. */
  readonly pollMs: number;
}

/** Commands from the orchestrator. */
export type Command =
  /** Try to acquire, for at most `waitMs` (0: one attempt). */
  | { readonly type: 'acquire'; readonly waitMs: number }
  /** Last look before the write: check the lease (where the design can) and read the resource. */
  | { readonly type: 'prepare' }
  /** Write `value` to the resource, without looking at the lease again. */
  | { readonly type: 'write'; readonly value: string }
  /** Release the lock the design's way. */
  | { readonly type: 'release' }
  /** Close every connection and exit. */
  | { readonly type: 'close' };

/** How a release ended. */
export type ReleaseResult =
  /** Deleted the client's own lock. */
  | 'released'
  /** Deleted a lock that belonged to another owner (v2's plain DEL). */
  | 'deleted-other'
  /** No lock was there. */
  | 'not-held'
  /** Another owner held the lock, and the release left it alone. */
  | 'not-owner';

/** Replies of a client. */
export type Reply =
  | { readonly type: 'ready'; readonly pid: number }
  | {
      readonly type: 'acquired';
      /** Attempts made (null for fencelock, which waits by its own loop). */
      readonly attempts: number | null;
      readonly waitedMs: number;
      /** Owner id the lock was taken with. */
      readonly owner: string;
      /** v5: the lease's fencing token (decimal); null for the naive designs. */
      readonly token: string | null;
    }
  | { readonly type: 'busy'; readonly attempts: number | null; readonly waitedMs: number }
  | {
      readonly type: 'prepared';
      /** Whether the client believes it holds the lock (its design's own view). */
      readonly believesHeld: boolean;
      /** The resource's value as read (null: never written). */
      readonly read: string | null;
    }
  | {
      readonly type: 'wrote';
      readonly accepted: boolean;
      /** Why a write was refused: the resource's `StaleTokenError` message. */
      readonly refusal: string | null;
    }
  | {
      readonly type: 'released';
      readonly result: ReleaseResult;
      /** v2: the owner id of the lock the DEL removed (null: none was there). */
      readonly deletedOwner: string | null;
      /** Renewals the design's watchdog made during this hold (v4). */
      readonly renewals: number;
      /** Whether the client had noticed, before releasing, that its lease was gone. */
      readonly lossNoticed: boolean;
    }
  | { readonly type: 'closed' }
  | { readonly type: 'error'; readonly message: string; readonly stack?: string };
