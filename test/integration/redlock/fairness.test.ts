/**
 * Fair waiting on Redlock: waiters line up per key on every node in the order they started
 * waiting (`scripts/line.lua`), a release wakes only the head (its id on the key's channel of
 * every node), a releaser that asks again at once goes to the back, a single attempt never joins
 * the line, and a waiter that gives up leaves it at once (the cases of `helpers/fair-line.ts`);
 * a waiter still waits on release messages with nodes down.
 */
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import { REDLOCK_ENTRY_TTL_MS } from '../../../packages/fencelock/src/backends/waiting-line.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';
import { countingAttempts, fairLineCases } from '../../helpers/fair-line.js';
import { closedPort } from '../../helpers/ports.js';

const prefix = `fencelock-redlock-fair-${randomBytes(4).toString('hex')}`;
const unique = (label: string) => `${label}-${randomBytes(4).toString('hex')}`;
let admins: Redis[];
const lockers: Locker[] = [];
const backends: RedlockBackend[] = [];

/** A locker on its own connections to every node (as a separate process would have). */
function newLocker(nodes: readonly string[] = REDLOCK_NODE_URLS): Locker {
  const backend = createRedlockBackend({ nodes, prefix });
  const locker = createLocker(backend);
  lockers.push(locker);
  backends.push(backend);
  return locker;
}

beforeAll(() => {
  admins = REDLOCK_NODE_URLS.map((url) => new Redis(url, { maxRetriesPerRequest: 2 }));
});

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    await admin.quit();
  }
});

describe('fair waiting (Redlock, 5 nodes)', () => {
  fairLineCases({
    newLocker: () => newLocker(),
    lineLengths: (key) =>
      Promise.all(admins.map((admin) => admin.zcard(backends[0]!.keysOf(key).queue))),
    nodes: REDLOCK_NODE_URLS.length,
    holderKeepsEntry: true,
    // Its first attempt, one when each node first confirms its subscription (at most), and the
    // one a release message starts.
    maxAttempts: 2 + REDLOCK_NODE_URLS.length,
    entryTtlMs: REDLOCK_ENTRY_TTL_MS,
    unique,
  });

  it('with two of five nodes down, a waiter still waits for the release message', async () => {
    const key = unique('nodes-down');
    const down = await Promise.all([closedPort(), closedPort()]);
    const nodes = [...REDLOCK_NODE_URLS.slice(0, 3), ...down.map((p) => `redis://127.0.0.1:${p}`)];
    await countingAttempts(key, async (attempts) => {
      const held = await newLocker(nodes).acquire(key);
      const waiting = newLocker(nodes).acquire(key, { waitMs: 10_000 });
      await delay(300);
      await held.release();
      const lease = await waiting;
      // The nodes that are down never confirm a subscription, nor end a wait (before, each wait
      // ended at once and the waiter attempted 218 times in this case).
      expect(attempts.get(lease.owner)).toBeLessThanOrEqual(2 + 3);
      await lease.release();
    });
  });
});
