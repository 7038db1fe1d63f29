/**
 * `fencelock.v1.Locks` (proto/fencelock/v1/locks.proto): the gRPC form of the `/v1/locks`
 * routes, on the same operations (`lock-operations.ts`): Acquire with a server-side wait (ended
 * by the caller's cancel or deadline: nothing is granted to a caller that gave up), Renew,
 * Release, Inspect. Fencing tokens are decimal strings; durations are ms. An empty `owner` in
 * Acquire asks for a random one; elsewhere it is refused, as a missing one over HTTP. `permits` 0
 * is the lock; 1 to 10,000 a semaphore's permit.
 *
 * `mode` is the enum `LockMode` (numbers, as loaded): 0 (unset) and 1 write, 2 read; any other
 * number is refused naming `mode`. AcquireAll / ReleaseAll are `/v1/locks/acquire-all` and
 * `/v1/locks/release-all`; List is `GET /v1/locks` (list-operation.ts). Campaign,
 * RenewLeadership, Proclaim, Resign, Leader and the server-streaming Observe are the
 * `/v1/elections/{name}` routes (election-methods.ts).
 */

import { listHeld } from '../list-operation.js';
import {
  acquire,
  acquireAll,
  type GrantAnswer,
  inspect,
  type LockOperationsContext,
  release,
  releaseAll,
  renew,
} from '../lock-operations.js';
import { electionMethods } from './election-methods.js';
import type { ServiceMethods } from './service-methods.js';
import { toServiceError } from './status.js';

/** `fencelock.v1.LockMode` numbers. */
const LOCK_MODE = { unspecified: 0, write: 1, read: 2 } as const;

/**
 * A field of the sidecar's (fencelock's HTTP spelling, `grants[0].fencingToken`) as the .proto
 * names it (`grants[0].fencing_token`).
 */
function protoField(field: string): string {
  return field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** A request's `LockMode` as the operations' mode (an unknown number is passed on, refused). */
function modeOf(mode: number): unknown {
  if (mode === LOCK_MODE.unspecified || mode === LOCK_MODE.write) return undefined;
  if (mode === LOCK_MODE.read) return 'read';
  return mode;
}

/** A grant in the .proto's shape: `mode` as its enum number (unset for a write grant). */
function grantMessage(grant: GrantAnswer): object {
  return { ...grant, mode: grant.mode === 'read' ? LOCK_MODE.read : LOCK_MODE.unspecified };
}

interface AcquireRequest {
  readonly key: string;
  readonly owner: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  /** 0: the lock. */
  readonly permits: number;
  readonly mode: number;
  /** 0: none. */
  readonly lockDelayMs: number;
}

interface AcquireAllRequest {
  readonly keys: readonly string[];
  readonly owner: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  readonly mode: number;
  /** 0: none. */
  readonly lockDelayMs: number;
}

interface ReleaseAllRequest {
  readonly owner: string;
  readonly grants: readonly { readonly key: string; readonly fencingToken: string }[];
}

interface RenewRequest {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: string;
  readonly ttlMs: number;
  readonly permits: number;
}

interface ReleaseRequest {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: string;
  readonly permits: number;
}

interface ListRequest {
  readonly prefix: string;
  /** 0: the default. */
  readonly limit: number;
  readonly cursor: string;
}

interface InspectRequest {
  readonly key: string;
  readonly owner: string;
}

/** The methods of `fencelock.v1.Locks`. */
export function locksService(ctx: LockOperationsContext): ServiceMethods {
  const elections = electionMethods(ctx);
  return {
    streams: elections.streams,
    methods: {
      ...elections.methods,
      async Acquire(request: AcquireRequest, signal) {
        const grant = await acquire(ctx, {
          key: request.key,
          owner: request.owner === '' ? undefined : request.owner,
          ttlMs: request.ttlMs,
          waitMs: request.waitMs,
          permits: request.permits,
          mode: modeOf(request.mode),
          lockDelayMs: request.lockDelayMs,
          signal,
        });
        return grantMessage(grant);
      },
      async AcquireAll(request: AcquireAllRequest, signal) {
        const answer = await acquireAll(ctx, {
          keys: request.keys,
          owner: request.owner === '' ? undefined : request.owner,
          ttlMs: request.ttlMs,
          waitMs: request.waitMs,
          mode: modeOf(request.mode),
          lockDelayMs: request.lockDelayMs,
          signal,
        });
        return { owner: answer.owner, grants: answer.grants.map(grantMessage) };
      },
      async ReleaseAll(request: ReleaseAllRequest) {
        return releaseAll(ctx, request);
      },
      async Renew(request: RenewRequest) {
        return renew(ctx, request);
      },
      async Release(request: ReleaseRequest) {
        const { key } = await release(ctx, request);
        return { key };
      },
      async List(request: ListRequest) {
        const answer = await listHeld(ctx, {
          prefix: request.prefix,
          limit: request.limit === 0 ? undefined : request.limit,
          cursor: request.cursor,
        });
        // Protobuf has no null: an empty cursor says there is nothing more.
        return {
          locks: answer.locks.map((lock) => ({ ...lock, permits: lock.permits ?? 0 })),
          cursor: answer.cursor ?? '',
        };
      },
      async Inspect(request: InspectRequest) {
        const answer = await inspect(ctx, {
          key: request.key,
          owner: request.owner === '' ? undefined : request.owner,
        });
        // An unset message field is how protobuf says "no holder".
        return answer.holder === null ? { ...answer, holder: undefined } : answer;
      },
    },
    fail: (_method, error) => {
      const { field } = error.body;
      return toServiceError(error, field === undefined ? {} : { [field]: protoField(field) });
    },
  };
}
