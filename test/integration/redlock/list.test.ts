/**
 * `list` on Redlock (redlock/listing.ts), beyond the contract: each node's keyspace in turn, one
 * SCAN (COUNT pageSize) per page and one script call per node, every held object once although
 * every node keeps a copy; a holder listed only where a quorum of nodes shows the same owner and
 * token (a majority for locks and readers, the permit quorum for semaphores), its ttlMs the
 * quorum-th longest time left among them; a node whose SCAN fails skipped, and too many a
 * QuorumError; a cursor from elsewhere refused before any command. Layouts the votes would make
 * are written on chosen nodes directly.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import {
  createRedlockBackend,
  type RedlockBackend,
} from '../../../packages/fencelock/src/backends/redlock/index.js';
import type { ListedLock, ListPage } from '../../../packages/fencelock/src/core/backend.js';
import {
  createLocker,
  InvalidArgumentError,
  type Lease,
  QuorumError,
} from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS } from '../../helpers/engines.js';

const prefix = `fencelock-it-list-${randomBytes(4).toString('hex')}`;
const admins = REDLOCK_NODE_URLS.map((url) => new Redis(url));
const cleanups: (() => Promise<unknown>)[] = [];

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  for (const admin of admins) {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
});

interface Sent {
  readonly node: number;
  readonly name: string;
}

/** A backend on its own ioredis clients, whose commands are recorded in `sent`. */
function recordedBackend(): { backend: RedlockBackend; sent: Sent[] } {
  const sent: Sent[] = [];
  const clients = REDLOCK_NODE_URLS.map((url, node) => {
    const client = new Redis(url);
    const original = client.sendCommand.bind(client);
    client.sendCommand = ((command: { name: string }) => {
      sent.push({ node, name: command.name });
      return original(command as never);
    }) as typeof client.sendCommand;
    cleanups.push(async () => client.quit());
    return client;
  });
  const backend = createRedlockBackend({ nodes: clients, prefix });
  return { backend, sent };
}

async function pages(
  backend: RedlockBackend,
  listPrefix: string,
  pageSize: number,
  onPage?: (page: ListPage) => void,
): Promise<ListedLock[]> {
  const entries: ListedLock[] = [];
  let cursor: string | null = null;
  do {
    const page: ListPage = await backend.list({ prefix: listPrefix, cursor, pageSize });
    onPage?.(page);
    entries.push(...page.entries);
    cursor = page.cursor;
  } while (cursor !== null);
  return entries;
}

const idOf = (e: { key: string; mode: string }) => `${e.mode} ${e.key}`;

/** Write a writer's lease `<owner>:<counter>` on the nodes given, with the PX of each. */
async function writeLease(key: string, owner: string, counter: string, pxByNode: number[][]) {
  for (const [node, px] of pxByNode) {
    await admins[node!]!.set(`${prefix}:{${key}}:lock`, `${owner}:${counter}`, 'PX', px!);
  }
}

describe('Redlock list', () => {
  it('every node in turn, one SCAN per page and one script per node; each object once', async () => {
    const { backend, sent } = recordedBackend();
    const locker = createLocker(backend);
    const other = createLocker(createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix }));
    cleanups.push(
      () => locker.close(),
      () => other.close(),
    );
    const u = 'paging:';
    const leases: Lease[] = [];
    const expected: string[] = [];
    for (let i = 0; i < 30; i++) {
      leases.push(await locker.acquire(`${u}w${i}`, { ttlMs: 30_000 }));
      expected.push(`write ${u}w${i}`);
    }
    for (let i = 0; i < 5; i++) {
      leases.push(await locker.semaphore(`${u}p${i}`, { permits: 2 }).acquire({ ttlMs: 30_000 }));
      leases.push(await other.semaphore(`${u}p${i}`, { permits: 2 }).acquire({ ttlMs: 30_000 }));
      expected.push(`permits ${u}p${i}`);
      leases.push(await locker.acquire(`${u}r${i}`, { ttlMs: 30_000, mode: 'read' }));
      leases.push(await other.acquire(`${u}r${i}`, { ttlMs: 30_000, mode: 'read' }));
      expected.push(`read ${u}r${i}`);
    }
    // Votes settle late nodes in the background: let them.
    await new Promise((resolve) => setTimeout(resolve, 200));
    sent.splice(0);
    const nodes = new Set<string>();
    const entries = await pages(backend, u, 4, (page) => {
      expect(page.entries.length).toBeLessThanOrEqual(4);
      const commands = sent.splice(0);
      expect(commands.filter((c) => c.name === 'scan')).toHaveLength(1);
      for (let node = 0; node < 5; node++) {
        const scripts = commands.filter((c) => c.node === node && c.name === 'evalsha');
        expect(scripts.length).toBeLessThanOrEqual(1);
      }
      if (page.cursor !== null) nodes.add(page.cursor.split(':')[1]!);
    });
    expect(entries.map(idOf).sort()).toEqual([...expected].sort());
    expect([...nodes].sort()).toEqual(['0', '1', '2', '3', '4']);
    const read = entries.find((e) => e.key === `${u}r0`)!;
    expect(read.holders.map((h) => h.fencingToken)).toEqual(
      leases
        .filter((l) => l.key === `${u}r0`)
        .map((l) => l.fencingToken)
        .sort((a, b) => (a < b ? -1 : 1)),
    );
    await Promise.all(leases.map((l) => l.release()));
    expect(await pages(backend, u, 10)).toEqual([]);
  });

  it('a holder only where a quorum shows the same owner and token; ttlMs the quorum-th longest', async () => {
    const backend = createRedlockBackend({ nodes: REDLOCK_NODE_URLS, prefix });
    cleanups.push(() => backend.close());
    const u = 'quorum:';
    // Two nodes of five: no majority.
    await writeLease(`${u}two`, 'aa', '7', [
      [0, 30_000],
      [1, 30_000],
    ]);
    // Three nodes, but one with another token: two agree.
    await writeLease(`${u}split`, 'bb', '7', [
      [2, 30_000],
      [3, 30_000],
    ]);
    await writeLease(`${u}split`, 'bb', '8', [[4, 30_000]]);
    // Four nodes (not the first): held until the third longest (20 s) runs out.
    await writeLease(`${u}four`, 'cc', '9', [
      [1, 10_000],
      [2, 20_000],
      [3, 30_000],
      [4, 40_000],
    ]);
    // A semaphore of 2 permits on 5 nodes needs 4 of them: 'dd' on 4, 'ee' on 3.
    const now = Date.now();
    for (let node = 0; node < 5; node++) {
      const base = `${prefix}:{${u}sem}:semaphore`;
      await admins[node]!.set(`${base}:permits`, '2', 'PX', 30_000);
      if (node < 4) {
        await admins[node]!.zadd(`${base}:holders`, now + 30_000, 'dd');
        await admins[node]!.hset(`${base}:tokens`, 'dd', '11');
      }
      if (node >= 2) {
        await admins[node]!.zadd(`${base}:holders`, now + 30_000, 'ee');
        await admins[node]!.hset(`${base}:tokens`, 'ee', '12');
      }
      await admins[node]!.pexpire(`${base}:holders`, 30_000);
      await admins[node]!.pexpire(`${base}:tokens`, 30_000);
    }
    const entries = await pages(backend, u, 3);
    expect(entries.map(idOf).sort()).toEqual([`permits ${u}sem`, `write ${u}four`]);
    const four = entries.find((e) => e.key === `${u}four`)!;
    expect(four.holders).toEqual([{ owner: 'cc', fencingToken: 9n, ttlMs: expect.any(Number) }]);
    expect(four.holders[0]!.ttlMs).toBeGreaterThan(19_000);
    expect(four.holders[0]!.ttlMs).toBeLessThanOrEqual(20_000);
    const sem = entries.find((e) => e.mode === 'permits')!;
    expect(sem).toMatchObject({ permits: 2, waiters: 0 });
    expect(sem.holders.map((h) => [h.owner, h.fencingToken])).toEqual([['dd', 11n]]);
  });

  it('a node whose SCAN fails is skipped; more than a quorum can spare is a QuorumError', async () => {
    const u = 'down:';
    await writeLease(`${u}k`, 'ff', '5', [
      [1, 30_000],
      [2, 30_000],
      [3, 30_000],
    ]);
    const unreachable = 'redis://127.0.0.1:1';
    const oneDown = createRedlockBackend({
      nodes: [unreachable, ...REDLOCK_NODE_URLS.slice(1)],
      prefix,
    });
    cleanups.push(() => oneDown.close());
    const entries = await pages(oneDown, u, 10);
    expect(entries.map(idOf)).toEqual([`write ${u}k`]);
    const threeDown = createRedlockBackend({
      nodes: [unreachable, unreachable, unreachable, ...REDLOCK_NODE_URLS.slice(3)],
      prefix,
    });
    cleanups.push(() => threeDown.close());
    await expect(pages(threeDown, u, 10)).rejects.toThrow(QuorumError);
  });

  it('a cursor from elsewhere is an InvalidArgumentError before any command', async () => {
    const { backend, sent } = recordedBackend();
    for (const cursor of [
      'x',
      'l:key',
      'r:12',
      'rc:0:12',
      'rl:5:0:0',
      'rl:0:32:0',
      'rl:0:0:-1',
      'rl:0:0:12:not-a-listed-name',
      `rl:0:0:12:${prefix}:{k}:fence`,
    ]) {
      const refused = await backend
        .list({ prefix: '', cursor, pageSize: 10 })
        .catch((e: unknown) => e);
      expect(refused, cursor).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).argument).toBe('cursor');
    }
    expect(sent).toEqual([]);
  });
});
