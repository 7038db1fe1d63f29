/**
 * The backend contract on the PostgreSQL server of `scripts/services.sh`, lease mode. Every run
 * uses its own schema, dropped at the end, so runs and other test files never share a table.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';
import { createPostgresBackend } from '../../packages/fencelock/src/backends/postgres/index.js';
import { PG_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const schema = `fencelock_contract_${randomBytes(4).toString('hex')}`;

/** Test-only connection for the engine hooks (never used by a backend). */
const admin = new pg.Pool({ connectionString: PG_URL, max: 2 });

afterAll(async () => {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

describeBackend('postgres', () => ({
  backend: createPostgresBackend({ url: PG_URL, schema, poolSize: 4 }),
  storeUrl: `${PG_URL}?schema=${schema}`,
  // Expiry times on the server's clock with microsecond precision; tokens from one sequence
  // per schema (strictly increasing per key, not consecutive); a released row is deleted.
  ttlGranularityMs: 1,
  minTtlMs: 1,
  consecutiveTokens: false,
  lastTokenOutlivesHolder: false,
  deleteKey: async (key) => {
    await admin.query(`DELETE FROM "${schema}".fencelock_leases WHERE key = $1`, [key]);
  },
}));
