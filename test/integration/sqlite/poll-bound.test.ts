/**
 * SQLite: a waiter whose holder vanished without releasing is granted soon after the holder's
 * TTL, not after its retry backoff: a not-granted attempt reports the holder's remaining time
 * (`holderTtlMs`, from the lease row's expiry), which bounds the core's backoff sleep. See
 * `test/helpers/poll-bound.ts` for the crashed holder and why the retry options make the bound
 * the only way in.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, it } from 'vitest';
import { createSqliteBackend } from '../../../packages/fencelock/src/backends/sqlite/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import {
  expectGrantedSoonAfterTtl,
  POLLING_RETRY,
  waitOutCrashedHolder,
} from '../../helpers/poll-bound.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-poll-bound-'));

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('SQLite: the holder TTL bounds a waiter’s poll', () => {
  it('granted soon after a crashed holder’s TTL, despite a backoff far past the wait', async () => {
    const path = join(dir, 'locks.db');
    // Two connections to one file, as two processes would have.
    const holder = createSqliteBackend({ path });
    const waiter = createLocker(createSqliteBackend({ path }));
    try {
      const keys = Array.from({ length: 4 }, () => `poll-bound:${randomUUID()}`);
      expectGrantedSoonAfterTtl(await waitOutCrashedHolder(holder, waiter, keys, POLLING_RETRY));
    } finally {
      await Promise.all([waiter.close(), holder.close()]);
    }
  });
});
