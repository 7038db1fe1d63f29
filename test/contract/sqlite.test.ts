/**
 * The backend contract on the embedded SQLite store: every backend instance opens its own
 * connection to one temporary database file, as separate processes on one host would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll } from 'vitest';
import { createSqliteBackend } from '../../packages/fencelock/src/backends/sqlite/index.js';
import { describeBackend } from './backend.contract.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-contract-'));
const path = join(dir, 'locks.db');

/** Test-only connection for the engine hooks (never used by a backend). */
let admin: Database.Database | undefined;

afterAll(() => {
  admin?.close();
  rmSync(dir, { recursive: true, force: true });
});

describeBackend('sqlite', () => ({
  backend: createSqliteBackend({ path }),
  storeUrl: `sqlite:${path}`,
  // Millisecond expiry times; tokens from one counter for the whole file, so a key's tokens are
  // not consecutive and nothing of the key (its last token included) outlives its lease row.
  ttlGranularityMs: 1,
  minTtlMs: 1,
  consecutiveTokens: false,
  lastTokenOutlivesHolder: false,
  deleteKey: async (key) => {
    admin ??= new Database(path);
    admin.prepare('DELETE FROM fencelock_leases WHERE key = ?').run(key);
  },
}));
