/**
 * The engines a torture run can target, as `scripts/services.sh` starts them, and how a client
 * reaches each one: directly, or through a fault proxy per client and per endpoint (so one
 * client can be cut off without touching the others).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OWN_SENTINEL_MASTER, OwnRedis, OwnSentinelGroup } from './servers.js';

/** Ports of scripts/services.sh (the same environment overrides). */
function env(name: string, fallback: number): number {
  return Number(process.env[name] || fallback);
}
export const PORTS = {
  redis: env('FENCELOCK_REDIS_PORT', 6390),
  redlockBase: env('FENCELOCK_REDLOCK_PORT_BASE', 6400),
  sentinelBase: env('FENCELOCK_SENTINEL_PORT_BASE', 26410),
  etcdClientBase: env('FENCELOCK_ETCD_CLIENT_PORT_BASE', 23790),
  zkClientBase: env('FENCELOCK_ZK_CLIENT_PORT_BASE', 21811),
  postgres: env('FENCELOCK_PG_PORT', 25432),
  register: env('FENCELOCK_REGISTER_PORT', 25433),
};

/** The register server's URL (never faulted). */
export const REGISTER_URL = `postgres://fencelock@127.0.0.1:${PORTS.register}/register`;

/** Backends the harness knows. */
export const BACKENDS = [
  'redis',
  'sentinel',
  'redlock',
  'etcd',
  'zookeeper',
  'postgres',
  'postgres-advisory',
  'sqlite',
  // A Redis server of the run's own with AOF persistence (F11 crash-restart), never the shared one.
  'redis-aof-everysec',
  'redis-aof-always',
] as const;
export type BackendName = (typeof BACKENDS)[number];

/** Engine name in `scripts/services.sh` for each backend. */
export const SERVICE_OF: Record<BackendName, string | undefined> = {
  redis: 'redis',
  sentinel: 'sentinel',
  redlock: 'redlock',
  etcd: 'etcd',
  zookeeper: 'zookeeper',
  postgres: 'postgres',
  'postgres-advisory': 'postgres',
  sqlite: undefined,
  'redis-aof-everysec': undefined,
  'redis-aof-always': undefined,
};

export interface Topology {
  readonly backend: BackendName;
  /** Engine ports a client talks to (proxied one by one when the run needs proxies). */
  readonly endpoints: readonly number[];
  /** The store URL for a client whose endpoint `i` is reached on `ports[i]`. */
  storeUrl(ports: readonly number[]): string;
  /** Key prefix / namespace / schema of this run (engine-side names derive from it). */
  readonly namespace: string;
  /** Remove local files the topology made (the SQLite store). */
  dispose?(): void;
  /**
   * Start the servers this topology runs for itself, before any client (`endpoints` is known
   * only afterwards); `tearDown` stops them and removes their data.
   */
  setUp?(): Promise<void>;
  tearDown?(): Promise<void>;
  /** The run's own Redis server (the `redis-aof-*` backends). */
  readonly ownRedis?: OwnRedis;
  /** The run's own Sentinel group (the F4 variant of `sentinel`). */
  readonly ownSentinel?: OwnSentinelGroup;
}

/**
 * The topology of `backend` for one run; `namespace` keeps runs apart (a Redis key prefix, an
 * etcd namespace, a ZooKeeper chroot, a PostgreSQL schema, a SQLite file).
 */
export function topologyOf(backend: BackendName, namespace: string): Topology {
  const hosts = (ports: readonly number[]) => ports.map((p) => `127.0.0.1:${p}`).join(',');
  switch (backend) {
    case 'redis':
      return {
        backend,
        namespace,
        endpoints: [PORTS.redis],
        storeUrl: ([p]) => `redis://127.0.0.1:${p}?prefix=${namespace}&commandTimeoutMs=1000`,
      };
    case 'sentinel':
      return {
        backend,
        namespace,
        endpoints: [1, 2, 3].map((n) => PORTS.sentinelBase + n),
        storeUrl: (ports) => `redis+sentinel://${hosts(ports)}/fencelock?prefix=${namespace}`,
      };
    case 'redlock':
      return {
        backend,
        namespace,
        endpoints: [1, 2, 3, 4, 5].map((n) => PORTS.redlockBase + n),
        storeUrl: (ports) => `redlock://${hosts(ports)}?prefix=${namespace}`,
      };
    case 'etcd':
      return {
        backend,
        namespace,
        endpoints: [1, 2, 3].map((n) => PORTS.etcdClientBase + n),
        // Each request's deadline: 1 s, as Redis's and PostgreSQL's command timeouts (F10).
        storeUrl: (ports) => `etcd://${hosts(ports)}/${namespace}?dialTimeoutMs=1000`,
      };
    case 'zookeeper':
      return {
        backend,
        namespace,
        endpoints: [0, 1, 2].map((n) => PORTS.zkClientBase + n),
        storeUrl: (ports) => `zk://${hosts(ports)}/${namespace}`,
      };
    case 'postgres':
    case 'postgres-advisory': {
      const mode = backend === 'postgres' ? 'lease' : 'advisory';
      return {
        backend,
        namespace,
        endpoints: [PORTS.postgres],
        storeUrl: ([p]) =>
          `postgres://fencelock@127.0.0.1:${p}/fencelock?schema=${namespace}&mode=${mode}&commandTimeoutMs=1000`,
      };
    }
    case 'sqlite': {
      const dir = mkdtempSync(join(tmpdir(), 'fencelock-torture-'));
      return {
        backend,
        namespace,
        endpoints: [],
        storeUrl: () => `sqlite:${join(dir, 'locks.db')}`,
        dispose: () => rmSync(dir, { recursive: true, force: true }),
      };
    }
    case 'redis-aof-everysec':
    case 'redis-aof-always': {
      const server = new OwnRedis(backend === 'redis-aof-always' ? 'always' : 'everysec');
      return {
        backend,
        namespace,
        get endpoints() {
          return [server.port];
        },
        storeUrl: ([p]) => `redis://127.0.0.1:${p}?prefix=${namespace}&commandTimeoutMs=1000`,
        setUp: () => server.start(),
        tearDown: () => server.stop(),
        ownRedis: server,
      };
    }
  }
}

/**
 * The `sentinel` backend on a Sentinel group of the run's own (fault F4: one primary, one
 * replica, one Sentinel, on free ports), so that crashing the primary leaves the shared Sentinel
 * deployment of `scripts/services.sh` alone. Clients reach the Sentinel directly.
 */
export function ownSentinelTopology(namespace: string): Topology {
  const group = new OwnSentinelGroup();
  return {
    backend: 'sentinel',
    namespace,
    get endpoints() {
      return [group.sentinel.port];
    },
    storeUrl: (ports) =>
      `redis+sentinel://${ports.map((p) => `127.0.0.1:${p}`).join(',')}/${OWN_SENTINEL_MASTER}?prefix=${namespace}&commandTimeoutMs=1000`,
    setUp: () => group.start(),
    tearDown: () => group.stop(),
    ownSentinel: group,
  };
}
