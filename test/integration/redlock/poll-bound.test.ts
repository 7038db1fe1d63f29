/**
 * Redlock: a waiter whose holder vanished without releasing is granted soon after the holder's
 * TTL, not after its retry backoff: a vote without a majority reports the longest remaining
 * time of the holder's keys on the nodes (`holderTtlMs`), which bounds the core's backoff sleep.
 * See `test/helpers/poll-bound.ts` for the crashed holder and why the retry options make the
 * bound the only way in.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, it } from 'vitest';
import { createRedlockBackend } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';
import {
  expectGrantedSoonAfterTtl,
  POLLING_RETRY,
  waitOutCrashedHolder,
} from '../../helpers/poll-bound.js';

const prefix = `fencelock-it-poll-bound-${randomBytes(4).toString('hex')}`;

afterAll(async () => {
  for (const url of REDLOCK_NODE_URLS) {
    const node = new Redis(url, { maxRetriesPerRequest: 1 });
    try {
      const keys = await node.keys(`${prefix}:*`);
      if (keys.length > 0) await node.del(...keys);
    } finally {
      node.disconnect();
    }
  }
});

describe('Redlock: the holder TTL bounds a waiter’s poll', () => {
  it('granted soon after a crashed holder’s TTL, despite a backoff far past the wait', async () => {
    const holder = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
    const waiter = createLocker(createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix }));
    try {
      const keys = Array.from({ length: 4 }, () => `poll-bound:${randomUUID()}`);
      expectGrantedSoonAfterTtl(await waitOutCrashedHolder(holder, waiter, keys, POLLING_RETRY));
    } finally {
      await Promise.all([waiter.close(), holder.close()]);
    }
  });
});
