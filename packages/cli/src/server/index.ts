/**
 * `@fencelock/cli/server`: the sidecar as a library, for embedding it or testing against it.
 * `fencelock serve` runs the same factory.
 */
export {
  createSidecar,
  DEFAULT_GRPC_PORT,
  DEFAULT_MAX_WAIT_MS,
  DEFAULT_PORT,
  DEFAULT_STORE_NAME,
  type Sidecar,
  type SidecarOptions,
} from './app.js';
export { isLoopbackHost, MIN_TOKEN_CHARS } from './auth.js';
export type { ErrorBody, SidecarErrorCode } from './http-errors.js';
export { UNLOCK_STATUS } from './lock-operations.js';
export { OWNER_NAMESPACE, ownerIdFor } from './owner.js';
