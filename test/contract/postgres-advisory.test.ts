/**
 * The backend contract on PostgreSQL in advisory-lock mode: each backend holds its locks on one
 * dedicated connection; the engine loses a key when the connection that holds it is terminated.
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll } from 'vitest';
import { createPostgresBackend } from '../../packages/fencelock/src/backends/postgres/index.js';
import { PG_URL } from '../helpers/engines.js';
import { describeBackend } from './backend.contract.js';

const schema = `fencelock_contract_adv_${randomBytes(4).toString('hex')}`;

/** Test-only connection for the engine hooks (never used by a backend). */
const admin = new pg.Pool({ connectionString: PG_URL, max: 2 });

afterAll(async () => {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  await admin.end();
});

describeBackend('postgres (advisory locks)', () => ({
  backend: createPostgresBackend({ url: PG_URL, schema, mode: 'advisory', poolSize: 2 }),
  storeUrl: `${PG_URL}?schema=${schema}&mode=advisory`,
  // The backend's own TTL timer (ms); tokens from the schema's sequence; the holder row is
  // only reported while its connection holds the lock.
  ttlGranularityMs: 1,
  minTtlMs: 1,
  consecutiveTokens: false,
  lastTokenOutlivesHolder: false,
  lossReason: 'session-lost',
  // The engine loses the key: the server ends the connection that holds it. Termination is
  // asynchronous (the server process lets its locks go as it exits): wait up to 10 s for it.
  deleteKey: async (key) => {
    await admin.query(
      `SELECT pg_terminate_backend(pid, 10000) FROM "${schema}".fencelock_advisory_holders WHERE key = $1`,
      [key],
    );
  },
}));
