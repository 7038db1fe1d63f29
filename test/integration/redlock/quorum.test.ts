/**
 * Redlock votes on real Redis nodes (`scripts/services.sh up redlock`), each reached through a
 * test-controlled TCP proxy so that a node can be refused (cut), blackholed or healed without
 * touching the shared servers: scenarios T08 (a minority down), T09 step 3 (a node restarted
 * empty), 2 of 5 and 3 of 5 nodes down, and fencing tokens across nodes whose counters diverged.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker, type Locker, QuorumError } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_PORT_BASE } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const prefix = `fencelock-it-redlock-${randomBytes(4).toString('hex')}`;
const NODE_TIMEOUT_MS = 100;
let proxies: TcpProxy[];
let admins: Redis[];
const lockers: Locker[] = [];

beforeAll(async () => {
  proxies = await Promise.all(
    [1, 2, 3, 4, 5].map((n) => startTcpProxy({ targetPort: REDLOCK_PORT_BASE + n })),
  );
  admins = [1, 2, 3, 4, 5].map((n) => new Redis(REDLOCK_PORT_BASE + n, '127.0.0.1'));
});

afterEach(async () => {
  await Promise.all(lockers.splice(0).map((l) => l.close()));
  await Promise.all(proxies.map((p) => p.restore()));
});

afterAll(async () => {
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
  await Promise.all(proxies.map((p) => p.close()));
});

/** A locker on Redlock over the first `count` nodes (through their proxies). */
function redlockOn(
  count: 3 | 5,
  nodeTimeoutMs = NODE_TIMEOUT_MS,
): { locker: Locker; backend: RedlockBackend } {
  const backend = createRedlockBackend({
    nodes: proxies.slice(0, count).map((p) => p.url),
    prefix,
    nodeTimeoutMs,
  });
  const locker = createLocker(backend, { ttlMs: 3000 });
  lockers.push(locker);
  return { locker, backend };
}

/** The raw lock value of `key` on node n (1-based), read directly. */
async function valueOn(backend: RedlockBackend, n: number, key: string): Promise<string | null> {
  return admins[n - 1]!.get(backend.keysOf(key).lock);
}

describe('Redlock with nodes down (scenario T08)', () => {
  it('grants with one of three refused, and releases on the others', async () => {
    const { locker, backend } = redlockOn(3);
    proxies[2]!.cut();
    const started = performance.now();
    const lease = await locker.acquire('t08:refused');
    const ended = performance.now();
    // Validity = ttlMs − elapsed − drift, counted from the start of the winning attempt (between
    // `started` and `ended`); drift = 3000 × 0.01 + 2 ms.
    expect(lease.expiresAt).toBeGreaterThanOrEqual(started + 3000 - 32);
    expect(lease.expiresAt).toBeLessThanOrEqual(ended + 3000 - 32);
    for (const n of [1, 2]) {
      expect(await valueOn(backend, n, 't08:refused')).toBe(`${lease.owner}:${lease.fencingToken}`);
    }
    expect(await lease.release()).toBe('released');
    for (const n of [1, 2]) expect(await valueOn(backend, n, 't08:refused')).toBeNull();
  });

  it('a blackholed node costs at most the per-node timeout', async () => {
    const { locker, backend } = redlockOn(3);
    await (await locker.acquire('t08:warm')).release(); // connections open before the fault
    proxies[2]!.blackhole();
    const started = performance.now();
    const lease = await locker.acquire('t08:blackholed');
    const tookMs = performance.now() - started;
    // Decided as soon as two of three granted: the silent node is not even waited for; a release
    // waits for it, but never past the per-node timeout (loose bounds: a shared machine).
    expect(tookMs).toBeLessThan(NODE_TIMEOUT_MS + 400);
    for (const n of [1, 2]) {
      expect(await valueOn(backend, n, 't08:blackholed')).toBe(
        `${lease.owner}:${lease.fencingToken}`,
      );
    }
    const releaseStarted = performance.now();
    expect(await lease.release()).toBe('released');
    expect(performance.now() - releaseStarted).toBeLessThan(NODE_TIMEOUT_MS + 400);
  });

  it('two of three down: QuorumError listing every node, and nothing left behind', async () => {
    // A generous per-node timeout: a reply that came after it (a loaded machine) could set the
    // key after the withdrawal, and it would then stay until its TTL.
    const { locker, backend } = redlockOn(3, 1000);
    proxies[1]!.cut();
    proxies[2]!.cut();
    const error = await locker.acquire('t08:minority', { waitMs: 1000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumError);
    const nodes = (error as QuorumError).nodes;
    expect(nodes.map((n) => n.node).sort()).toEqual(
      proxies
        .slice(0, 3)
        .map((p) => `127.0.0.1:${p.port}`)
        .sort(),
    );
    const byNode = new Map(nodes.map((n) => [n.node, n.outcome]));
    expect(byNode.get(`127.0.0.1:${proxies[0]!.port}`)).toBe('ok');
    expect(['error', 'timeout']).toContain(byNode.get(`127.0.0.1:${proxies[1]!.port}`));
    expect(['error', 'timeout']).toContain(byNode.get(`127.0.0.1:${proxies[2]!.port}`));
    // The partial grant on R1 was rolled back (by the withdrawal of the last vote, which may
    // finish just after the acquire gave up at its deadline).
    const rolledBackBy = performance.now() + 2000;
    while ((await valueOn(backend, 1, 't08:minority')) !== null) {
      if (performance.now() > rolledBackBy) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(await valueOn(backend, 1, 't08:minority')).toBeNull();

    await proxies[1]!.restore();
    await proxies[2]!.restore();
    const lease = await locker.acquire('t08:minority', { waitMs: 5000 });
    // R1's counter ran ahead during the failed votes; a node that granted after the vote was
    // decided (or answered too late) gets the combined token in the background, so wait for
    // it briefly. Every node that holds the key holds it with the combined token; a majority
    // holds it (a node whose connection was still coming back may have missed the grant).
    const expected = `${lease.owner}:${lease.fencingToken}`;
    const values = () => Promise.all([1, 2, 3].map((n) => valueOn(backend, n, 't08:minority')));
    const deadline = performance.now() + 2000;
    while ((await values()).some((v) => v !== expected)) {
      if (performance.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const held = await values();
    expect(held.filter((v) => v !== null && v !== expected)).toEqual([]);
    expect(held.filter((v) => v === expected).length).toBeGreaterThanOrEqual(2);
    expect(await lease.release()).toBe('released');
  });

  it('five nodes: two down still grants; three down is a QuorumError with all five outcomes', async () => {
    const { locker, backend } = redlockOn(5);
    proxies[3]!.cut();
    proxies[4]!.cut();
    const lease = await locker.acquire('five:nodes');
    expect(await lease.release()).toBe('released');

    proxies[2]!.cut();
    const error = await locker.tryAcquire('five:nodes').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QuorumError);
    expect((error as QuorumError).nodes).toHaveLength(5);
    expect((error as QuorumError).nodes.filter((n) => n.outcome === 'ok')).toHaveLength(2);
    for (const n of [1, 2]) expect(await valueOn(backend, n, 'five:nodes')).toBeNull();
  });
});

describe('Redlock and a node that lost its data (scenario T09 step 3)', () => {
  it('another client cannot get a majority; the holder keeps and extends its lease', async () => {
    const a = redlockOn(3);
    const b = redlockOn(3);
    const lease = await a.locker.acquire('t09:restart', { ttlMs: 5000 });
    // R1 restarted empty, as far as this key is concerned.
    await admins[0]!.del(a.backend.keysOf('t09:restart').lock);
    expect(await b.locker.tryAcquire('t09:restart')).toBeNull();
    expect(lease.isHeld).toBe(true);
    await lease.extend(5000);
    expect(lease.isHeld).toBe(true);
    expect(await lease.release()).toBe('released');
  });
});

describe('Redlock fencing tokens when node counters diverge', () => {
  it('stay strictly increasing as the majority moves between nodes', async () => {
    const { locker, backend } = redlockOn(3);
    const key = 'tokens:diverge';
    const tokens: bigint[] = [];
    const grant = async () => {
      const lease = await locker.acquire(key);
      tokens.push(lease.fencingToken);
      expect(await lease.release()).toBe('released');
      return lease;
    };
    // R3 misses five grants: its counter stays behind.
    proxies[2]!.cut();
    for (let i = 0; i < 5; i++) await grant();
    await proxies[2]!.restore();
    // Now R1 is away: R2 (ahead) and R3 (behind) grant; the token is R2's, and R3 is settled to it.
    proxies[0]!.cut();
    const settled = await locker.acquire(key);
    tokens.push(settled.fencingToken);
    const fence = backend.keysOf(key).fence;
    expect(BigInt((await admins[2]!.get(fence)) ?? '0')).toBe(settled.fencingToken);
    expect(await valueOn(backend, 3, key)).toBe(`${settled.owner}:${settled.fencingToken}`);
    expect(await settled.release()).toBe('released');
    await proxies[0]!.restore();
    // R2 away: R1 and R3 grant; still past every earlier token.
    proxies[1]!.cut();
    await grant();
    await proxies[1]!.restore();
    await grant();
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
  });
});
