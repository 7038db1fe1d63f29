/**
 * PostgreSQL lease mode: a waiter whose holder vanished without releasing (so no NOTIFY comes) is
 * granted soon after the holder's TTL, not after its retry backoff: a not-granted attempt reports
 * the holder's remaining time (`holderTtlMs`), which bounds the core's wait on LISTEN/NOTIFY and,
 * with `notifications: false`, its backoff sleep. See `test/helpers/poll-bound.ts` for the
 * crashed holder and why the retry options make the bound the only way in.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, describe, it } from 'vitest';
import { createPostgresBackend } from '../../../packages/fencelock/src/backends/postgres/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import {
  expectGrantedSoonAfterTtl,
  NOTIFIED_RETRY,
  POLLING_RETRY,
  waitOutCrashedHolder,
} from '../../helpers/poll-bound.js';
import { adminPool, dropSchema, PG_URL, uniqueSchema } from './support.js';

const schema = uniqueSchema('pollbound');
const admin = adminPool();

afterAll(async () => {
  await dropSchema(admin, schema);
});

describe('PostgreSQL lease mode: the holder TTL bounds a waiter’s poll', () => {
  it.each([
    // Woken by NOTIFY otherwise; without the bound the wait on it lasts the whole 10 s.
    { waiting: 'LISTEN/NOTIFY', notifications: true, retry: NOTIFIED_RETRY, waiters: 2 },
    // Polling only: without the bound a waiter sleeps up to 100 s per attempt (see the helper).
    {
      waiting: 'polling (notifications: false)',
      notifications: false,
      retry: POLLING_RETRY,
      waiters: 4,
    },
  ])(
    '$waiting: granted soon after a crashed holder’s TTL, despite a backoff far past the wait',
    async ({ notifications, retry, waiters }) => {
      const holder = createPostgresBackend({ url: PG_URL, schema, notifications });
      const waiter = createLocker(createPostgresBackend({ url: PG_URL, schema, notifications }));
      try {
        const keys = Array.from({ length: waiters }, () => `poll-bound:${randomUUID()}`);
        expectGrantedSoonAfterTtl(await waitOutCrashedHolder(holder, waiter, keys, retry));
      } finally {
        await Promise.all([waiter.close(), holder.close()]);
      }
    },
  );
});
