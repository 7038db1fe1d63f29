/**
 * Shared bits of the ZooKeeper fault tests (faults.test.ts, session-states.test.ts): store URLs
 * on the 3-server ensemble of `scripts/services.sh`, a test-only admin client, four-letter-word
 * probes (which server a session is connected to, which server leads), `zk-member` faults with
 * bookkeeping so that every faulted member is restored, and small polling helpers.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { ZkSession } from '../../../packages/fencelock/src/backends/zookeeper/session.js';
import {
  createLocker,
  type Locker,
  type LockerOptions,
} from '../../../packages/fencelock/src/index.js';
import { ZK_CLIENT_PORT_BASE, ZK_HOSTS } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { openAdmin, removeTree, type ZkAdmin } from '../../helpers/zookeeper.js';

const run = promisify(execFile);
export const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export type ServerNumber = 1 | 2 | 3;
export const SERVERS: readonly ServerNumber[] = [1, 2, 3];

/** Client port of ensemble server n. */
export const portOf = (n: ServerNumber): number => ZK_CLIENT_PORT_BASE + n - 1;

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** A namespace (top node) no other run or test file uses. */
export function uniqueNamespace(tag: string): string {
  return `fencelock-it-zk-${tag}-${process.pid}-${randomBytes(3).toString('hex')}`;
}

/** `zk://hosts/namespace[?query]`. */
export function zkUrl(namespace: string, hosts = ZK_HOSTS, query = ''): string {
  return `zk://${hosts}/${namespace}${query ? `?${query}` : ''}`;
}

/** Poll `check` every 5 ms until it is true; throws after `timeoutMs`. */
export async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() >= deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await sleep(5);
  }
}

export { settledWithin } from '../../helpers/promises.js';

/** `performance.now()` when `signal` aborts (filled in later; undefined until then). */
export function abortTime(signal: AbortSignal): { at: number | undefined } {
  const record: { at: number | undefined } = { at: signal.aborted ? performance.now() : undefined };
  signal.addEventListener(
    'abort',
    () => {
      record.at ??= performance.now();
    },
    { once: true },
  );
  return record;
}

/** A four-letter word's answer from server n ('' when it does not answer within 2 s). */
export function fourLetter(n: ServerNumber, word: string): Promise<string> {
  return new Promise((resolve) => {
    let answer = '';
    const socket = connect(portOf(n), '127.0.0.1', () => socket.write(word));
    const timer = setTimeout(() => socket.destroy(), 2000);
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString();
    });
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer);
    });
  });
}

/** `leader`, `follower`, or undefined when server n does not serve. */
export async function modeOf(n: ServerNumber): Promise<string | undefined> {
  return /^Mode: (\w+)/m.exec(await fourLetter(n, 'srvr'))?.[1];
}

/**
 * The servers a session (hex id, as `ZkSession.id`) has a connection to now, from each server's
 * `cons` (its client connections, with their session ids).
 */
export async function serversOfSession(sessionId: string): Promise<ServerNumber[]> {
  const found: ServerNumber[] = [];
  for (const n of SERVERS) {
    if ((await fourLetter(n, 'cons')).includes(`sid=0x${sessionId},`)) found.push(n);
  }
  return found;
}

/** Every server serves, one of them as the leader. */
export async function ensembleHealthy(): Promise<boolean> {
  const modes = await Promise.all(SERVERS.map(modeOf));
  return (
    modes.every((m) => m === 'leader' || m === 'follower') &&
    modes.filter((m) => m === 'leader').length === 1
  );
}

/** `scripts/services.sh zk-member <action> <n>`; resolves with its log (stderr). */
async function zkMember(action: 'kill' | 'start', n: ServerNumber): Promise<string> {
  const { stderr } = await run(
    'bash',
    [`${ROOT}scripts/services.sh`, 'zk-member', action, `${n}`],
    {
      cwd: ROOT,
      timeout: 60_000,
    },
  );
  return stderr;
}

/** Members this file killed and has not started again. */
const killed = new Set<ServerNumber>();
/** Kill scripts still running (a test that failed meanwhile does not wait for them). */
const killing = new Set<Promise<unknown>>();

/** SIGKILL ensemble server n; `restoreEnsemble()` (run after every test) starts it again. */
export async function killServer(n: ServerNumber): Promise<void> {
  killed.add(n);
  const kill = zkMember('kill', n);
  const settled = kill.catch(() => undefined);
  killing.add(settled);
  try {
    await kill;
  } finally {
    killing.delete(settled);
  }
}

/**
 * Start every member this file killed, and any other that does not serve (left down by a run
 * that was interrupted), and wait until the ensemble serves with 3 servers.
 */
export async function restoreEnsemble(): Promise<void> {
  // A start while the kill is still under way would find the member "already running".
  await Promise.all(killing);
  for (const n of [...killed]) {
    await zkMember('start', n);
    killed.delete(n);
  }
  const modes = await Promise.all(SERVERS.map(modeOf));
  for (const n of SERVERS.filter((_, i) => modes[i] === undefined)) {
    // "Already running" for a member that is only between leaders.
    await zkMember('start', n);
  }
  await waitUntil('ensemble of 3 healthy servers', ensembleHealthy, 30_000);
}

/** A follower (never the leader: its kill is an election). */
export async function someFollower(): Promise<ServerNumber> {
  const modes = await Promise.all(SERVERS.map(modeOf));
  const follower = SERVERS.find((_, i) => modes[i] === 'follower');
  if (follower === undefined) throw new Error(`no follower: ${modes.join(', ')}`);
  return follower;
}

/** `host:port,host:port` of the two followers (the ensemble must be healthy). */
export async function followersHosts(): Promise<string> {
  const modes = await Promise.all(SERVERS.map(modeOf));
  const followers = SERVERS.filter((_, i) => modes[i] === 'follower');
  if (followers.length !== 2) throw new Error(`not two followers: ${modes.join(', ')}`);
  return hostsOf(followers);
}

/** `host:port,…` of the given servers. */
export function hostsOf(servers: readonly ServerNumber[]): string {
  return servers.map((n) => `127.0.0.1:${portOf(n)}`).join(',');
}

/** ZooKeeper's "no node" (the promise API rejects with `Error('-101 no node')`). */
const isNoNode = (error: unknown): boolean => /^-101\b/.test(String((error as Error)?.message));

/** The contender node names under `dir`, sorted; [] when it does not exist. */
export async function nodeNames(admin: ZkAdmin, dir: string): Promise<string[]> {
  try {
    // ZooKeeper orders each client's own reads after its writes, not after other clients':
    // the admin's server may not have applied a node another client just created. `sync` first
    // makes that server catch up with the leader (seen: an empty list right after a grant).
    await admin.sync(dir);
    return (await admin.get_children(dir, false)).sort();
  } catch (error) {
    if (isNoNode(error)) return [];
    throw error;
  }
}

/** The contender nodes under `dir` with their czxid and owning session, oldest first. */
export async function nodesOf(
  admin: ZkAdmin,
  dir: string,
): Promise<{ name: string; czxid: bigint; session: string }[]> {
  const nodes: { name: string; czxid: bigint; session: string }[] = [];
  for (const name of await nodeNames(admin, dir)) {
    let stat: { czxid: number; ephemeralOwner: string };
    try {
      stat = await admin.exists(`${dir}/${name}`, false);
    } catch (error) {
      if (isNoNode(error)) continue; // deleted meanwhile
      throw error;
    }
    nodes.push({ name, czxid: BigInt(stat.czxid), session: stat.ephemeralOwner });
  }
  return nodes.sort((a, b) => (a.czxid < b.czxid ? -1 : a.czxid > b.czxid ? 1 : 0));
}

/** Poll until exactly `count` nodes exist under `dir`. */
export async function waitForNodes(
  admin: ZkAdmin,
  dir: string,
  count: number,
  timeoutMs = 10_000,
): Promise<void> {
  let seen: string[] = [];
  try {
    await waitUntil(
      `${count} nodes under ${dir}`,
      async () => {
        seen = await nodeNames(admin, dir);
        return seen.length === count;
      },
      timeoutMs,
    );
  } catch (error) {
    throw new Error(`${(error as Error).message}; last seen: [${seen.join(', ')}]`);
  }
}

/** The backend of a ZooKeeper locker. */
export async function backendOf(locker: Locker): Promise<ZookeeperBackend> {
  return (await locker.backend()) as ZookeeperBackend;
}

/** The shared session a locker's locks of `ttlMs` live in. */
export async function sessionOf(locker: Locker, ttlMs: number): Promise<ZkSession> {
  return (await backendOf(locker)).session(ttlMs);
}

/** The admin client is dead (closed by a real or a false "session expired", see below). */
const isDeadClient = (error: unknown): boolean =>
  /ZINVALIDSTATE|^-112\b|^-116\b/.test(String((error as Error)?.message));

/**
 * A test-only admin client that reopens itself when the native client has closed: killing the
 * server it is connected to can make the `zookeeper` binding report a false "session expired"
 * (its `response_counter_limit` guess) and close the handle, after which every call returns
 * ZINVALIDSTATE. Reads are idempotent, so a failed call is retried once on a new client.
 */
class ReopeningAdmin implements ZkAdmin {
  #client: Promise<ZkAdmin>;

  constructor(client: ZkAdmin) {
    this.#client = Promise.resolve(client);
  }

  get client_id(): string {
    return '';
  }

  async #call<T>(run: (zk: ZkAdmin) => Promise<T>): Promise<T> {
    const current = this.#client;
    try {
      return await run(await current);
    } catch (error) {
      if (!isDeadClient(error)) throw error;
      if (this.#client === current) {
        (await current).close();
        this.#client = openAdmin();
      }
      return run(await this.#client);
    }
  }

  get_children(path: string, watch: boolean) {
    return this.#call((zk) => zk.get_children(path, watch));
  }
  sync(path: string) {
    return this.#call((zk) => zk.sync(path));
  }
  exists(path: string, watch: boolean) {
    return this.#call((zk) => zk.exists(path, watch));
  }
  get(path: string, watch: boolean) {
    return this.#call((zk) => zk.get(path, watch));
  }
  delete_(path: string, version: number) {
    return this.#call((zk) => zk.delete_(path, version));
  }
  create(path: string, data: string, flags: number) {
    return this.#call((zk) => zk.create(path, data, flags));
  }
  close(): void {
    void this.#client.then(
      (zk) => zk.close(),
      () => undefined,
    );
  }
}

/**
 * One namespace for a test file: URLs on it, an admin client, lockers and proxies that are
 * closed after each test, killed members restarted after each test, and the namespace's nodes
 * removed after the file.
 */
export function useZookeeper(tag: string): {
  readonly namespace: string;
  readonly admin: ZkAdmin;
  url(hosts?: string, query?: string): string;
  locker(url: string, options?: LockerOptions): Locker;
  proxy(n: ServerNumber): Promise<TcpProxy>;
} {
  const namespace = uniqueNamespace(tag);
  const lockers: Locker[] = [];
  const proxies: TcpProxy[] = [];
  let admin: ZkAdmin | undefined;
  beforeAll(async () => {
    await restoreEnsemble();
    admin = new ReopeningAdmin(await openAdmin());
  }, 60_000);
  afterEach(async () => {
    await Promise.allSettled(lockers.splice(0).map((l) => l.close()));
    await Promise.allSettled(proxies.splice(0).map((p) => p.close()));
    await restoreEnsemble();
  }, 60_000);
  afterAll(async () => {
    await restoreEnsemble().catch(() => undefined);
    if (admin !== undefined) {
      await removeTree(admin, `/${namespace}`);
      admin.close();
    }
  }, 60_000);
  return {
    namespace,
    get admin() {
      if (admin === undefined) throw new Error('the admin client opens in beforeAll');
      return admin;
    },
    url: (hosts = ZK_HOSTS, query = '') => zkUrl(namespace, hosts, query),
    locker(url, options) {
      const locker = createLocker(url, options);
      lockers.push(locker);
      return locker;
    },
    async proxy(n) {
      const proxy = await startTcpProxy({ targetPort: portOf(n) });
      proxies.push(proxy);
      return proxy;
    },
  };
}
