/**
 * The sidecar's errors as gRPC statuses. Each error code of the sidecar (`SidecarErrorCode`)
 * has one status; the code itself travels in the trailing metadata entry
 * `fencelock-error-code`, the field at fault in `fencelock-field` (named as in the .proto) and a
 * release / renew outcome in `fencelock-outcome`, so a client can tell ERR_LOCK_BUSY from
 * another ABORTED. Dapr's service answers Dapr's own statuses for the same cases (its runtime's
 * predefined errors: INVALID_ARGUMENT for bad input and an unknown store, INTERNAL for a store
 * that failed, UNAUTHENTICATED for a wrong token).
 */
import { Metadata, type ServiceError, status } from '@grpc/grpc-js';
import type { HttpError, SidecarErrorCode } from '../http-errors.js';

/** The gRPC status of each error code of the sidecar. */
export const GRPC_STATUS: Readonly<Record<SidecarErrorCode, status>> = Object.freeze({
  ERR_INVALID_ARGUMENT: status.INVALID_ARGUMENT,
  ERR_MALFORMED_REQUEST: status.INVALID_ARGUMENT,
  ERR_UNSUPPORTED_MEDIA_TYPE: status.INVALID_ARGUMENT,
  ERR_LOCK_STORE_NOT_FOUND: status.INVALID_ARGUMENT,
  ERR_BODY_TOO_LARGE: status.RESOURCE_EXHAUSTED,
  ERR_TOO_MANY_STREAMS: status.RESOURCE_EXHAUSTED,
  ERR_UNAUTHORIZED: status.UNAUTHENTICATED,
  ERR_NOT_FOUND: status.UNIMPLEMENTED,
  ERR_LOCK_BUSY: status.ABORTED,
  ERR_LOCK_TIMEOUT: status.DEADLINE_EXCEEDED,
  ERR_LOCK_NOT_HELD: status.NOT_FOUND,
  ERR_NOT_LOCK_OWNER: status.FAILED_PRECONDITION,
  ERR_PERMITS_MISMATCH: status.FAILED_PRECONDITION,
  ERR_BACKEND: status.UNAVAILABLE,
  ERR_QUORUM: status.UNAVAILABLE,
  ERR_SHUTTING_DOWN: status.UNAVAILABLE,
  ERR_HEALTH_NOT_READY: status.UNAVAILABLE,
  ERR_TRY_LOCK: status.INTERNAL,
  ERR_UNLOCK: status.INTERNAL,
  ERR_INTERNAL: status.INTERNAL,
});

/**
 * `error` as a gRPC error. `fields` renames the sidecar's field names (fencelock's HTTP
 * spelling, `ttlMs`) to the request's fields in the .proto (`ttl_ms`), in `fencelock-field` and
 * in the message.
 */
export function toServiceError(
  error: HttpError,
  fields: Readonly<Record<string, string>>,
): Partial<ServiceError> {
  const { errorCode, field, outcome } = error.body;
  let { message } = error.body;
  const metadata = new Metadata();
  metadata.set('fencelock-error-code', errorCode);
  if (field !== undefined) {
    const named = fields[field] ?? field;
    metadata.set('fencelock-field', named);
    if (message.startsWith(`invalid ${field}:`)) {
      message = `invalid ${named}:${message.slice(`invalid ${field}:`.length)}`;
    }
  }
  if (outcome !== undefined) metadata.set('fencelock-outcome', outcome);
  return { code: GRPC_STATUS[errorCode], details: message, metadata };
}
