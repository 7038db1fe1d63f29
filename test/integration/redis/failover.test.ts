/**
 * Sentinel failover reproduced for real (fault F4 of docs/guarantees.md): the replication stream
 * from the primary to its replica is dropped with nftables (so the kernel cannot deliver it later),
 * A acquires on the primary, the primary is killed with SIGKILL, the Sentinels promote the replica,
 * which never saw A's key, and B acquires the same key: a double grant. The lock alone cannot
 * prevent it; the fenced resource (a `RedisFence` on the standalone Redis, which is never faulted)
 * rejects A's late write, because B's token carries the newer failover epoch. With `minReplicas=1`
 * the same schedule refuses A's acquire instead.
 *
 * Needs root and `nft` (installed by scripts/install-engines.sh). The nft table is deleted only
 * after the promotion: removing the rule earlier lets the dead primary's socket retransmit the
 * write (the pitfall of fault F4). The Sentinel topology is rebuilt before and after.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import { RedisFence } from '../../../packages/fencelock/src/fencing/index.js';
import {
  BackendError,
  createLocker,
  type Locker,
  StaleTokenError,
} from '../../../packages/fencelock/src/index.js';
import {
  REDIS_PORT,
  SENTINEL_DATA_PORT_BASE,
  SENTINEL_PORT_BASE,
  SENTINEL_URL,
} from '../../helpers/engines.js';
import { SERVICES_DIR } from '../../helpers/etcd-cluster.js';

const SERVICES_SH = fileURLToPath(new URL('../../../scripts/services.sh', import.meta.url));
const PRIMARY_PORT = SENTINEL_DATA_PORT_BASE + 1;
const REPLICA_PORT = SENTINEL_DATA_PORT_BASE + 2;
const TABLE = `fencelock_f4_${process.pid}`;
const prefix = `fencelock-it-failover-${randomBytes(3).toString('hex')}`;
const lockers: Locker[] = [];

function services(...args: string[]): void {
  execFileSync(SERVICES_SH, args, { stdio: 'ignore' });
}

/** A fresh topology: sdata1 primary, sdata2 replica, three Sentinels. */
function freshTopology(): void {
  services('down', 'sentinel');
  services('up', 'sentinel');
}

function nft(...args: string[]): void {
  execFileSync('nft', args, { stdio: 'ignore' });
}

/** Drop the primary → replica replication stream (output of the primary's port to the replica's socket). */
async function cutReplication(): Promise<void> {
  const primary = new Redis(PRIMARY_PORT, '127.0.0.1');
  const list = String(await primary.call('CLIENT', 'LIST', 'TYPE', 'replica'));
  primary.disconnect();
  const replicaSocketPort = /addr=127\.0\.0\.1:(\d+)/.exec(list)?.[1];
  expect(replicaSocketPort, `replica connection in CLIENT LIST: ${list}`).toBeDefined();
  nft('add', 'table', 'ip', TABLE);
  nft('add', 'chain', 'ip', TABLE, 'out', '{ type filter hook output priority 0; }');
  nft(
    ...`add rule ip ${TABLE} out ip daddr 127.0.0.1 tcp sport ${PRIMARY_PORT} tcp dport ${replicaSocketPort} drop`.split(
      ' ',
    ),
  );
}

function healReplication(): void {
  try {
    nft('delete', 'table', 'ip', TABLE);
  } catch {
    // not there
  }
}

function killPrimary(): void {
  const pid = Number(readFileSync(join(SERVICES_DIR, 'sdata1.pid'), 'utf8'));
  process.kill(pid, 'SIGKILL');
}

/** Wait until a Sentinel names the replica as the primary. */
async function waitForPromotion(timeoutMs = 30_000): Promise<number> {
  const started = performance.now();
  const sentinel = new Redis(SENTINEL_PORT_BASE + 1, '127.0.0.1');
  try {
    for (;;) {
      const [, port] = (await sentinel.call(
        'SENTINEL',
        'GET-MASTER-ADDR-BY-NAME',
        'fencelock',
      )) as string[];
      if (Number(port) === REPLICA_PORT) return performance.now() - started;
      if (performance.now() - started > timeoutMs) throw new Error('no failover within 30 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    sentinel.disconnect();
  }
}

function locker(query = ''): Locker {
  const l = createLocker(`${SENTINEL_URL}?prefix=${prefix}${query}`, { ttlMs: 30_000 });
  lockers.push(l);
  return l;
}

beforeEach(() => {
  freshTopology();
}, 60_000);

afterAll(async () => {
  healReplication();
  await Promise.all(lockers.map((l) => l.close()));
  freshTopology();
}, 60_000);

describe('Redis Sentinel failover (fault F4)', () => {
  it('double grant after a failover that lost the key; the fenced resource rejects the stale writer', async () => {
    const resource = new Redis(REDIS_PORT, '127.0.0.1');
    const fence = new RedisFence(resource, `${prefix}:fenced`);
    try {
      const a = locker();
      const b = locker();
      // Warm both clients up (they know the primary and its epoch) before the fault.
      await (await a.acquire('warm-a')).release();
      await (await b.acquire('warm-b')).release();

      await cutReplication();
      const leaseA = await a.acquire('sale');
      killPrimary();
      const failoverMs = await waitForPromotion();
      healReplication();

      const leaseB = await b.acquire('sale', { waitMs: 15_000 });
      // Both believe they hold the lock: the double grant the lock cannot prevent.
      const doubleGrants = leaseA.isHeld && !leaseB.signal.aborted ? 1 : 0;
      expect(doubleGrants).toBe(1);
      // The promoted primary's failover epoch puts B's token above A's.
      expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);

      await fence.write('stock', leaseB.fencingToken, 'sold by B');
      const stale = await fence.write('stock', leaseA.fencingToken, 'sold by A').catch((e) => e);
      expect(stale).toBeInstanceOf(StaleTokenError);
      expect((stale as StaleTokenError).attemptedToken).toBe(leaseA.fencingToken);
      expect((stale as StaleTokenError).currentToken).toBe(leaseB.fencingToken);
      expect(await fence.read('stock')).toEqual({ token: leaseB.fencingToken, value: 'sold by B' });
      console.info(
        `F4: failover in ${Math.round(failoverMs)} ms; double grants ${doubleGrants}; A token ${leaseA.fencingToken}, B token ${leaseB.fencingToken}; A's write rejected`,
      );
      expect(await leaseB.release()).toBe('released');
    } finally {
      await resource.del(`${prefix}:fenced:stock`);
      resource.disconnect();
    }
  }, 90_000);

  it('with minReplicas=1 the same schedule refuses the acquire: the replica never acknowledged it', async () => {
    const a = locker('&minReplicas=1&replicaTimeoutMs=200');
    await (await a.acquire('warm')).release();
    await cutReplication();
    try {
      const error = await a.acquire('sale', { waitMs: 0 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BackendError);
      expect(String((error as Error).message)).toMatch(/only 0 of 1 replicas acknowledged/);
      // Released on the primary: nothing for a failover to lose, nothing left locked.
      const primary = new Redis(PRIMARY_PORT, '127.0.0.1');
      expect(await primary.exists(`${prefix}:{sale}:lock`)).toBe(0);
      primary.disconnect();
    } finally {
      healReplication();
    }
  }, 60_000);
});

/** Counts the calls of an election watch's `onChange`. */
function counter() {
  const c = {
    calls: 0,
    onChange: () => {
      c.calls += 1;
    },
    async until(n: number, ms = 3_000) {
      const deadline = Date.now() + ms;
      while (c.calls < n) {
        if (Date.now() > deadline) throw new Error(`${c.calls} calls, expected ${n}`);
        await delay(10);
      }
    },
  };
  return c;
}

/** Until `test()` holds, or fails after `ms`. */
async function eventually(test: () => Promise<boolean>, ms = 3_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await test())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await delay(20);
  }
}

function candidate(key: string, value: string): AttemptRequest {
  return {
    key,
    owner: randomBytes(16).toString('hex'),
    ttlMs: 30_000,
    mode: 'write',
    autoRenew: false,
    willWait: true,
    election: { value },
  };
}

/**
 * An election watch across a Sentinel failover (two `SENTINEL FAILOVER`s, there and back; the
 * topology is rebuilt around every test of this file, since a failover raises its epoch for good).
 */
describe('Redis election across a Sentinel failover', () => {
  it('a watch is notified after a failover, and terms keep rising', async () => {
    const sentinel = new Redis(SENTINEL_PORT_BASE + 1, '127.0.0.1');
    const primaryPort = async () =>
      Number(
        ((await sentinel.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', 'fencelock')) as string[])[1],
      );
    const original = await primaryPort();
    const watching = createRedisBackend({ url: `${SENTINEL_URL}?prefix=${prefix}` } as never);
    const granting = createRedisBackend({ url: `${SENTINEL_URL}?prefix=${prefix}` } as never);
    const key = `sentinel:${randomBytes(3).toString('hex')}`;
    const seen = counter();
    const watch = await watching.watchElection(key, seen.onChange);
    seen.calls = 0; // the subscriber's first connection is told too
    const a = candidate(key, 'a');
    const first = (await granting.attempt(a)) as { token: bigint };
    await seen.until(1);
    await granting.release({ key, owner: a.owner, fencingToken: first.token, election: true });
    await seen.until(2);

    // SENTINEL FAILOVER (no kill) until accepted (a replica still syncing is refused), then until
    // the Sentinels name the new primary.
    const failover = async (from: number) => {
      await eventually(
        () =>
          sentinel.call('SENTINEL', 'FAILOVER', 'fencelock').then(
            () => true,
            () => false,
          ),
        30_000,
      );
      await eventually(async () => (await primaryPort()) !== from, 30_000);
    };
    try {
      await failover(original);
      // The subscriber follows the new primary (reconnected by ioredis, which tells the watch, or
      // still on the demoted node, which the replication stream brings the messages to).
      // Wait until the granting backend reaches the new primary, then a grant there notifies.
      const b = candidate(key, 'b');
      let second: { granted: boolean; token?: bigint } | undefined;
      await eventually(async () => {
        second = (await granting.attempt(b).catch(() => undefined)) as typeof second;
        return second?.granted === true;
      }, 30_000);
      await delay(1_000); // reconnections settled: the next call is the message
      const before = seen.calls;
      await granting.abandon(b);
      await seen.until(before + 1, 5_000);
      expect(second!.token!).toBeGreaterThan(first.token);
    } finally {
      watch.stop();
      await Promise.all([watching.close(), granting.close()]);
      sentinel.disconnect();
    }
  }, 90_000);
});
