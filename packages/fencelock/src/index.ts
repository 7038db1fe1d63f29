/**
 * fencelock: distributed locks with a fencing token on every lease.
 *
 * Core entry point; engines live in subpaths (`fencelock/redis`, `fencelock/redlock`,
 * `fencelock/etcd`, `fencelock/zookeeper`, `fencelock/postgres`, `fencelock/sqlite`), the
 * resource-side guards in `fencelock/fencing/redis` and `fencelock/fencing/postgres`, the metrics
 * adapters in `fencelock/metrics/prometheus` and `fencelock/metrics/opentelemetry`.
 */
export { DEFAULT_SQLITE_PATH } from './backends/sqlite/url.js';
export type {
  AttemptRequest,
  AttemptResult,
  Backend,
  BackendCapabilities,
  BackendSession,
  ElectedLeader,
  ElectionCandidacy,
  ElectionWatch,
  Granted,
  LeaseRef,
  ListedHolder,
  ListedLock,
  ListPage,
  ListRequest,
  LockInfo,
  NotGranted,
  NotGrantedReason,
  ProclaimOutcome,
  ReleaseOutcome,
  RenewResult,
} from './core/backend.js';
export { MAX_ELECTION_VALUE_BYTES, validateElectionValue } from './core/candidacy.js';
export {
  type AcquireEvent,
  CHANNELS,
  type EventOrigin,
  type LostEvent,
  type ReleaseEvent,
  type RenewEvent,
  type WaitEvent,
} from './core/events.js';
export { Lease } from './core/lease.js';
export {
  type ListOptions,
  type ListPageOptions,
  MAX_LIST_CURSOR_BYTES,
  MAX_LIST_PAGE_SIZE,
} from './core/listing.js';
export { Lock } from './core/lock.js';
export {
  type AcquireOptions,
  Locker,
  type SessionOptions,
} from './core/locker.js';
export type {
  OwnerAcquireAllOptions,
  OwnerAcquireOptions,
  OwnerGrant,
  OwnerReleaseRef,
  OwnerRenewOutcome,
} from './core/owner-grants.js';
export { MAX_PERMITS } from './core/permits.js';
export { Session } from './core/session.js';
export { createLocker } from './create-locker.js';
export {
  BackendError,
  FencelockError,
  type FencelockErrorCode,
  InvalidArgumentError,
  LockLostError,
  type LockLostReason,
  LockTimeoutError,
  type NodeOutcome,
  NotLockOwnerError,
  PermitsMismatchError,
  QuorumError,
  StaleTokenError,
  type Unreachable,
} from './errors.js';
export {
  DEFAULTS,
  type LockerOptions,
  type LockOptions,
  MAX_KEY_BYTES,
  MAX_LOCK_DELAY_MS,
  MAX_TIMER_MS,
  MIN_TTL_MS,
  type RetryOptions,
  ttlRule,
  validateKey,
} from './options.js';
export {
  type CampaignOptions,
  Election,
  type ElectionLeader,
  Leadership,
} from './primitives/election.js';
export type { ObserveOptions } from './primitives/election-observer.js';
export {
  MAX_MULTI_KEYS,
  MultiLease,
  type MultiLockOptions,
} from './primitives/multi-lock.js';
export {
  type PermitOptions,
  Semaphore,
  type SemaphoreOptions,
} from './primitives/semaphore.js';
export { redactStoreUrl, redactStoreUrlsIn } from './redact.js';
export { STORE_SCHEMES, validateStoreUrl } from './stores.js';
