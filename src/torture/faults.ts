/**
 * The fault schedule of FAULTS.md 2.4, one entry per fault: which backends it applies to, and
 * how it is caused on these machines. Each `inject` hits the current (or next) holder once and
 * undoes what it did before it returns; the harness judges the run afterwards.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { FaultMark } from './checker.js';
import type { TcpProxy } from './proxy.js';
import type { BackendName, Topology } from './topologies.js';

const run = promisify(execFile);

/** What a fault can do to a run. */
export interface FaultContext {
  readonly ttlMs: number;
  readonly topology: Topology;
  /** The lock key the clients contend for. */
  readonly key: string;
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
      return { at, endedAt: at, target };
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
];
