// Every contender of the bench: fencelock on each store, the peers (real packages through their
// public APIs, at default and at tuned settings) and the raw ceiling (the least protocol a lock
// can cost on that engine, done by hand).
//
// A contender's `create(ctx)` runs inside a worker process and returns an instance:
//   acquire(key, ttlMs) → handle        waits until granted (the peers' own retry settings apply)
//   release(handle)
//   holdRenewing(key, ttlMs) → { release(), lost() }   a lease kept alive in the background
//                                                         (only for the many-leases workload)
//   acquirePermit(key, permits, ttlMs) → handle   one of `permits` holders of key (semaphore)
//   acquireAll(keys, ttlMs) → handle               every key of `keys` or none (multikey)
//   close()
// A contender has the methods of the workloads it runs in (`workloads`), and `release(handle)`
// releases whatever its acquire returned.
// Curator is a Java program (bench/curator/CuratorBench.java) that answers the same jobs.
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { sleep } from './stats.mjs';

const require = createRequire(import.meta.url);

/** Lease length of every contender, ms: fencelock's default, set on the peers for parity. */
export const TTL_MS = 30_000;

/**
 * The raw semaphore's acquire, the least a Redis semaphore with expiring permits costs (the shape
 * of redis-semaphore's script, with the time from Redis): one sorted set per key, a member per
 * holder scored by its grant time.
 * KEYS[1] the set; ARGV[1] permits, ARGV[2] the holder's id, ARGV[3] ttl ms. Returns 1 or 0.
 */
const ZSET_SEMAPHORE_ACQUIRE = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Permits whose holder did not release within the TTL come back.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0`;

/** Compare-and-delete, the raw ceiling's release (and what every Redis lock library sends). */
const COMPARE_AND_DELETE = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;

const randomId = () => randomBytes(16).toString('hex');
const jitter = (maxMs) => sleep(Math.random() * maxMs);

/** Redis nodes of a store: one for `redis`, five (or the partial-quorum set) for `redlock`. */
function redisNodes(ctx, store) {
  if (ctx.nodes) return ctx.nodes;
  return store === 'redis' ? [ctx.endpoints.redis] : ctx.endpoints.redlock;
}

async function ioredisClients(nodes, tuned) {
  const { Redis } = await import('ioredis');
  // Tuned: a command to a node that is down fails at once instead of waiting in the offline
  // queue through 20 reconnection attempts (about 10 s), which a Redlock vote would wait for.
  const options = tuned ? { enableOfflineQueue: false, maxRetriesPerRequest: 0 } : {};
  const clients = nodes.map((n) => new Redis({ host: n.host, port: n.port, ...options }));
  for (const client of clients) client.on('error', () => undefined);
  if (tuned) {
    // Without the offline queue a command sent before the connection is up fails: wait for
    // the live nodes, which on a busy machine can take seconds (64 clients connecting at once);
    // a node that is down refuses the connection at once ('error') and stays down.
    await Promise.all(
      clients.map(
        (c) =>
          new Promise((resolve) => {
            c.once('ready', resolve);
            c.once('error', resolve);
            setTimeout(resolve, 10_000).unref();
          }),
      ),
    );
  }
  return clients;
}

// --- fencelock ----------------------------------------------------------------------------------

function fencelockUrl(ctx, store) {
  const { endpoints: e, prefix } = ctx;
  const hostPort = (n) => `${n.host}:${n.port}`;
  switch (store) {
    case 'redis':
      return `redis://${hostPort(e.redis)}?prefix=${prefix}`;
    case 'redlock':
      return `redlock://${redisNodes(ctx, store).map(hostPort).join(',')}?prefix=${prefix}`;
    case 'etcd':
      return `etcd://${e.etcd.join(',')}/${prefix}`;
    case 'zookeeper':
      return `zk://${e.zookeeper.join(',')}/${prefix}`;
    case 'postgres':
      // Contended, two connections per locker at most (ctx.pgPoolSize): 64 clients must fit the
      // shared test server's max_connections (300) beside other users, and a client never runs
      // more than two queries at once there (an acquire or release, and a renewal).
      return `postgres://${e.postgres.user}@${hostPort(e.postgres)}/fencelock?schema=${ctx.pgSchema}${ctx.pgPoolSize ? `&poolSize=${ctx.pgPoolSize}` : ''}`;
    case 'sqlite':
      return `sqlite:${join(ctx.tmpDir, 'fencelock.db')}`;
    default:
      throw new Error(`no store ${store}`);
  }
}

/** Renewals fencelock reports on its diagnostics channel (a client-side count). */
export const fencelockRenewals = { ok: 0, failed: 0 };

async function createFencelock(ctx, store) {
  const { createLocker, CHANNELS } = await import(pathToFileURL(join(ctx.dist, 'index.js')).href);
  if (ctx.countRenewals) {
    const { subscribe } = await import('node:diagnostics_channel');
    subscribe(CHANNELS.renew, (event) => {
      if (event.ok) fencelockRenewals.ok += 1;
      else fencelockRenewals.failed += 1;
    });
  }
  if (store === 'sqlite') mkdirSync(ctx.tmpDir, { recursive: true });
  const locker = createLocker(fencelockUrl(ctx, store));
  const semaphores = new Map();
  return {
    acquire: (key, ttlMs) => locker.acquire(key, { ttlMs }),
    // A Semaphore holds no state and makes no call until an acquire: one per key is reused.
    acquirePermit(key, permits, ttlMs) {
      let semaphore = semaphores.get(key);
      if (!semaphore) {
        semaphore = locker.semaphore(key, { permits });
        semaphores.set(key, semaphore);
      }
      return semaphore.acquire({ ttlMs });
    },
    acquireAll: (keys, ttlMs) => locker.acquireAll(keys, { ttlMs }),
    // A Lease or a MultiLease.
    release: (lease) => lease.release(),
    async holdRenewing(key, ttlMs) {
      const lease = await locker.acquire(key, { ttlMs });
      return { release: () => lease.release(), lost: () => lease.signal.aborted };
    },
    close: () => locker.close(),
  };
}

// --- raw ceilings -------------------------------------------------------------------------------

/**
 * ioredis by hand: `SET key value NX PX ttl`, then `EVALSHA` compare-and-delete. On Redlock the
 * same on every node in parallel, granted on a majority (withdrawn everywhere otherwise). While
 * the key is held it polls again after 0–2 ms.
 */
async function createRawRedis(ctx, store) {
  const clients = await ioredisClients(redisNodes(ctx, store), true);
  const sha = createHash('sha1').update(COMPARE_AND_DELETE).digest('hex');
  await Promise.all(clients.map((c) => c.script('LOAD', COMPARE_AND_DELETE).catch(() => 0)));
  const quorum = Math.floor(clients.length / 2) + 1;
  const setNx = (client, key, value, ttlMs) =>
    client.set(key, value, 'PX', ttlMs, 'NX').then(
      (reply) => reply === 'OK',
      () => false,
    );
  const releaseAll = (key, value) =>
    Promise.all(clients.map((c) => c.evalsha(sha, 1, key, value).catch(() => 0)));
  return {
    async acquire(name, ttlMs) {
      const key = `${ctx.prefix}:${name}`;
      const value = randomId();
      for (;;) {
        if (clients.length === 1) {
          if (await setNx(clients[0], key, value, ttlMs)) return { key, value };
        } else {
          const votes = await Promise.all(clients.map((c) => setNx(c, key, value, ttlMs)));
          if (votes.filter(Boolean).length >= quorum) return { key, value };
          await releaseAll(key, value);
        }
        await jitter(2);
      }
    },
    async release({ key, value }) {
      if (clients.length === 1) await clients[0].evalsha(sha, 1, key, value);
      else await releaseAll(key, value);
    },
    close: () => Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect()))),
  };
}

/**
 * A Redis semaphore by hand (one node): `EVALSHA` of ZSET_SEMAPHORE_ACQUIRE, `ZREM` to release.
 * While every permit is held it polls again after 0–2 ms, as the raw lock does. No line, so no
 * fairness: what the least protocol costs, not a fair semaphore.
 */
async function createRawRedisSemaphore(ctx) {
  const [client] = await ioredisClients([ctx.endpoints.redis], true);
  const sha = await client.script('LOAD', ZSET_SEMAPHORE_ACQUIRE);
  return {
    async acquirePermit(name, permits, ttlMs) {
      const key = `${ctx.prefix}:${name}`;
      const value = randomId();
      for (;;) {
        if ((await client.evalsha(sha, 1, key, permits, value, ttlMs)) === 1) return { key, value };
        await jitter(2);
      }
    },
    async release({ key, value }) {
      await client.zrem(key, value);
    },
    close: () => client.quit().catch(() => client.disconnect()),
  };
}

/**
 * etcd by hand, the least a lease-bound lock costs: one session lease granted up front, then per
 * pair one transaction (put the key with the lease if it does not exist) and one
 * compare-and-delete transaction.
 */
async function createRawEtcd(ctx) {
  const { Etcd3 } = await import('etcd3');
  const client = new Etcd3({ hosts: ctx.endpoints.etcd.map((h) => `http://${h}`) });
  const ns = client.namespace(`${ctx.prefix}-raw/`);
  const lease = ns.lease(Math.ceil(TTL_MS / 1000));
  lease.on('lost', () => undefined);
  const leaseId = await lease.grant();
  return {
    async acquire(key) {
      const owner = randomId();
      for (;;) {
        const put = ns.put(key).value(owner).lease(leaseId);
        const txn = await ns.if(key, 'Create', '==', 0).then(put).commit();
        if (txn.succeeded) return { key, owner };
        await jitter(2);
      }
    },
    async release({ key, owner }) {
      await ns.if(key, 'Value', '==', owner).then(ns.delete().key(key)).commit();
    },
    async close() {
      await lease.revoke().catch(() => undefined);
      client.close();
    },
  };
}

/** A connected native ZooKeeper client on `hosts` (session timeout `timeoutMs`). */
export async function connectZookeeper(hosts, timeoutMs = TTL_MS) {
  const ZooKeeper = require('zookeeper');
  const zk = new ZooKeeper({
    connect: hosts.join(','),
    timeout: timeoutMs,
    debug_level: ZooKeeper.constants.ZOO_LOG_LEVEL_ERROR,
  });
  zk.setLogger(() => undefined);
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('ZooKeeper connect timed out')), 15_000);
    zk.once('connect', () => {
      clearTimeout(timer);
      resolve();
    });
    zk.init({});
  });
  return { zk, ZooKeeper };
}

/**
 * ZooKeeper by hand, the least a fair (queue) lock costs, as Curator's recipe does it: create an
 * ephemeral sequential node under the key, list the children (ours is the lowest when the key is
 * free), delete the node to release. Not a waiting lock (it polls): uncontended only.
 */
async function createRawZookeeper(ctx) {
  const { zk, ZooKeeper } = await connectZookeeper(ctx.endpoints.zookeeper);
  const base = `/${ctx.prefix}-raw`;
  const made = new Set();
  const ensureDir = async (dir) => {
    if (made.has(dir)) return;
    await new Promise((resolve, reject) =>
      zk.mkdirp(dir, (error) => (error ? reject(error) : resolve())),
    );
    made.add(dir);
  };
  return {
    async acquire(key) {
      const dir = `${base}/${key}`;
      await ensureDir(dir);
      const path = await zk.create(`${dir}/n-`, '', ZooKeeper.constants.ZOO_EPHEMERAL_SEQUENTIAL);
      const name = path.slice(dir.length + 1);
      for (;;) {
        const children = await zk.get_children(dir, false);
        if (children.sort()[0] === name) return path;
        await jitter(2);
      }
    },
    release: (path) => zk.delete_(path, -1),
    async close() {
      zk.close();
    },
  };
}

/**
 * PostgreSQL by hand: `INSERT … ON CONFLICT DO NOTHING` of a row per held key (with an expiry from
 * the server's clock), `DELETE … WHERE owner` to release; a pool as large as fencelock's default.
 */
async function createRawPostgres(ctx) {
  const { default: pg } = await import('pg');
  const e = ctx.endpoints.postgres;
  const pool = new pg.Pool({
    host: e.host,
    port: e.port,
    user: e.user,
    database: 'fencelock',
    max: 10,
  });
  pool.on('error', () => undefined);
  const table = `${ctx.pgSchema}_raw.locks`;
  await pool.query(`CREATE SCHEMA IF NOT EXISTS ${ctx.pgSchema}_raw`);
  await pool.query(
    `CREATE TABLE IF NOT EXISTS ${table} (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)`,
  );
  return {
    async acquire(key, ttlMs) {
      const owner = randomId();
      for (;;) {
        const inserted = await pool.query(
          `INSERT INTO ${table} (key, owner, expires_at) VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond') ON CONFLICT (key) DO NOTHING`,
          [key, owner, ttlMs],
        );
        if (inserted.rowCount === 1) return { key, owner };
        await jitter(2);
      }
    },
    async release({ key, owner }) {
      await pool.query(`DELETE FROM ${table} WHERE key = $1 AND owner = $2`, [key, owner]);
    },
    close: () => pool.end(),
  };
}

/** SQLite by hand: `INSERT OR IGNORE` and `DELETE` on one connection, WAL, as fencelock opens it. */
async function createRawSqlite(ctx) {
  const { default: Database } = await import('better-sqlite3');
  mkdirSync(ctx.tmpDir, { recursive: true });
  const db = new Database(join(ctx.tmpDir, 'raw.db'));
  db.pragma('busy_timeout = 5000');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.exec(
    'CREATE TABLE IF NOT EXISTS locks (key TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL)',
  );
  const insert = db.prepare(
    'INSERT OR IGNORE INTO locks (key, owner, expires_at) VALUES (?, ?, ?)',
  );
  const remove = db.prepare('DELETE FROM locks WHERE key = ? AND owner = ?');
  return {
    async acquire(key, ttlMs) {
      const owner = randomId();
      for (;;) {
        if (insert.run(key, owner, Date.now() + ttlMs).changes === 1) return { key, owner };
        await jitter(2);
      }
    },
    async release({ key, owner }) {
      remove.run(key, owner);
    },
    async close() {
      db.close();
    },
  };
}

// --- peers --------------------------------------------------------------------------------------

/** Settings of node-redlock and its fork: the library defaults, or tuned for 1 ms holds. */
function redlockSettings(setting, unlimited) {
  if (setting === 'tuned') return { retryCount: -1, retryDelay: 2, retryJitter: 2 };
  return unlimited ? { retryCount: -1 } : {};
}

/** node-redlock (v5) or @sesamecare-oss/redlock: `acquire` / `release`, `using` for renewal. */
async function createRedlockLibrary(ctx, store, module, setting) {
  const imported = await import(module);
  const Redlock = imported.Redlock ?? imported.default;
  const clients = await ioredisClients(redisNodes(ctx, store), setting === 'tuned');
  const redlock = new Redlock(clients, redlockSettings(setting, ctx.unlimited));
  // Both emit 'error' for every vote against (a held key): without a listener that would throw.
  redlock.on('error', () => undefined);
  const key = (name) => `${ctx.prefix}:${name}`;
  return {
    acquire: (name, ttlMs) => redlock.acquire([key(name)], ttlMs),
    // One lock on several resources: on each node one script sets every key or none.
    acquireAll: (names, ttlMs) => redlock.acquire(names.map(key), ttlMs),
    release: (lock) => lock.release(),
    async holdRenewing(name, ttlMs) {
      // `using` extends the lock automatically (automaticExtensionThreshold before expiry) and
      // aborts its signal when an extension fails.
      let stop;
      const stopped = new Promise((resolve) => {
        stop = resolve;
      });
      let granted;
      let failed;
      const held = new Promise((resolve, reject) => {
        granted = resolve;
        failed = reject;
      });
      const done = redlock
        .using([key(name)], ttlMs, async (signal) => {
          granted(signal);
          await stopped;
        })
        .catch((error) => failed(error));
      const signal = await held;
      return {
        release: async () => {
          stop();
          await done;
        },
        lost: () => signal.aborted,
      };
    },
    close: () => Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect()))),
  };
}

/**
 * redis-semaphore's `Mutex` (one node) or `RedlockMutex` (five); for permits its `Semaphore` or
 * `RedlockSemaphore`, with the same settings.
 */
async function createRedisSemaphore(ctx, store, setting) {
  const { Mutex, RedlockMutex, RedlockSemaphore, Semaphore } = await import('redis-semaphore');
  const clients = await ioredisClients(redisNodes(ctx, store), setting === 'tuned');
  let lostCount = 0;
  const options = {
    // The default throws from a timer (an uncaught exception); count instead.
    onLockLost: () => {
      lostCount += 1;
    },
    // Tuned: poll every 2 ms (default 10) and never give up (default: after 10 s).
    ...(setting === 'tuned' || ctx.unlimited ? { acquireTimeout: 1e9 } : {}),
    ...(setting === 'tuned' ? { retryInterval: 2 } : {}),
  };
  const make = (name, ttlMs) => {
    const o = { ...options, lockTimeout: ttlMs };
    return store === 'redis'
      ? new Mutex(clients[0], `${ctx.prefix}:${name}`, o)
      : new RedlockMutex(clients, `${ctx.prefix}:${name}`, o);
  };
  return {
    async acquire(name, ttlMs) {
      const mutex = make(name, ttlMs);
      await mutex.acquire();
      return mutex;
    },
    async acquirePermit(name, permits, ttlMs) {
      const o = { ...options, lockTimeout: ttlMs };
      const semaphore =
        store === 'redis'
          ? new Semaphore(clients[0], `${ctx.prefix}:${name}`, permits, o)
          : new RedlockSemaphore(clients, `${ctx.prefix}:${name}`, permits, o);
      await semaphore.acquire();
      return semaphore;
    },
    release: (mutex) => mutex.release(),
    async holdRenewing(name, ttlMs) {
      const mutex = make(name, ttlMs);
      await mutex.acquire();
      const lostBefore = lostCount;
      return { release: () => mutex.release(), lost: () => lostCount > lostBefore };
    },
    close: () => Promise.all(clients.map((c) => c.quit().catch(() => c.disconnect()))),
  };
}

/**
 * The etcd3 package's `Lock`: a lease per lock, a put-if-absent transaction, a lease revoke to
 * release. Its `acquire()` never waits: a held key fails with `EtcdLockFailedError`, so waiting
 * is our retry loop, 0–20 ms of jitter by default, 0–4 ms tuned.
 */
async function createEtcd3Lock(ctx, setting) {
  const { Etcd3, EtcdLockFailedError } = await import('etcd3');
  const client = new Etcd3({ hosts: ctx.endpoints.etcd.map((h) => `http://${h}`) });
  const ns = client.namespace(`${ctx.prefix}-etcd3/`);
  const retryMs = setting === 'tuned' ? 4 : 20;
  const seconds = (ttlMs) => Math.ceil(ttlMs / 1000);
  return {
    async acquire(key, ttlMs) {
      for (;;) {
        const lock = ns.lock(key).ttl(seconds(ttlMs));
        try {
          return await lock.acquire();
        } catch (error) {
          if (!(error instanceof EtcdLockFailedError)) throw error;
        }
        await jitter(retryMs);
      }
    },
    release: (lock) => lock.release(),
    async holdRenewing(key, ttlMs) {
      // The lock's lease is kept alive by the etcd3 client until it is revoked.
      const lock = await ns.lock(key).ttl(seconds(ttlMs)).acquire();
      let lost = false;
      lock.lease?.on?.('lost', () => {
        lost = true;
      });
      return { release: () => lock.release(), lost: () => lost };
    },
    async close() {
      client.close();
    },
  };
}

// --- the registry ---

const PEER_SETTINGS = {
  'node-redlock': [
    'library defaults (retryCount 10, retryDelay 200 ± 100 ms)',
    'retryCount -1, retryDelay 2 ± 2 ms, enableOfflineQueue false',
  ],
  'sesame-redlock': [
    'library defaults (retryCount 10, retryDelay 200 ± 100 ms)',
    'retryCount -1, retryDelay 2 ± 2 ms, enableOfflineQueue false',
  ],
  'redis-semaphore': [
    'defaults (retryInterval 10 ms, acquireTimeout 10 s), lockTimeout 30 s',
    'retryInterval 2 ms, no acquire timeout, enableOfflineQueue false',
  ],
  'etcd3-lock': [
    'retry loop with 0–20 ms jitter (Lock.acquire never waits)',
    'retry loop with 0–4 ms jitter',
  ],
};

// -------------------------------------------------------------------------------

const ALL = new Set(['uncontended', 'contended', 'many', 'partial', 'semaphore', 'multikey']);

/** fencelock's workloads on every store. */
const FENCELOCK_WORKLOADS = ['uncontended', 'contended', 'many', 'semaphore', 'multikey'];

/**
 * Every contender. `workloads`: where it runs (tuned variants only where their settings matter:
 * the contended and partial-quorum workloads; uncontended, no retry setting is ever used).
 */
export const CONTENDERS = [
  // Redis, single node
  fencelock('redis', FENCELOCK_WORKLOADS),
  raw('redis', 'ioredis SET NX PX + EVALSHA compare-and-delete', createRawRedis, [
    'uncontended',
    'contended',
  ]),
  {
    ...raw(
      'redis',
      'ioredis EVALSHA of a ZSET script (drop expired members, ZCARD < permits → ZADD, time from Redis TIME), ZREM to release; polls after 0–2 ms',
      createRawRedisSemaphore,
      ['semaphore'],
    ),
    id: 'redis/raw.semaphore',
    label: 'raw ceiling (ZSET semaphore)',
  },
  ...peerPair(
    'redis',
    'node-redlock',
    'redlock',
    (ctx, s) => createRedlockLibrary(ctx, 'redis', 'redlock', s),
    ['multikey'],
  ),
  ...peerPair('redis', 'sesame-redlock', '@sesamecare-oss/redlock', (ctx, s) =>
    createRedlockLibrary(ctx, 'redis', '@sesamecare-oss/redlock', s),
  ),
  ...peerPair('redis', 'redis-semaphore', 'redis-semaphore', (ctx, s) =>
    createRedisSemaphore(ctx, 'redis', s),
  ),
  ...primitivePair('redis', 'redis-semaphore', 'Semaphore', 'semaphore', (ctx, s) =>
    createRedisSemaphore(ctx, 'redis', s),
  ),
  // Redlock, five nodes
  fencelock('redlock', [...FENCELOCK_WORKLOADS, 'partial']),
  raw('redlock', 'ioredis SET NX PX on 5 nodes, majority, EVALSHA release', createRawRedis, [
    'uncontended',
    'contended',
    'partial',
  ]),
  ...peerPair(
    'redlock',
    'node-redlock',
    'redlock',
    (ctx, s) => createRedlockLibrary(ctx, 'redlock', 'redlock', s),
    ['partial', 'multikey'],
  ),
  ...peerPair(
    'redlock',
    'sesame-redlock',
    '@sesamecare-oss/redlock',
    (ctx, s) => createRedlockLibrary(ctx, 'redlock', '@sesamecare-oss/redlock', s),
    ['partial'],
  ),
  ...peerPair(
    'redlock',
    'redis-semaphore',
    'redis-semaphore',
    (ctx, s) => createRedisSemaphore(ctx, 'redlock', s),
    ['partial'],
  ),
  ...primitivePair('redlock', 'redis-semaphore', 'RedlockSemaphore', 'semaphore', (ctx, s) =>
    createRedisSemaphore(ctx, 'redlock', s),
  ),
  // etcd
  fencelock('etcd', FENCELOCK_WORKLOADS),
  raw(
    'etcd',
    'etcd3 client: session lease, put-if-absent txn, compare-and-delete txn',
    createRawEtcd,
    ['uncontended'],
  ),
  ...peerPair('etcd', 'etcd3-lock', 'etcd3', (ctx, s) => createEtcd3Lock(ctx, s)),
  // ZooKeeper
  fencelock('zookeeper', FENCELOCK_WORKLOADS),
  raw(
    'zookeeper',
    'zookeeper client: ephemeral sequential create, children, delete',
    createRawZookeeper,
    ['uncontended'],
  ),
  {
    id: 'zookeeper/curator',
    store: 'zookeeper',
    name: 'curator',
    label: 'Curator InterProcessMutex',
    setting: 'default',
    role: 'peer',
    kind: 'java',
    package: 'libcurator-recipes-java',
    workloads: new Set(['uncontended', 'contended']),
    describe:
      'one CuratorFramework (ZooKeeper session) per client, ExponentialBackoffRetry(1000, 3)',
  },
  // PostgreSQL
  fencelock('postgres', FENCELOCK_WORKLOADS),
  raw('postgres', 'pg: INSERT … ON CONFLICT DO NOTHING, DELETE', createRawPostgres, [
    'uncontended',
  ]),
  // SQLite
  fencelock('sqlite', FENCELOCK_WORKLOADS),
  raw('sqlite', 'better-sqlite3: INSERT OR IGNORE, DELETE', createRawSqlite, ['uncontended']),
];

function fencelock(store, workloads) {
  return {
    id: `${store}/fencelock`,
    store,
    name: 'fencelock',
    label: 'fencelock',
    setting: 'default',
    role: 'fencelock',
    kind: 'node',
    package: 'fencelock',
    workloads: new Set(workloads),
    describe:
      store === 'postgres'
        ? 'createLocker(url) defaults; contended: poolSize=2 per client (the shared server’s connection limit)'
        : 'createLocker(url) defaults',
    create: (ctx) => createFencelock(ctx, store),
  };
}

function raw(store, describe, create, workloads) {
  return {
    id: `${store}/raw`,
    store,
    name: 'raw',
    label: 'raw ceiling',
    setting: 'default',
    role: 'raw',
    kind: 'node',
    package: {
      redis: 'ioredis',
      redlock: 'ioredis',
      etcd: 'etcd3',
      zookeeper: 'zookeeper',
      postgres: 'pg',
      sqlite: 'better-sqlite3',
    }[store],
    workloads: new Set(workloads),
    describe,
    create: (ctx) => create(ctx, store),
  };
}

/** A peer at default settings (every workload but partial unless asked) and tuned (contended). */
function peerPair(store, name, pkg, create, extra = []) {
  const label =
    name === 'redis-semaphore'
      ? store === 'redis'
        ? 'redis-semaphore Mutex'
        : 'redis-semaphore RedlockMutex'
      : name === 'etcd3-lock'
        ? 'etcd3 Lock'
        : name === 'sesame-redlock'
          ? '@sesamecare-oss/redlock'
          : 'node-redlock';
  const [defaults, tuned] = PEER_SETTINGS[name];
  const base = { store, name, label, role: 'peer', kind: 'node', package: pkg };
  // Many leases: the Redis peers (the etcd3 Lock would add 10,000 etcd leases with keepalives of
  // their own to a cluster other work shares, for a figure the issue does not ask for).
  const manyToo = store === 'redis' ? ['many'] : [];
  return [
    {
      ...base,
      id: `${store}/${name}`,
      setting: 'default',
      workloads: new Set(['uncontended', 'contended', ...manyToo, ...extra]),
      describe: defaults,
      create: (ctx) => create(ctx, 'default'),
    },
    {
      ...base,
      id: `${store}/${name}:tuned`,
      setting: 'tuned',
      workloads: new Set(['contended', ...extra]),
      describe: tuned,
      create: (ctx) => create(ctx, 'tuned'),
    },
  ];
}

/**
 * A peer's other primitive (`redis-semaphore`'s `Semaphore`…) at default and tuned settings, in
 * one workload only: ids `<store>/<name>.<primitive>` and `…:tuned`.
 */
function primitivePair(store, name, primitive, workload, create) {
  const [defaults, tuned] = PEER_SETTINGS[name];
  const base = {
    store,
    name,
    label: `${name} ${primitive}`,
    role: 'peer',
    kind: 'node',
    package: name,
    workloads: new Set([workload]),
  };
  return [
    {
      ...base,
      id: `${store}/${name}.${primitive}`,
      setting: 'default',
      describe: defaults,
      create: (ctx) => create(ctx, 'default'),
    },
    {
      ...base,
      id: `${store}/${name}.${primitive}:tuned`,
      setting: 'tuned',
      describe: tuned,
      create: (ctx) => create(ctx, 'tuned'),
    },
  ];
}

/** The contender with this id. */
export function contenderById(id) {
  const found = CONTENDERS.find((c) => c.id === id);
  if (!found) throw new Error(`no contender ${id}`);
  return found;
}

/** Stores in bench order. */
export const STORES = ['redis', 'redlock', 'etcd', 'zookeeper', 'postgres', 'sqlite'];

/** Workload names. */
export const WORKLOADS = [...ALL];
