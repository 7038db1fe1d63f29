/**
 * The backend contract in lease mode through PgBouncer in transaction mode (`scripts/services.sh
 * up pgbouncer`), as the store URL spells it: `?pooler=transaction&listenUrl=<the server>`.
 * Statements go through the pooler; only LISTEN connects to PostgreSQL directly. Every run uses
 * its own schema, dropped at the end.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';
import { createPostgresBackend } from '../../packages/fencelock/src/backends/postgres/index.js';
import { PG_URL, PGBOUNCER_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const schema = `fencelock_contract_${randomBytes(4).toString('hex')}`;
const STORE = `${PGBOUNCER_URL}?pooler=transaction&listenUrl=${encodeURIComponent(PG_URL)}&schema=${schema}`;

/** Test-only connection to the server itself for the engine hooks (never used by a backend). */
const admin = new pg.Pool({ connectionString: PG_URL, max: 2 });

afterAll(async () => {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

describeBackend('postgres via pgbouncer (transaction mode)', () => ({
  backend: createPostgresBackend({ url: STORE, poolSize: 4 }),
  storeUrl: STORE,
  // As in lease mode without a pooler (test/contract/postgres.test.ts).
  ttlGranularityMs: 1,
  minTtlMs: 1,
  consecutiveTokens: false,
  lastTokenOutlivesHolder: false,
  deleteKey: async (key) => {
    await admin.query(`DELETE FROM "${schema}".fencelock_leases WHERE key = $1`, [key]);
  },
}));
