/**
 * The flash-sale demo end to end: spawn the CLI compiled from the sources (`node <build>/packages/cli/dist/cli/main.js
 * demo flash-sale … --json`), parse the JSON on the last stdout line, and check the figures. Runs
 * against the embedded store and the Redis, etcd, ZooKeeper and PostgreSQL started by
 * `scripts/services.sh`; no engine is mocked. The stock is written through the guard of the
 * store's engine (RedisFence on Redis, PgFence on PostgreSQL, a fenced SQLite row otherwise);
 * a run drops its stock when it ends, so that the guard records the tokens and refuses a stale
 * write is checked on the demo's inventory itself, in `flash-sale-inventory.test.ts`.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLocker } from '../../packages/fencelock/src/index.js';
import { ETCD_ENDPOINTS, PG_URL, REDIS_URL, ZK_HOSTS } from '../helpers/engines.js';
import {
  type CliRun,
  type PrivateBuild,
  privateBuild,
  runBuiltCli,
} from '../helpers/private-build.js';
import { openAdmin } from '../helpers/zookeeper.js';
import { children, removeNamespace } from '../integration/zookeeper/support.js';

const KEY = 'flash-sale:stock';
const SMALL = ['--workers', '4', '--stock', '30', '--attempts', '300'];

interface Figures {
  store: string;
  inventory: 'sqlite' | 'redis' | 'postgres';
  workers: number;
  lock: boolean;
  attempts: number;
  stock: number;
  sold: number;
  stockLeft: number;
  oversold: number;
  soldMatchesStockDrop: boolean;
  staleRejected: number;
  throughputPerSec: number;
  waitP50Ms: number | null;
  waitP99Ms: number | null;
  tokensIncreasing: boolean | null;
  ok: boolean;
}

function runDemo(args: readonly string[], timeoutMs = 45_000): Promise<CliRun> {
  return runBuiltCli(build!, ['demo', 'flash-sale', ...args], timeoutMs);
}

function lastJson(run: CliRun): Figures {
  const lines = run.stdout.trimEnd().split('\n');
  const last = lines.at(-1) ?? '';
  try {
    return JSON.parse(last) as Figures;
  } catch {
    throw new Error(`last stdout line is not JSON: ${JSON.stringify(last)}\nstderr: ${run.stderr}`);
  }
}

async function lastToken(store: string): Promise<bigint> {
  const locker = createLocker(store);
  try {
    return (await locker.inspect(KEY)).lastFencingToken;
  } finally {
    await locker.close();
  }
}

/**
 * The token of a fresh grant of KEY (acquired and released at once). Tokens grow with every
 * grant, so two of these around a run bound the grants made in between.
 */
async function grantToken(store: string): Promise<bigint> {
  const locker = createLocker(store);
  try {
    const lease = await locker.acquire(KEY, { waitMs: 10_000 });
    await lease.release();
    return lease.fencingToken;
  } finally {
    await locker.close();
  }
}

/** Names of this database's schemas made by flash-sale runs (each run drops its own). */
async function flashSaleSchemas(): Promise<string[]> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    const r = await client.query<{ nspname: string }>(
      "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'fencelock\\_flash\\_sale\\_%' ORDER BY 1",
    );
    return r.rows.map((row) => row.nspname);
  } finally {
    await client.end();
  }
}

/** Keys of flash-sale runs' stock on the Redis of REDIS_URL (each run deletes its own). */
async function flashSaleKeys(): Promise<string[]> {
  const client = new Redis(REDIS_URL);
  try {
    return (await client.keys('fencelock:flash-sale:*')).sort();
  } finally {
    client.disconnect();
  }
}

/** What every correct locked run of SMALL must show. */
function expectCorrectLockedRun(
  run: CliRun,
  store: string,
  inventory: Figures['inventory'],
): Figures {
  expect(run.code, run.stderr).toBe(0);
  const r = lastJson(run);
  expect(r.store).toBe(store);
  expect(r.inventory).toBe(inventory);
  expect(r.lock).toBe(true);
  expect(r.workers).toBe(4);
  expect(r.attempts).toBe(300);
  expect(r.stock).toBe(30);
  expect(r.oversold).toBe(0);
  expect(r.sold).toBe(30);
  expect(r.stockLeft).toBe(0);
  expect(r.soldMatchesStockDrop).toBe(true);
  expect(r.tokensIncreasing).toBe(true);
  // One lease per attempt and a generous TTL: no lease can go stale, so nothing is refused.
  expect(r.staleRejected).toBe(0);
  expect(r.throughputPerSec).toBeGreaterThan(0);
  expect(r.waitP50Ms).toEqual(expect.any(Number));
  expect(r.waitP99Ms).toBeGreaterThanOrEqual(r.waitP50Ms!);
  expect(r.ok).toBe(true);
  return r;
}

let dir: string;
let build: PrivateBuild | undefined;

beforeAll(async () => {
  build = await privateBuild('flash-sale');
  dir = mkdtempSync(join(tmpdir(), 'fencelock-flash-sale-test-'));
}, 120_000);

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
  build?.remove();
});

describe('demo flash-sale', () => {
  it('sells exactly the stock on the embedded store, with strictly increasing tokens', async () => {
    const path = join(dir, 'embedded', 'locks.db');
    const store = `sqlite:${path}`;
    const run = await runDemo([...SMALL, '--store', store, '--json']);
    expectCorrectLockedRun(run, store, 'sqlite');
    // The workers really locked through the given store: one grant (token) per attempt. The
    // file's one counter has issued them all (the key keeps nothing once free): a fresh grant's
    // token comes after them.
    expect(existsSync(path)).toBe(true);
    expect(await grantToken(store)).toBeGreaterThan(300n);
  });

  it('sells exactly the stock on Redis, written through RedisFence, with strictly increasing tokens', async () => {
    const before = await lastToken(REDIS_URL);
    const keysBefore = await flashSaleKeys();
    const run = await runDemo([...SMALL, '--store', REDIS_URL, '--json']);
    expectCorrectLockedRun(run, REDIS_URL, 'redis');
    expect((await lastToken(REDIS_URL)) - before).toBeGreaterThanOrEqual(300n);
    // The run removed its stock, log and fence records.
    expect(await flashSaleKeys()).toEqual(keysBefore);
  });

  it('sells exactly the stock on PostgreSQL, written through PgFence, with strictly increasing tokens', async () => {
    const before = await grantToken(PG_URL);
    const schemasBefore = await flashSaleSchemas();
    const run = await runDemo([...SMALL, '--store', PG_URL, '--json']);
    expectCorrectLockedRun(run, PG_URL, 'postgres');
    // The workers really locked through PostgreSQL: one grant per attempt, then this one.
    expect((await grantToken(PG_URL)) - before).toBeGreaterThanOrEqual(301n);
    // The run dropped its schema (stock, log and fence table).
    expect(await flashSaleSchemas()).toEqual(schemasBefore);
  });

  it('sells exactly the stock on the etcd cluster, with strictly increasing tokens', async () => {
    const hosts = ETCD_ENDPOINTS.map((e) => e.replace('http://', '')).join(',');
    const store = `etcd://${hosts}/flash-sale-test-${process.pid}`;
    expectCorrectLockedRun(await runDemo([...SMALL, '--store', store, '--json']), store, 'sqlite');
  });

  it('sells exactly the stock on the ZooKeeper ensemble, with strictly increasing tokens', async () => {
    const namespace = `flash-sale-test-${process.pid}`;
    const store = `zk://${ZK_HOSTS}/${namespace}`;
    const admin = await openAdmin();
    try {
      expect(await children(admin, `/${namespace}`)).toEqual([]);
      expectCorrectLockedRun(
        await runDemo([...SMALL, '--store', store, '--json']),
        store,
        'sqlite',
      );
      // The workers locked in that namespace, and every contender node is gone.
      expect(await admin.exists(`/${namespace}/locks`, false)).toBeDefined();
      for (const dir of await children(admin, `/${namespace}/locks`)) {
        expect(await children(admin, `/${namespace}/locks/${dir}`)).toEqual([]);
      }
    } finally {
      try {
        await removeNamespace(admin, namespace);
      } finally {
        admin.close();
      }
    }
  });

  it('oversells with --no-lock, and says so', async () => {
    const run = await runDemo([
      ...SMALL,
      '--store',
      `sqlite:${join(dir, 'nolock.db')}`,
      '--no-lock',
      '--json',
    ]);
    expect(run.code, run.stderr).toBe(0);
    const r = lastJson(run);
    expect(r.lock).toBe(false);
    expect(r.inventory).toBe('sqlite');
    expect(r.attempts).toBe(300);
    expect(r.oversold).toBeGreaterThan(0);
    expect(r.sold).toBe(30 + r.oversold);
    expect(r.soldMatchesStockDrop).toBe(false);
    expect(r.tokensIncreasing).toBeNull();
    expect(r.waitP50Ms).toBeNull();
    expect(run.stderr).toMatch(/OVERSOLD by \d+/);
  });

  it.each([
    ['Redis', REDIS_URL, 'redis'],
    ['PostgreSQL', PG_URL, 'postgres'],
  ] as const)(
    'oversells with --no-lock on %s too (unfenced writes to its stock)',
    async (_, store, inventory) => {
      const run = await runDemo([...SMALL, '--store', store, '--no-lock', '--json']);
      expect(run.code, run.stderr).toBe(0);
      const r = lastJson(run);
      expect(r.lock).toBe(false);
      expect(r.inventory).toBe(inventory);
      expect(r.attempts).toBe(300);
      expect(r.oversold).toBeGreaterThan(0);
      expect(r.sold).toBe(30 + r.oversold);
      expect(r.soldMatchesStockDrop).toBe(false);
      expect(r.tokensIncreasing).toBeNull();
    },
  );

  it('prints a table and a verdict without --json', async () => {
    const run = await runDemo(['--workers', '2', '--stock', '5', '--attempts', '20']);
    expect(run.code, run.stderr).toBe(0);
    for (const row of ['attempts', 'sold', 'stock left', 'oversold', 'stale writes rejected']) {
      expect(run.stdout).toContain(row);
    }
    expect(run.stdout).toMatch(
      /│ stock kept in\s+│ SQLite file, fenced by its row \(fence_token\)\s+│/,
    );
    expect(run.stdout).toMatch(/│ oversold\s+│ 0\s+│/);
    expect(run.stdout).toMatch(/│ fencing tokens strictly increasing\s+│ yes\s+│/);
    expect(run.stdout.trimEnd().split('\n').at(-1)).toMatch(/^Correct: sold 5 of 5/);
  });

  it.each([
    [['--workers', '0'], '--workers'],
    [['--stock', '-3'], '--stock'],
    [['--attempts', '1.5'], '--attempts'],
    [['--ttl', 'soon'], '--ttl'],
    [['--store', 'ftp://x'], '--store'],
    [['--store', 'redis://127.0.0.1:6390?bogus=1'], '--store'],
  ])('rejects %j with exit code 2 and a message naming %s', async (args, option) => {
    const run = await runDemo([...args, '--json']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(option);
  });

  it("exits non-zero with the worker's error when the store is unreachable", async () => {
    const run = await runDemo(['--workers', '3', '--store', 'redis://127.0.0.1:1', '--json']);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/worker \d+ failed: redis/);
  });
});
