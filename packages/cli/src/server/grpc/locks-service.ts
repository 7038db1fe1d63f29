/**
 * `fencelock.v1.Locks` (proto/fencelock/v1/locks.proto): the gRPC form of the `/v1/locks`
 * routes, on the same operations (`lock-operations.ts`): Acquire with a server-side wait (ended
 * by the caller's cancel or deadline: nothing is granted to a caller that gave up), Renew,
 * Release, Inspect. Fencing tokens are decimal strings; durations are ms. An empty `owner` in
 * Acquire asks for a random one; elsewhere it is refused, as a missing one over HTTP. `permits` 0
 * is the lock; 1 to 10,000 a semaphore's permit.
 */
import {
  acquire,
  inspect,
  type LockOperationsContext,
  release,
  renew,
} from '../lock-operations.js';
import type { ServiceMethods } from './service-methods.js';
import { toServiceError } from './status.js';

/** The sidecar's field names as in the .proto. */
const FIELDS: Readonly<Record<string, string>> = {
  ttlMs: 'ttl_ms',
  waitMs: 'wait_ms',
  fencingToken: 'fencing_token',
};

interface AcquireRequest {
  readonly key: string;
  readonly owner: string;
  readonly ttlMs: number;
  readonly waitMs: number;
  /** 0: the lock. */
  readonly permits: number;
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

interface InspectRequest {
  readonly key: string;
  readonly owner: string;
}

/** The methods of `fencelock.v1.Locks`. */
export function locksService(ctx: LockOperationsContext): ServiceMethods {
  return {
    methods: {
      async Acquire(request: AcquireRequest, signal) {
        return acquire(ctx, {
          key: request.key,
          owner: request.owner === '' ? undefined : request.owner,
          ttlMs: request.ttlMs,
          waitMs: request.waitMs,
          permits: request.permits,
          signal,
        });
      },
      async Renew(request: RenewRequest) {
        return renew(ctx, request);
      },
      async Release(request: ReleaseRequest) {
        const { key } = await release(ctx, request);
        return { key };
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
    fail: (_method, error) => toServiceError(error, FIELDS),
  };
}
