/**
 * A node-redis client (`redis` package, v4 and later) seen through the few ioredis calls the Redis
 * and Redlock backends make: EVALSHA/EVAL with keys and arguments, WAIT, INFO, SCAN (on a
 * cluster per primary), a duplicate connection for pub/sub, events, quit. The client must be
 * connected by its owner (`await client.connect()`); the backend never closes it.
 */
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import type { KeyScanner } from './listing.js';

/**
 * What identifies a node-redis client (`redis` package) for the option types; the backends
 * check the shape at construction.
 */
export interface NodeRedisClientLike {
  readonly isOpen: boolean;
  evalSha(...args: never[]): unknown;
  sendCommand(...args: never[]): unknown;
}

/** The node-redis calls used here. */
interface NodeRedisClient {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  readonly options?: { readonly url?: string; readonly socket?: { host?: string; port?: number } };
  evalSha(sha: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  eval(script: string, options: { keys: string[]; arguments: string[] }): Promise<unknown>;
  sendCommand(args: string[]): Promise<unknown>;
  /** A node-redis cluster's primaries (`createCluster`), and a client of one of them. */
  readonly masters?: readonly { readonly host: string; readonly port: number }[];
  nodeClient?(node: unknown): Promise<NodeRedisClient> | NodeRedisClient;
  info(section?: string): Promise<string>;
  duplicate(): NodeRedisClient;
  connect(): Promise<unknown>;
  subscribe(channel: string, listener: (message: string, channel: string) => void): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  off(event: string, listener: (...args: unknown[]) => void): unknown;
  close?(): Promise<void>;
  quit?(): Promise<unknown>;
  destroy?(): void;
  disconnect?(): Promise<void>;
}

/** Whether `value` looks like a node-redis client (by its camel-case command methods). */
export function isNodeRedisClient(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Record<string, unknown>;
  return (
    ['evalSha', 'sendCommand', 'duplicate', 'connect'].every((m) => typeof c[m] === 'function') &&
    typeof c.isOpen === 'boolean'
  );
}

/**
 * Wrap a connected node-redis client so that the backends can drive it like an ioredis client.
 * The result is typed as ioredis' `Redis` for the backends' sake; only the calls they make work.
 */
export function adaptNodeRedis(client: unknown): Redis {
  return new NodeRedisAdapter(client as NodeRedisClient) as unknown as Redis;
}

/**
 * A node-redis client behind the ioredis calls the backends make. A duplicate (`duplicate()`)
 * connects on its first `subscribe`, not by `connect()`.
 */
export class NodeRedisAdapter extends EventEmitter {
  readonly #client: NodeRedisClient;
  readonly options: { host: string; port: number };
  /**
   * As ioredis' Cluster flag: a node-redis cluster (`createCluster`, known by its `masters`), on
   * which one script call cannot span the slots of many keys.
   */
  readonly isCluster: boolean;
  #subscriber: NodeRedisClient | undefined;

  constructor(client: NodeRedisClient) {
    super();
    this.#client = client;
    this.isCluster = Array.isArray((client as { masters?: unknown }).masters);
    this.options = addressOf(client);
    client.on('error', (error) => this.emit('error', error));
    client.on('ready', () => this.emit('ready'));
  }

  /** As ioredis: `ready` while connected; the owner connects it, never the backend. */
  get status(): string {
    return this.#client.isReady ? 'ready' : this.#client.isOpen ? 'connecting' : 'end';
  }

  evalsha(sha: string, numKeys: number, ...rest: (string | number)[]): Promise<unknown> {
    return this.#client.evalSha(sha, split(numKeys, rest));
  }

  eval(script: string, numKeys: number, ...rest: (string | number)[]): Promise<unknown> {
    return this.#client.eval(script, split(numKeys, rest));
  }

  async wait(replicas: number, timeoutMs: number): Promise<number> {
    return Number(await this.#client.sendCommand(['WAIT', String(replicas), String(timeoutMs)]));
  }

  info(section?: string): Promise<string> {
    return this.#client.info(section);
  }

  /** As ioredis: one `SCAN` call (`list`), answered `[next cursor, names]`. */
  readonly scan: ScanCall = (...args) => scanOn(this.#client, ...args);

  /**
   * As ioredis' `Cluster.nodes('master')`, for `list` only: each primary of a node-redis cluster,
   * with its address and its `SCAN` (through `nodeClient`); a plain client has none.
   */
  nodes(_role: 'master'): {
    readonly options: { host: string; port: number };
    scan: NodeRedisAdapter['scan'];
  }[] {
    const cluster = this.#client;
    return (cluster.masters ?? []).map((master) => ({
      options: { host: master.host, port: master.port },
      scan: async (...args) => scanOn(await cluster.nodeClient!(master), ...args),
    }));
  }

  /** A pub/sub connection (a duplicate of the client, connected on first subscribe). */
  duplicate(): NodeRedisAdapter {
    const subscriber = new NodeRedisAdapter(this.#client.duplicate());
    return subscriber;
  }

  async subscribe(channel: string): Promise<void> {
    if (!this.#client.isOpen) await this.#client.connect();
    this.#subscriber = this.#client;
    await this.#client.subscribe(channel, (message, from) => this.emit('message', from, message));
  }

  async unsubscribe(channel: string): Promise<void> {
    await this.#subscriber?.unsubscribe(channel);
  }

  async quit(): Promise<void> {
    if (!this.#client.isOpen) return;
    if (this.#client.close) await this.#client.close();
    else await this.#client.quit?.();
  }

  disconnect(): void {
    if (!this.#client.isOpen) return;
    if (this.#client.destroy) this.#client.destroy();
    else void this.#client.disconnect?.().catch(() => undefined);
  }
}

/** ioredis' `scan(cursor, 'MATCH', pattern, 'COUNT', n)`, as `list` calls it. */
type ScanCall = KeyScanner['scan'];

/** One `SCAN cursor MATCH pattern COUNT n` on a node-redis client. */
async function scanOn(
  client: NodeRedisClient,
  ...[cursor, match, pattern, count, n]: Parameters<ScanCall>
): Promise<[string, string[]]> {
  const reply = (await client.sendCommand(['SCAN', cursor, match, pattern, count, String(n)])) as [
    unknown,
    unknown[],
  ];
  return [String(reply[0]), reply[1].map(String)];
}

function split(
  numKeys: number,
  rest: readonly (string | number)[],
): { keys: string[]; arguments: string[] } {
  const all = rest.map(String);
  return { keys: all.slice(0, numKeys), arguments: all.slice(numKeys) };
}

function addressOf(client: NodeRedisClient): { host: string; port: number } {
  const { url, socket } = client.options ?? {};
  if (url) {
    try {
      const parsed = new URL(url);
      return { host: parsed.hostname, port: Number(parsed.port || 6379) };
    } catch {
      // fall through
    }
  }
  return { host: socket?.host ?? 'localhost', port: socket?.port ?? 6379 };
}
