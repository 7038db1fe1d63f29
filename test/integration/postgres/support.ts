/**
 * Shared pieces of the PostgreSQL integration tests: a schema per test file (dropped at the
 * end), an admin pool that bypasses fencelock, and a backend wrapper that counts attempts.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type {
  AttemptRequest,
  AttemptResult,
  Backend,
} from '../../../packages/fencelock/src/index.js';
import { PG_URL } from '../../helpers/engines.js';

export { PG_URL };

/** A schema name no other run uses. */
export function uniqueSchema(tag: string): string {
  return `fencelock_it_${tag}_${randomBytes(4).toString('hex')}`;
}

/** A pool for test-side queries (never used by a backend). */
export function adminPool(): pg.Pool {
  return new pg.Pool({ connectionString: PG_URL, max: 3 });
}

/** Drop `schema` and end the admin pool. */
export async function dropSchema(admin: pg.Pool, schema: string): Promise<void> {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
}

/**
 * A backend that counts the attempts it forwards to the real one (the engine answers them; only
 * the count is added).
 */
export function countingAttempts<B extends Backend>(
  backend: B,
): { backend: B; attempts: () => number } {
  let count = 0;
  const attempt = backend.attempt.bind(backend);
  const counted = Object.assign(backend, {
    attempt: (request: AttemptRequest): Promise<AttemptResult> => {
      count += 1;
      return attempt(request);
    },
  });
  return { backend: counted, attempts: () => count };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Poll `condition` every 20 ms until it holds or `timeoutMs` passes; returns whether it held. */
export async function eventually(condition: () => boolean | Promise<boolean>, timeoutMs = 5_000) {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await condition()) return true;
    await sleep(20);
  }
  return condition();
}

/** Session-level advisory locks of the bigint id of `key` as the server lists them. */
export async function advisoryLocksOf(admin: pg.Pool, key: string): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM pg_locks
     WHERE locktype = 'advisory' AND objsubid = 1
       AND (classid::int8 << 32) | objid::int8 =
           ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`,
    [key],
  );
  return Number(rows[0]!.n);
}
