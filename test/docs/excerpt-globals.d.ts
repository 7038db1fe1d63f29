/**
 * The names a documentation excerpt (a block marked `excerpt`) may use without defining them.
 * Only excerpts are checked with this file; complete programs define everything they use.
 * Keep the list short: each name here is one a reader understands without being shown where it
 * comes from (docs/doc-tests.md lists them). The repository's tsconfig.json excludes this file,
 * so the tests do not see these globals.
 */
import type { Lease, Locker } from 'fencelock';
import type { Pool } from 'pg';

declare global {
  /** A locker on some store (`createLocker(store)`). */
  const locker: Locker;
  /** A lease the excerpt holds (`await locker.acquire(key)`). */
  const lease: Lease;
  /** A signal the excerpt's caller passed, such as a lease's. */
  const signal: AbortSignal;
  /** A `pg` pool of the database a fencing guard protects. */
  const pool: Pool;
}
