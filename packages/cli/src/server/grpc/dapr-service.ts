/**
 * Dapr's runtime service over gRPC, the three methods fencelock serves, answered as Dapr's
 * runtime answers them (its lock API and predefined errors):
 * - `TryLockAlpha1` → `{ success }`: one attempt, no waiting. A grant also sends the trailing
 *   metadata `fencelock-fencing-token` (decimal) and `fencelock-ttl-ms`, as the HTTP route
 *   sends headers.
 * - `UnlockAlpha1` → `{ status }`: 0 released, 1 the lock does not exist, 2 it belongs to others.
 * - `GetMetadata` → the app id, `fencelock <version>` as the runtime version, and the lock store
 *   as a component (type `lock.fencelock`, version `v1`), as `GET /v1.0/metadata`.
 * Errors: a non-positive `expiry_in_seconds`, an empty `resource_id` or `lock_owner` →
 * INVALID_ARGUMENT naming the field (Dapr checks them in that order); another store name →
 * INVALID_ARGUMENT (`ERR_LOCK_STORE_NOT_FOUND`); a store that fails → INTERNAL, "failed to try
 * acquiring lock: …" / "failed to release lock: …".
 */
import { daprAnswer } from '../http-errors.js';
import { daprTryLock, daprUnlock, type LockOperationsContext } from '../lock-operations.js';
import { LOCK_COMPONENT_TYPE } from '../routes/dapr-runtime.js';
import type { ServiceMethods } from './service-methods.js';
import { toServiceError } from './status.js';

/** Dapr's field names (fencelock's HTTP spelling) as in the .proto. */
const FIELDS: Readonly<Record<string, string>> = {
  storeName: 'store_name',
  resourceId: 'resource_id',
  lockOwner: 'lock_owner',
  expiryInSeconds: 'expiry_in_seconds',
};

interface TryLockRequest {
  readonly storeName: string;
  readonly resourceId: string;
  readonly lockOwner: string;
  readonly expiryInSeconds: number;
}

interface UnlockRequest {
  readonly storeName: string;
  readonly resourceId: string;
  readonly lockOwner: string;
}

/** The Dapr methods fencelock serves. */
export function daprService(
  ctx: LockOperationsContext,
  info: { readonly appId: string; readonly runtimeVersion: string },
): ServiceMethods {
  const metadata = {
    id: info.appId,
    registeredComponents: [
      { name: ctx.storeName, type: LOCK_COMPONENT_TYPE, version: 'v1', capabilities: [] },
    ],
    extendedMetadata: {},
    runtimeVersion: info.runtimeVersion,
    enabledFeatures: [],
  };
  return {
    methods: {
      async TryLockAlpha1(request: TryLockRequest, _signal, trailer) {
        const { success, grant } = await daprTryLock(ctx, request);
        if (grant !== null) {
          trailer.set('fencelock-fencing-token', grant.fencingToken);
          trailer.set('fencelock-ttl-ms', String(grant.ttlMs));
        }
        return { success };
      },
      async UnlockAlpha1(request: UnlockRequest) {
        return daprUnlock(ctx, request);
      },
      async GetMetadata() {
        return metadata;
      },
    },
    fail: (method, error) =>
      toServiceError(daprAnswer(error, method === 'UnlockAlpha1' ? 'unlock' : 'lock'), FIELDS),
  };
}
