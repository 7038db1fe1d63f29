/**
 * The fault schedule (the faults docs/guarantees.md lists), one entry per fault: which backends it
 * applies to, and how it is caused on these machines. Each `inject` hits the current (or next)
 * holder once and undoes what it did before it returns; the harness judges the run afterwards.
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { FaultMark } from './checker.js';
import {
  ETCD_MEMBERS,
  etcdLeader,
  libfaketimePath,
  NftTable,
  nftUnavailable,
  zkHolderSession,
  zkKillSession,
  zkServerOf,
} from './fault-tools.js';
import type { TcpProxy } from './proxy.js';
import { OWN_SENTINEL_MASTER, redisCommand } from './servers.js';
import { type BackendName, ownSentinelTopology, type Topology } from './topologies.js';

const run = promisify(execFile);

/** What a fault can do to a run. */
export interface FaultContext {
  readonly ttlMs: number;
  readonly topology: Topology;
  /** The lock key the clients contend for. */
  readonly key: string;
  /** Ids of the run's clients (c1, c2, …). */
  readonly clients: readonly string[];
  /** A folder of this run's own (the one `clientEnv` was given), removed after the run. */
  readonly runDir: string;
  /** Harness monotonic time, ms. */
  now(): number;
  sleep(ms: number): Promise<void>;
  /** The client granted next (or the current holder if `current`), or undefined on timeout. */
  holder(options?: { current?: boolean; timeoutMs?: number }): Promise<string | undefined>;
  /** Send a signal to a client process. */
  signal(client: string, signal: NodeJS.Signals): void;
  /** The fault proxies of a client, one per endpoint (only for faults with `proxies`). */
  proxiesOf(client: string): readonly TcpProxy[];
  /** Run `scripts/services.sh` with these arguments. */
  services(...args: string[]): Promise<void>;
}

export interface FaultSpec {
  readonly id: string;
  readonly title: string;
  readonly backends: readonly BackendName[];
  /** Clients reach the engine through per-client proxies. */
  readonly proxies?: boolean;
  /**
   * Clients work longer than the TTL (twice it, writing 8 times), relying on the watchdog: a
   * holder cut off from the engine keeps writing while its lease runs out and another client
   * takes over, which is the case the fence must catch for faults that do not pause the holder.
   */
  readonly longHold?: boolean;
  /** The fault can make a stale holder write (so rejected stale writes are expected). */
  readonly bites: readonly BackendName[];
  /**
   * Backends whose documented assumptions this fault breaks (e.g. Redlock's: a crashed node
   * stays down for a TTL): a failed cell there is reported as a documented failure, which
   * does not fail the run, and `assumption` says which promise it is outside of.
   */
  readonly outsideAssumptions?: readonly BackendName[];
  readonly assumption?: string;
  /**
   * Environment added to every client process of a run (e.g. LD_PRELOAD of libfaketime);
   * `runDir` is the run's own folder, also passed to `inject` as `ctx.runDir`.
   */
  clientEnv?(runDir: string): Record<string, string>;
  /** The topology to run `backend` on instead of the shared one (servers of the run's own). */
  topology?(backend: BackendName, namespace: string): Topology | undefined;
  /** Why the fault cannot be caused on this machine (a tool is missing), or undefined. */
  unavailable?(backend: BackendName): Promise<string | undefined>;
  inject(ctx: FaultContext): Promise<FaultMark | undefined>;
}

const ALL: readonly BackendName[] = [
  'redis',
  'sentinel',
  'redlock',
  'etcd',
  'zookeeper',
  'postgres',
  'postgres-advisory',
  'sqlite',
];
const NETWORKED = ALL.filter((b) => b !== 'sqlite' && b !== 'sentinel');

/**
 * F10: how long each reply is held, past every client's command timeout in the torture
 * topologies (1 s for Redis, PostgreSQL and etcd, a tenth of the TTL for a Redlock node, two
 * thirds of the session timeout for the ZooKeeper client), and for how long replies are held.
 */
const REPLY_DELAY_MS = 1_500;
const REPLY_WINDOW_MS = 3_000;

/** The Redis lock key of `key` under the run's prefix (the Redis and Redlock backends' layout). */
function redisLockKey(topology: Topology, key: string): string {
  return `${topology.namespace}:{${key}}:lock`;
}

export const FAULTS: readonly FaultSpec[] = [
  {
    id: 'F0',
    title: 'no fault (baseline)',
    backends: ALL,
    bites: [],
    async inject() {
      return undefined;
    },
  },
  {
    id: 'F1',
    title: 'holder kill -9',
    backends: ALL,
    bites: [],
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      ctx.signal(target, 'SIGKILL');
      return { at, endedAt: at, target, killed: true };
    },
  },
  {
    id: 'F2',
    title: 'holder paused (SIGSTOP) for 3 × TTL',
    backends: ALL,
    // A paused advisory-lock holder keeps its connection, so the server keeps its lock.
    bites: ALL.filter((b) => b !== 'postgres-advisory'),
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      ctx.signal(target, 'SIGSTOP');
      await ctx.sleep(3 * ctx.ttlMs);
      ctx.signal(target, 'SIGCONT');
      return { at, endedAt: ctx.now(), target, paused: true };
    },
  },
  {
    id: 'F3',
    title: 'holder cut off from the engine (blackhole) for 3 × TTL',
    backends: NETWORKED,
    proxies: true,
    longHold: true,
    bites: NETWORKED.filter((b) => b !== 'postgres-advisory'),
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      for (const proxy of ctx.proxiesOf(target)) proxy.blackhole();
      await ctx.sleep(3 * ctx.ttlMs);
      await Promise.all(ctx.proxiesOf(target).map((proxy) => proxy.restore()));
      return { at, endedAt: ctx.now(), target };
    },
  },
  {
    id: 'F4',
    title:
      "Redis primary killed (kill -9) before its replica got the grant; the Sentinel promotes the replica at once (SENTINEL FAILOVER; the run's own primary, replica and Sentinel)",
    backends: ['sentinel'],
    longHold: true,
    bites: ['sentinel'],
    topology: (backend, namespace) =>
      backend === 'sentinel' ? ownSentinelTopology(namespace) : undefined,
    unavailable: () => nftUnavailable(),
    inject: primaryCrashBeforeReplication,
  },
  {
    id: 'F5a',
    title:
      'Redlock: a node the holder locked is restarted empty at once (the holder locked exactly 3 of 5 nodes)',
    backends: ['redlock'],
    proxies: true,
    longHold: true,
    // The restarted node lets a waiter win a majority while the holder still works (a double
    // grant: the Redlock spec wants a crashed node down for a TTL), but the waiter's token comes
    // from the node clocks, above the holder's, so the fence rejects the holder's late writes.
    bites: ['redlock'],
    inject: (ctx) => redlockNodeRestart(ctx, false),
  },
  {
    id: 'F5b',
    title:
      'Redlock: a node the holder locked is restarted empty after more than the TTL (the delayed restart)',
    backends: ['redlock'],
    proxies: true,
    longHold: true,
    bites: ['redlock'],
    inject: (ctx) => redlockNodeRestart(ctx, true),
  },
  {
    id: 'F5c',
    title:
      'Redis (single node, no persistence): the server is restarted empty at once while the lock is held',
    backends: ['redis'],
    longHold: true,
    // The key is gone with the restart: another client is granted while the holder still works,
    // with a token from the server's clock, above the holder's, so the fence rejects its writes.
    bites: ['redis'],
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      await ctx.services('redis-server', 'restart-empty');
      // Let the contest for the key play out while the holder still believes its lease.
      await ctx.sleep(ctx.ttlMs);
      return { at, endedAt: ctx.now(), target };
    },
  },
  {
    id: 'F6a',
    title: 'client wall clock jumps +30 s, −30 s, +1 h while the lock is held (libfaketime)',
    backends: ALL,
    longHold: true,
    // SQLite has no server: its expiry is the host's wall clock (`unixepoch()` in the clients'
    // processes), so a client clock jump is an engine clock jump there (as F6b elsewhere).
    bites: ['sqlite'],
    unavailable: async () =>
      libfaketimePath() === undefined
        ? 'libfaketime is not installed (scripts/install-engines.sh installs it)'
        : undefined,
    clientEnv: (runDir) => {
      const file = join(runDir, 'faketime');
      writeFileSync(file, '+0\n');
      return {
        LD_PRELOAD: libfaketimePath() ?? '',
        FAKETIME_TIMESTAMP_FILE: file,
        FAKETIME_NO_CACHE: '1',
        FAKETIME_DONT_FAKE_MONOTONIC: '1',
      };
    },
    inject: clientClockJumps,
  },
  {
    id: 'F6b',
    title: "engine clock jump forward, emulated: the holder's key expires early (PEXPIRE 1)",
    backends: ['redis', 'redlock'],
    longHold: true,
    bites: ['redis', 'redlock'],
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      const key = redisLockKey(ctx.topology, ctx.key);
      // Redlock: 3 of 5 nodes jump (a majority); Redis: the node.
      const ports = ctx.topology.endpoints.slice(0, ctx.topology.backend === 'redlock' ? 3 : 1);
      await Promise.all(
        ports.map((port) => run('redis-cli', ['-p', String(port), 'PEXPIRE', key, '1'])),
      );
      return { at, endedAt: ctx.now(), target };
    },
  },
  {
    id: 'F7',
    title: 'etcd: the leader is killed (kill -9) while the lock is held, restarted a TTL later',
    backends: ['etcd'],
    longHold: true,
    bites: [],
    inject: etcdLeaderCrash,
  },
  {
    id: 'F8',
    title:
      "ZooKeeper: the server expires the holder's session (Curator's KillSession: its id and password, then close)",
    backends: ['zookeeper'],
    longHold: true,
    bites: ['zookeeper'],
    inject: zkForcedExpiry,
  },
  {
    id: 'F9',
    title: 'PostgreSQL: crash-restart of the server (pg_ctl stop -m immediate) while held',
    backends: ['postgres', 'postgres-advisory'],
    longHold: true,
    bites: ['postgres-advisory'],
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      await ctx.services('pg-server', 'restart-immediate');
      return { at, endedAt: ctx.now(), target };
    },
  },
  {
    id: 'F9b',
    title: "PostgreSQL: the server terminates every client's connection",
    backends: ['postgres', 'postgres-advisory'],
    longHold: true,
    // Advisory mode: the lock goes with the connection while the holder keeps working.
    bites: ['postgres-advisory'],
    async inject(ctx) {
      const target = await ctx.holder();
      if (target === undefined) return undefined;
      const at = ctx.now();
      await ctx.services('pg-server', 'kill-backends');
      return { at, endedAt: ctx.now(), target };
    },
  },
  {
    id: 'F10',
    title: `replies to the waiting clients held ${REPLY_DELAY_MS} ms (past their command timeout) for ${REPLY_WINDOW_MS} ms; next grant counted from the last held reply`,
    backends: NETWORKED,
    proxies: true,
    bites: [],
    inject: lostReplies,
  },
  {
    id: 'F11',
    title:
      "crash-restart (kill -9, same data) of an etcd follower, of the ZooKeeper server the holder's session is on, of an AOF Redis server",
    backends: ['etcd', 'zookeeper', 'redis-aof-everysec', 'redis-aof-always'],
    longHold: true,
    bites: [],
    inject: crashRestart,
  },
];

// --- F4 ---------------------------------------------------------------------------------------

/**
 * Fault F4, step by step: cut only the replication stream (an nft rule on `lo` dropping the
 * primary's output to the replica's socket, so not even the kernel can deliver it later), let
 * the next client acquire, kill -9 the primary, wait until the Sentinel names the replica, and
 * only then delete the table (removed earlier, the dead primary's socket would retransmit the
 * grant). The promoted replica never saw the grant: the next acquirer gets the key as well.
 *
 * The Sentinel is told to fail over right after the kill (`SENTINEL FAILOVER`, its own failover
 * without the 1 s down-after wait and the vote): the promotion then takes about 1.1 s instead of
 * 2.2–2.4 s, which is what lets the holder, still within its TTL and still writing, overlap the
 * next grant at the torture TTLs (1–2 s). If the command is refused, the Sentinel's own
 * detection promotes the replica a second later.
 */
async function primaryCrashBeforeReplication(ctx: FaultContext): Promise<FaultMark | undefined> {
  const group = ctx.topology.ownSentinel;
  if (group === undefined) throw new Error('F4 needs the run’s own Sentinel group');
  const [primary, replica] = group.nodes;
  if (primary === undefined || replica === undefined) throw new Error('no primary/replica');
  const replicas = await redisCommand(primary.port, 'CLIENT LIST TYPE replica');
  const socketPort = /addr=127\.0\.0\.1:(\d+)/.exec(replicas)?.[1];
  if (socketPort === undefined) throw new Error('no replica connection on the primary');
  const table = new NftTable();
  try {
    await table.create([
      `ip daddr 127.0.0.1 tcp sport ${primary.port} tcp dport ${socketPort} drop`,
    ]);
    const target = await ctx.holder();
    if (target === undefined) return undefined;
    const at = ctx.now();
    await primary.crash();
    await redisCommand(group.sentinel.port, `SENTINEL FAILOVER ${OWN_SENTINEL_MASTER}`).catch(
      () => undefined,
    );
    const deadline = ctx.now() + 30_000;
    while ((await group.primaryPort().catch(() => 0)) !== replica.port) {
      if (ctx.now() > deadline) throw new Error('the Sentinel promoted no replica within 30 s');
      await ctx.sleep(50);
    }
    return { at, endedAt: ctx.now(), target };
  } finally {
    await table.remove();
  }
}

// --- F5 ---------------------------------------------------------------------------------------

/** Endpoint indexes of the Redlock nodes: the holder's three, and the two it is kept off. */
const HOLDER_NODES = [0, 1, 2];
const OTHER_NODES = [3, 4];

/**
 * Fault F5. The unsafe case needs the holder on exactly 3 of the 5 nodes: every client is
 * cut (fault proxy) from nodes 4 and 5 until the next grant, so that grant is on nodes 1–3 only;
 * then the others see nodes 4 and 5 again (the holder stays cut from them). Node 1 is killed and
 * restarted empty, at once (`delayed` false) or after more than the TTL (`delayed` true). With
 * an immediate restart, a waiter's majority is nodes 1, 4 and 5 while the holder still counts
 * nodes 1–3 as its own.
 */
async function redlockNodeRestart(
  ctx: FaultContext,
  delayed: boolean,
): Promise<FaultMark | undefined> {
  const node = String(HOLDER_NODES[0]! + 1);
  const proxies = (client: string, indexes: readonly number[]) =>
    indexes.flatMap((i) => ctx.proxiesOf(client)[i] ?? []);
  let nodeDown = false;
  try {
    for (const client of ctx.clients) for (const p of proxies(client, OTHER_NODES)) p.cut();
    const target = await ctx.holder();
    if (target === undefined) return undefined;
    await Promise.all(
      ctx.clients
        .filter((c) => c !== target)
        .flatMap((c) => proxies(c, OTHER_NODES).map((p) => p.restore())),
    );
    const at = ctx.now();
    if (delayed) {
      nodeDown = true;
      await ctx.services('redlock-node', 'kill', node);
      await ctx.sleep(ctx.ttlMs + 500);
      await ctx.services('redlock-node', 'start', node);
      nodeDown = false;
    } else {
      await ctx.services('redlock-node', 'restart-empty', node);
    }
    // Let the contest for the key play out before the holder sees nodes 4 and 5 again.
    await ctx.sleep(ctx.ttlMs);
    return { at, endedAt: ctx.now(), target };
  } finally {
    if (nodeDown) await ctx.services('redlock-node', 'start', node);
    await Promise.all(
      ctx.clients.flatMap((c) =>
        ctx.proxiesOf(c).map((p) => (p.mode === 'pass' ? undefined : p.restore())),
      ),
    );
  }
}

// --- F6a --------------------------------------------------------------------------------------

/** Offsets written to the clients' libfaketime timestamp file, one after the other. */
const CLOCK_JUMPS = ['+30s', '-30s', '+3600s'];

/**
 * Fault F6a: every client runs under libfaketime with only the wall clock faked. While the
 * next holder holds the lock, the timestamp file moves the clients' wall clock to 30 s ahead of
 * real time, then 30 s behind it (a 60 s step back), then 1 h ahead, half a TTL apart. Validity
 * is monotonic-clock arithmetic, so nothing may change.
 */
async function clientClockJumps(ctx: FaultContext): Promise<FaultMark | undefined> {
  const file = join(ctx.runDir, 'faketime');
  const target = await ctx.holder();
  if (target === undefined) return undefined;
  const at = ctx.now();
  try {
    for (const offset of CLOCK_JUMPS) {
      writeFileSync(file, `${offset}\n`);
      await ctx.sleep(ctx.ttlMs / 2);
    }
  } finally {
    writeFileSync(file, '+0\n');
  }
  return { at, endedAt: ctx.now(), target };
}

// --- F7 ---------------------------------------------------------------------------------------

/** Fault F7's last variant: kill -9 the etcd leader while the lock is held, restart it. */
async function etcdLeaderCrash(ctx: FaultContext): Promise<FaultMark | undefined> {
  const target = await ctx.holder();
  if (target === undefined) return undefined;
  const leader = await etcdLeader();
  if (leader === undefined) throw new Error('no etcd leader found');
  const at = ctx.now();
  await ctx.services('etcd-member', 'kill', String(leader));
  try {
    // Longer than the election timeout (1 s): the others elect a leader meanwhile.
    await ctx.sleep(ctx.ttlMs);
  } finally {
    await ctx.services('etcd-member', 'start', String(leader));
  }
  return { at, endedAt: ctx.now(), target };
}

// --- F8 ---------------------------------------------------------------------------------------

/** The ZooKeeper node under which the contenders for the run's key are created. */
function zkLockDir(ctx: FaultContext): string {
  return `/${ctx.topology.namespace}/locks/${encodeURIComponent(ctx.key).replaceAll('.', '%2E')}`;
}

/**
 * Fault F8: the server expires the holder's session. The session id is the holder
 * node's `ephemeralOwner`; its password is derived from the id as the server does it; a second
 * client resumes the session with both and closes it.
 */
async function zkForcedExpiry(ctx: FaultContext): Promise<FaultMark | undefined> {
  const target = await ctx.holder();
  if (target === undefined) return undefined;
  const session = await zkHolderSession(zkLockDir(ctx));
  if (session === undefined) throw new Error('no holder node found');
  const at = ctx.now();
  await zkKillSession(session);
  return { at, endedAt: ctx.now(), target };
}

// --- F10 --------------------------------------------------------------------------------------

/**
 * Fault F10: the engine applies a waiting client's request (a grant) but the client hears the
 * reply only after its timeout, so it cannot know whether it was granted. Every client but the
 * current holder gets its replies held; after the window everything flows again. The mark
 * starts at the restore, so the next grant after it shows whether a grant nobody knows of was
 * left behind (it would block everyone until its TTL). The mark is set once the last held reply
 * has been delivered.
 */
async function lostReplies(ctx: FaultContext): Promise<FaultMark | undefined> {
  const holder = await ctx.holder({ current: true });
  if (holder === undefined) return undefined;
  const delayed = ctx.clients.filter((c) => c !== holder).flatMap((c) => ctx.proxiesOf(c));
  try {
    for (const proxy of delayed) proxy.delayReplies(REPLY_DELAY_MS);
    await ctx.sleep(REPLY_WINDOW_MS);
  } finally {
    await Promise.all(delayed.map((proxy) => proxy.restore()));
  }
  // Replies already held keep their release time: the last one arrives a delay later.
  await ctx.sleep(REPLY_DELAY_MS);
  const at = ctx.now();
  return { at, endedAt: at };
}

// --- F11 --------------------------------------------------------------------------------------

/**
 * Fault F11: kill -9 one engine process while the lock is held and start it again on the
 * same data. etcd: a follower (the leader is F7). ZooKeeper: the server the holder's session is
 * connected to. Redis with AOF: the run's own server (never the shared one).
 */
async function crashRestart(ctx: FaultContext): Promise<FaultMark | undefined> {
  const target = await ctx.holder();
  if (target === undefined) return undefined;
  const backend = ctx.topology.backend;
  if (backend === 'redis-aof-everysec' || backend === 'redis-aof-always') {
    const server = ctx.topology.ownRedis?.process;
    if (server === undefined) throw new Error('F11 needs the run’s own Redis server');
    const at = ctx.now();
    try {
      await server.crash();
    } finally {
      await server.start();
    }
    return { at, endedAt: ctx.now(), target };
  }
  let member: string;
  let engine: 'etcd-member' | 'zk-member';
  if (backend === 'etcd') {
    const leader = await etcdLeader();
    member = String(ETCD_MEMBERS.find((n) => n !== leader));
    engine = 'etcd-member';
  } else {
    const session = await zkHolderSession(zkLockDir(ctx));
    const server = session === undefined ? undefined : await zkServerOf(session);
    if (server === undefined) throw new Error("the holder's ZooKeeper server was not found");
    member = String(server);
    engine = 'zk-member';
  }
  const at = ctx.now();
  await ctx.services(engine, 'kill', member);
  try {
    await ctx.sleep(ctx.ttlMs / 2);
  } finally {
    await ctx.services(engine, 'start', member);
  }
  return { at, endedAt: ctx.now(), target };
}
