/**
 * `fencelock ls` end to end on the embedded store: keys held by this process's locker (a lock,
 * two readers, two permits of a semaphore of the same name) are listed with their mode, holders
 * and waiters, as text and as JSON Lines; the prefix, --limit and bad usage; PostgreSQL's
 * advisory mode, whose listing reads the server's advisory locks.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker, type Lease } from '../../../packages/fencelock/src/index.js';
import { PG_URL } from '../../helpers/engines.js';
import { buildCli, runCli, sqliteStore, uniqueKey } from './support.js';

const store = sqliteStore();
const locker = createLocker(store.url);
let removeBuild: (() => void) | undefined;

beforeAll(async () => {
  removeBuild = await buildCli();
}, 120_000);
afterAll(async () => {
  await locker.close();
  removeBuild?.();
  await store.close();
});

describe('fencelock ls', () => {
  it('lists each held key under the prefix with mode, holders and waiters, as JSON Lines and text', async () => {
    const prefix = `${uniqueKey('ls')}:`;
    const writer = await locker.acquire(`${prefix}job`, { ttlMs: 20_000 });
    const readers = [
      await locker.acquire(`${prefix}catalog`, { ttlMs: 20_000, mode: 'read' }),
      await locker.acquire(`${prefix}catalog`, { ttlMs: 20_000, mode: 'read' }),
    ];
    const semaphore = locker.semaphore(`${prefix}job`, { permits: 3 });
    const permits = [
      await semaphore.acquire({ ttlMs: 20_000 }),
      await semaphore.acquire({ ttlMs: 20_000 }),
    ];
    const outside = await locker.acquire(`${prefix.slice(0, -1)}-other`, { ttlMs: 20_000 });
    const all: Lease[] = [writer, ...readers, ...permits, outside];
    try {
      const json = await runCli(['ls', prefix, '--store', store.url, '--json']);
      expect([json.code, json.stderr]).toEqual([0, '']);
      const entries = json.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line));
      const tokensOf = (leases: Lease[]) =>
        leases.map((l) => ({ owner: l.owner, fencingToken: String(l.fencingToken) }));
      const strip = (holders: { owner: string; fencingToken: string; ttlMs: number }[]) =>
        holders.map(({ owner, fencingToken }) => ({ owner, fencingToken }));
      expect(entries.map((e) => [e.key, e.mode])).toEqual([
        [`${prefix}catalog`, 'read'],
        [`${prefix}job`, 'write'],
        [`${prefix}job`, 'permits'],
      ]);
      expect(strip(entries[0].holders)).toEqual(tokensOf(readers));
      expect(strip(entries[1].holders)).toEqual(tokensOf([writer]));
      expect(entries[2]).toMatchObject({ permits: 3, waiters: 0 });
      expect(strip(entries[2].holders)).toEqual(tokensOf(permits));
      for (const entry of entries) {
        for (const holder of entry.holders) {
          expect(holder.ttlMs).toBeGreaterThan(0);
          expect(holder.ttlMs).toBeLessThanOrEqual(20_000);
        }
      }

      const text = await runCli(['ls', prefix, '--store', store.url]);
      expect(text.code).toBe(0);
      const lines = text.stdout.trim().split('\n');
      expect(lines).toHaveLength(3);
      const quoted = JSON.stringify(`${prefix}job`).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      expect(lines[1]).toMatch(
        new RegExp(
          `^${quoted} write waiters 0: ${writer.owner} token ${writer.fencingToken} ttl \\d+ ms$`,
        ),
      );
      expect(lines[2]).toMatch(/ permits\/3 waiters 0: /);

      const limited = await runCli(['ls', prefix, '--store', store.url, '--limit', '2']);
      expect(limited.stdout.trim().split('\n')).toHaveLength(2);
    } finally {
      await Promise.all(all.map((l) => l.release()));
    }
    const empty = await runCli(['ls', prefix, '--store', store.url]);
    expect([empty.code, empty.stdout]).toEqual([0, '']);
  });

  it('refuses bad usage with exit 2 before touching the store', async () => {
    for (const args of [
      ['ls', 'x'.repeat(1025)],
      ['ls', '--limit', '0'],
      ['ls', '--page-size', '1001'],
      ['ls', '--store', 'nosuch://x'],
    ]) {
      const result = await runCli([
        ...args,
        ...(args.includes('--store') ? [] : ['--store', store.url]),
      ]);
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stdout).toBe('');
    }
  });

  it("lists PostgreSQL's advisory mode: the keys whose holder's session holds the lock", async () => {
    const url = `${PG_URL}?mode=advisory`;
    const advisory = createLocker(url);
    try {
      const prefix = `${uniqueKey('ls-advisory')}:`;
      const lease = await advisory.acquire(`${prefix}job`, { ttlMs: 20_000 });
      const listed = await runCli(['ls', prefix, '--json', '--store', url]);
      expect(listed.code).toBe(0);
      expect(
        listed.stdout
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line)),
      ).toEqual([
        {
          key: `${prefix}job`,
          mode: 'write',
          holders: [
            {
              owner: lease.owner,
              fencingToken: String(lease.fencingToken),
              ttlMs: expect.any(Number),
            },
          ],
          waiters: 0,
        },
      ]);
      await lease.release();
    } finally {
      await advisory.close();
    }
  });
});
