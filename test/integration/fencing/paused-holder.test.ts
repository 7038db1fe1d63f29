/**
 * The paused holder (Kleppmann's GC-pause scenario), on every backend's tokens: a child process
 * takes a lock with a short TTL (watchdog on) and writes through both guards; it is frozen with
 * SIGSTOP past its TTL; this process is granted the lock (a newer token) and writes through the
 * guards; the child is resumed with SIGCONT and writes again with its old token. Every one of
 * its late writes must be refused with StaleTokenError naming both tokens — the Redis register,
 * the PostgreSQL register and a PostgreSQL transaction of the caller's own SQL — and the
 * resources must keep the newer holder's writes.
 *
 * The frozen holder runs the package compiled from the sources into a private folder (not `dist/`,
 * which other tests may rebuild), so the test process itself is never frozen. Engines are the
 * ones of `scripts/services.sh`; nothing is mocked.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Cluster, Redis } from 'ioredis';
import pg from 'pg';
import { createClient } from 'redis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { PgFence, RedisFence } from '../../../packages/fencelock/src/fencing/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import {
  CLUSTER_PORT_BASE,
  CLUSTER_URL,
  PG_URL,
  REDIS_PORT,
  REDIS_URL,
  REDLOCK_NODE_URLS,
  SENTINEL_PORT_BASE,
  SENTINEL_URL,
} from '../../helpers/engines.js';
import { type PrivateBuild, privateBuild, ROOT } from '../../helpers/private-build.js';
import { settledWithin } from '../../helpers/promises.js';
import { openAdmin } from '../../helpers/zookeeper.js';
import { adminClient, etcdUrl } from '../etcd/support.js';
import { removeNamespace, zkUrl } from '../zookeeper/support.js';

const run = randomBytes(4).toString('hex');
/** One name for this run's etcd / ZooKeeper namespaces, Redis key prefix and PostgreSQL schemas. */
const tag = `fencelock_it_paused_${run}`;
const fenceSchema = tag;
const lockSchema = `${tag}_locks`;
const advisorySchema = `${tag}_advisory`;
const LOG = `"${fenceSchema}".holder_log`;

const redis = new Redis(REDIS_PORT, '127.0.0.1');
const pool = new pg.Pool({ connectionString: PG_URL, max: 4 });
// An idle connection ended by the server (another test's fault injection) must not crash the file.
pool.on('error', () => undefined);
const redisFence = new RedisFence(redis, `${tag}:fenced`);
const pgFence = new PgFence(pool, { schema: fenceSchema });
const lockers: Locker[] = [];
/** node-redis clients of this process's lockers (a backend leaves a client you pass open). */
const nodeRedisClients: { isOpen: boolean; close(): Promise<void> }[] = [];
const children: ChildProcess[] = [];
let build: PrivateBuild | undefined;
let sqliteDir: string | undefined;

interface BackendCase {
  readonly backend: string;
  /** The holder's TTL, ms. */
  readonly ttlMs: number;
  readonly store: () => string;
  /** Both lockers drive the Redis of `store` through node-redis clients instead of ioredis. */
  readonly client?: 'node-redis';
}

/**
 * The store of each backend, with the holder's TTL (etcd leases are whole seconds). PostgreSQL's
 * advisory mode behaves otherwise while the holder is paused: see its own test below.
 */
const BACKENDS: readonly BackendCase[] = [
  { backend: 'sqlite', ttlMs: 1500, store: () => `sqlite:${join(sqliteDir!, 'locks.db')}` },
  { backend: 'redis', ttlMs: 1500, store: () => REDIS_URL },
  { backend: 'redis via node-redis', ttlMs: 1500, store: () => REDIS_URL, client: 'node-redis' },
  { backend: 'redis-sentinel', ttlMs: 1500, store: () => SENTINEL_URL },
  { backend: 'redis-cluster', ttlMs: 1500, store: () => CLUSTER_URL },
  {
    backend: 'redlock',
    ttlMs: 1500,
    store: () => `redlock://${REDLOCK_NODE_URLS.map((u) => u.replace('redis://', '')).join(',')}`,
  },
  { backend: 'etcd', ttlMs: 2000, store: () => etcdUrl(tag) },
  { backend: 'zookeeper', ttlMs: 1500, store: () => zkUrl(tag) },
  { backend: 'postgres', ttlMs: 1500, store: () => `${PG_URL}?schema=${lockSchema}` },
];

/** A locker on `store` in this process, closed after the file. */
async function lockerOf(store: string, client: BackendCase['client']): Promise<Locker> {
  let locker: Locker;
  if (client === 'node-redis') {
    const nodeRedis = createClient({ url: store });
    nodeRedis.on('error', () => undefined);
    nodeRedisClients.push(nodeRedis);
    await nodeRedis.connect();
    locker = createLocker(createRedisBackend({ client: nodeRedis }), { ttlMs: 10_000 });
  } else {
    locker = createLocker(store, { ttlMs: 10_000 });
  }
  lockers.push(locker);
  return locker;
}

beforeAll(async () => {
  build = await privateBuild('paused-holder');
  sqliteDir = mkdtempSync(join(tmpdir(), 'fencelock-paused-holder-'));
  await pgFence.read('set-up'); // creates the fence schema and table
  await pool.query(`CREATE TABLE ${LOG} (
    seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, tag text NOT NULL)`);
}, 120_000);

afterEach(() => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
});

afterAll(async () => {
  await Promise.allSettled(lockers.map((l) => l.close()));
  await Promise.allSettled(nodeRedisClients.map((c) => (c.isOpen ? c.close() : undefined)));
  // Each engine's leftovers separately: one engine out of reach (another test's fault
  // injection) must not keep the others' clean-up, or the closing of this file's clients, from
  // running.
  const cleanUps = await Promise.allSettled([
    (async () => {
      const etcd = adminClient();
      try {
        await etcd.delete().prefix(`${tag}/`);
      } finally {
        etcd.close();
      }
    })(),
    (async () => {
      const zk = await openAdmin();
      try {
        await removeNamespace(zk, tag);
      } finally {
        zk.close();
      }
    })(),
    ...[REDIS_URL, ...REDLOCK_NODE_URLS].map(async (url) => {
      const node = new Redis(url, { maxRetriesPerRequest: 1 });
      try {
        const keys = await node.keys(`*${tag}*`);
        if (keys.length > 0) await node.del(...keys);
      } finally {
        node.disconnect();
      }
    }),
    (async () => {
      // Whichever data node is the primary now (another test may have failed it over).
      const primary = new Redis({
        sentinels: [1, 2, 3].map((n) => ({ host: '127.0.0.1', port: SENTINEL_PORT_BASE + n })),
        name: 'fencelock',
        maxRetriesPerRequest: 1,
      });
      try {
        const keys = await primary.keys(`*${tag}*`);
        if (keys.length > 0) await primary.del(...keys);
      } finally {
        primary.disconnect();
      }
    })(),
    (async () => {
      const cluster = new Cluster([{ host: '127.0.0.1', port: CLUSTER_PORT_BASE + 1 }], {
        redisOptions: { maxRetriesPerRequest: 1 },
      });
      try {
        for (const node of cluster.nodes('master')) {
          for (const key of await node.keys(`*${tag}*`)) await cluster.del(key);
        }
      } finally {
        cluster.disconnect();
      }
    })(),
    pool.query(`DROP SCHEMA IF EXISTS "${fenceSchema}" CASCADE`),
    pool.query(`DROP SCHEMA IF EXISTS "${lockSchema}" CASCADE`),
    pool.query(`DROP SCHEMA IF EXISTS "${advisorySchema}" CASCADE`),
  ]);
  redis.disconnect();
  await pool.end();
  build?.remove();
  if (sqliteDir !== undefined) rmSync(sqliteDir, { recursive: true, force: true });
  const failures = cleanUps.flatMap((c) => (c.status === 'rejected' ? [String(c.reason)] : []));
  if (failures.length > 0) {
    console.warn(`paused holder: data of run ${tag} left behind: ${failures.join('; ')}`);
  }
}, 60_000);

/**
 * The holder process. It acquires `FL_KEY` on `FL_STORE` (through a node-redis client when
 * `FL_CLIENT` is `node-redis`; TTL `FL_TTL_MS`, watchdog on), writes `A` with its
 * token through the Redis register, the PostgreSQL register and a PostgreSQL transaction that
 * appends to the log table, and prints its grant with those outcomes. On the stdin line `write`
 * it writes `A-late` the same three ways — whether or not it still believes it holds the lock,
 * as a paused process does — and prints the outcomes. It prints `lost` when its lease signal
 * aborts, and closes everything on `exit`.
 */
const HOLDER = `
import { createInterface } from 'node:readline';
import { Redis } from 'ioredis';
import pg from 'pg';
const env = process.env;
const { createLocker } = await import(env.FL_BUILD + '/index.js');
const { PgFence, RedisFence } = await import(env.FL_BUILD + '/fencing/index.js');
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const redis = new Redis(env.FL_REDIS_URL);
const pool = new pg.Pool({ connectionString: env.FL_PG_URL, max: 2 });
pool.on('error', () => undefined);
const redisFence = new RedisFence(redis, env.FL_PREFIX);
const pgFence = new PgFence(pool, { schema: env.FL_SCHEMA });
let nodeRedis;
let store = env.FL_STORE;
if (env.FL_CLIENT === 'node-redis') {
  const { createClient } = await import('redis');
  const { createRedisBackend } = await import(env.FL_BUILD + '/backends/redis/index.js');
  nodeRedis = createClient({ url: env.FL_STORE });
  nodeRedis.on('error', () => undefined);
  await nodeRedis.connect();
  store = createRedisBackend({ client: nodeRedis });
}
const locker = createLocker(store, { ttlMs: Number(env.FL_TTL_MS), autoRenew: true });
const lease = await locker.acquire(env.FL_KEY, { waitMs: 20000 });
const token = lease.fencingToken;
const resource = env.FL_RESOURCE;
lease.signal.addEventListener('abort', () => {
  const r = lease.signal.reason;
  out({ event: 'lost', name: r?.name ?? String(r), reason: r?.reason });
});
async function attempt(write) {
  try {
    await write();
    return { ok: true };
  } catch (e) {
    const tokens = e?.code === 'ERR_STALE_TOKEN'
      ? { attempted: String(e.attemptedToken), current: String(e.currentToken) }
      : { message: String(e?.message ?? e) };
    return { ok: false, name: e?.name, code: e?.code, ...tokens };
  }
}
const writeAll = async (value) => ({
  redis: await attempt(() => redisFence.write(resource, token, value)),
  pg: await attempt(() => pgFence.write(resource, token, value)),
  pgTransaction: await attempt(() => pgFence.transaction(resource, token, (tx) =>
    tx.query('INSERT INTO ' + env.FL_LOG + ' (resource, token, tag) VALUES ($1, $2, $3)',
      [resource, String(token), value]))),
});
out({ event: 'granted', token: String(token), ttlMs: lease.ttlMs, writes: await writeAll('A') });
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'write') {
    const abortedBefore = lease.signal.aborted;
    out({ event: 'wrote', abortedBefore, writes: await writeAll('A-late') });
  } else if (line === 'exit') {
    await locker.close();
    await nodeRedis?.close();
    redis.disconnect();
    await pool.end();
    out({ event: 'closed' });
    break;
  }
}
`;

interface Outcome {
  readonly ok: boolean;
  readonly name?: string;
  readonly code?: string;
  readonly attempted?: string;
  readonly current?: string;
  readonly message?: string;
}

interface HolderEvent {
  readonly event: 'granted' | 'wrote' | 'lost' | 'closed';
  readonly token?: string;
  readonly ttlMs?: number;
  readonly writes?: { redis: Outcome; pg: Outcome; pgTransaction: Outcome };
  readonly abortedBefore?: boolean;
  readonly name?: string;
  readonly reason?: string;
}

interface Holder {
  readonly child: ChildProcess;
  /** The first event named `name` (events already printed count), or a timeout error. */
  next(name: HolderEvent['event'], timeoutMs: number): Promise<HolderEvent>;
}

function spawnHolder(
  store: string,
  key: string,
  ttlMs: number,
  resource: string,
  client?: BackendCase['client'],
): Holder {
  const child = spawn(process.execPath, ['--input-type=module', '-e', HOLDER], {
    cwd: ROOT,
    env: {
      ...process.env,
      FL_BUILD: build!.dir,
      FL_STORE: store,
      FL_KEY: key,
      FL_TTL_MS: String(ttlMs),
      FL_RESOURCE: resource,
      FL_REDIS_URL: REDIS_URL,
      FL_PREFIX: `${tag}:fenced`,
      FL_PG_URL: PG_URL,
      FL_SCHEMA: fenceSchema,
      FL_LOG: LOG,
      FL_CLIENT: client ?? '',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  const events: HolderEvent[] = [];
  const waiters = new Set<() => void>();
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      events.push(JSON.parse(line) as HolderEvent);
    } catch {
      stderr += `stdout: ${line}\n`; // not one of its events; kept for the error message
      return;
    }
    for (const wake of waiters) wake();
  });
  // The holder may be gone when a line is written to it; that shows in the events it printed.
  child.stdin?.on('error', () => undefined);
  const next = (name: HolderEvent['event'], timeoutMs: number) =>
    new Promise<HolderEvent>((resolve, reject) => {
      const check = () => {
        const found = events.find((e) => e.event === name);
        if (found === undefined) return false;
        clearTimeout(timer);
        waiters.delete(wake);
        resolve(found);
        return true;
      };
      const wake = () => void check();
      const timer = setTimeout(() => {
        waiters.delete(wake);
        reject(new Error(`holder printed no '${name}' within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      if (!check()) waiters.add(wake);
    });
  return { child, next };
}

async function logOf(resource: string): Promise<{ token: bigint; tag: string }[]> {
  const r = await pool.query<{ token: string; tag: string }>(
    `SELECT token::text AS token, tag FROM ${LOG} WHERE resource = $1 ORDER BY seq`,
    [resource],
  );
  return r.rows.map((row) => ({ token: BigInt(row.token), tag: row.tag }));
}

describe('a holder paused past its TTL writes with its old token', () => {
  it.each(BACKENDS)(
    '$backend: every late write is refused with StaleTokenError and the newer writes stay',
    async ({ backend, ttlMs, store, client }) => {
      const key = `paused-holder:${tag}:${backend}`;
      const resource = `${backend}:${run}`;
      const holder = spawnHolder(store(), key, ttlMs, resource, client);
      const granted = await holder.next('granted', 30_000);
      const tokenA = BigInt(granted.token!);
      // While it holds the lock, the holder's writes pass all three guards.
      expect(granted.writes).toEqual({
        redis: { ok: true },
        pg: { ok: true },
        pgTransaction: { ok: true },
      });
      expect(await redisFence.read(resource)).toEqual({ token: tokenA, value: 'A' });

      const locker = await lockerOf(store(), client);
      const waiting = locker.acquire(key, { waitMs: 30_000 });
      // The watchdog keeps the holder's lease past its TTL while it runs.
      expect(await settledWithin(waiting, granted.ttlMs! + 500)).toBe(false);

      holder.child.kill('SIGSTOP');
      const lease = await waiting;
      const tokenB = lease.fencingToken;
      expect(tokenB).toBeGreaterThan(tokenA);
      await redisFence.write(resource, tokenB, 'B');
      await pgFence.write(resource, tokenB, 'B');
      await pgFence.transaction(resource, tokenB, (tx) =>
        tx.query(`INSERT INTO ${LOG} (resource, token, tag) VALUES ($1, $2, 'B')`, [
          resource,
          tokenB.toString(),
        ]),
      );

      // The frozen holder wakes up with a write already queued on its stdin.
      holder.child.stdin!.write('write\n');
      holder.child.kill('SIGCONT');
      const wrote = await holder.next('wrote', 20_000);
      const stale = {
        ok: false,
        name: 'StaleTokenError',
        code: 'ERR_STALE_TOKEN',
        attempted: String(tokenA),
        current: String(tokenB),
      };
      expect(wrote.writes).toEqual({ redis: stale, pg: stale, pgTransaction: stale });
      expect(await redisFence.read(resource)).toEqual({ token: tokenB, value: 'B' });
      expect(await pgFence.read(resource)).toEqual({ token: tokenB, value: 'B' });
      expect(await logOf(resource)).toEqual([
        { token: tokenA, tag: 'A' },
        { token: tokenB, tag: 'B' },
      ]);
      // The holder learns it lost the lease; the new holder still holds it.
      const lost = await holder.next('lost', 15_000);
      expect(lost.name).toBe('LockLostError');
      expect(lease.isHeld).toBe(true);
      expect(await lease.release()).toBe('released');
      holder.child.stdin!.write('exit\n');
      await holder.next('closed', 15_000);
      console.info(
        `paused holder (${backend}): tokens ${tokenA} → ${tokenB}; the holder ${wrote.abortedBefore ? 'already knew' : 'did not yet know'} it had lost the lease when it wrote`,
      );
    },
  );
});

describe('PostgreSQL advisory mode: a paused holder keeps the lock', () => {
  /**
   * Advisory mode holds the lock as a session-level advisory lock on the holder's own
   * connection, and the server knows no TTL: the TTL is enforced by the holder's backend, which
   * gives the lock back when it was not renewed in time. A paused process runs no code, so it
   * gives nothing back, and its kernel keeps the TCP connection up (it still answers the
   * server's keepalives): the server keeps the lock for as long as the pause lasts, and nobody
   * else is granted. So no newer token exists when the holder wakes up, and its late write is
   * rightly accepted: fencing refuses a write only once a newer holder's token reached the
   * resource. (A dead or cut-off holder is another matter: the server then drops the lock with
   * the connection, and the next holder's writes fence the old one out.)
   */
  it('the waiter is not granted while the holder is paused past its TTL; the resumed holder’s write is accepted', async () => {
    const store = `${PG_URL}?schema=${advisorySchema}&mode=advisory`;
    const ttlMs = 1500;
    const key = `paused-holder:${tag}:postgres-advisory`;
    const resource = `postgres-advisory:${run}`;
    const holder = spawnHolder(store, key, ttlMs, resource);
    const granted = await holder.next('granted', 30_000);
    const tokenA = BigInt(granted.token!);
    const ok = { ok: true };
    expect(granted.writes).toEqual({ redis: ok, pg: ok, pgTransaction: ok });

    const locker = createLocker(store, { ttlMs: 10_000 });
    lockers.push(locker);
    const waiting = locker.acquire(key, { waitMs: 40_000 });
    expect(await settledWithin(waiting, ttlMs + 500)).toBe(false);

    holder.child.kill('SIGSTOP');
    // Three TTLs without a renewal: the server still holds the lock on the paused connection.
    expect(await settledWithin(waiting, 3 * ttlMs)).toBe(false);
    const info = await locker.inspect(key);
    expect(info.holder?.fencingToken).toBe(tokenA);

    holder.child.stdin!.write('write\n');
    holder.child.kill('SIGCONT');
    const wrote = await holder.next('wrote', 20_000);
    // No newer token has reached the resources: the late writes pass every guard.
    expect(wrote.writes).toEqual({ redis: ok, pg: ok, pgTransaction: ok });
    expect(await redisFence.read(resource)).toEqual({ token: tokenA, value: 'A-late' });
    expect(await pgFence.read(resource)).toEqual({ token: tokenA, value: 'A-late' });
    expect(await logOf(resource)).toEqual([
      { token: tokenA, tag: 'A' },
      { token: tokenA, tag: 'A-late' },
    ]);

    // Once the holder lets go, the waiter gets a newer token, which fences the old one out.
    holder.child.stdin!.write('exit\n');
    await holder.next('closed', 15_000);
    const lease = await waiting;
    const tokenB = lease.fencingToken;
    expect(tokenB).toBeGreaterThan(tokenA);
    await redisFence.write(resource, tokenB, 'B');
    await expect(redisFence.write(resource, tokenA, 'A-later')).rejects.toMatchObject({
      code: 'ERR_STALE_TOKEN',
      attemptedToken: tokenA,
      currentToken: tokenB,
    });
    expect(await redisFence.read(resource)).toEqual({ token: tokenB, value: 'B' });
    expect(await lease.release()).toBe('released');
    console.info(
      `paused holder (postgres advisory): token ${tokenA} kept through the pause; the holder ${wrote.abortedBefore ? 'had already given the lock back' : 'still held the lock'} when it wrote; next token ${tokenB}`,
    );
  });
});
