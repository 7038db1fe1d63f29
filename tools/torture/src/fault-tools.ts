/**
 * Tools the faults of `faults.ts` use on the engines: an nftables table of the run's own on
 * `lo`, the etcd leader, the ZooKeeper session behind a lock node and the server it is connected
 * to, Curator's `KillSession` trick, and the libfaketime library. Each tool touches only what it
 * names (one table, one member, one session); the faults undo what they did.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import {
  type NativeZooKeeper,
  type NativeZooKeeperClass,
  outsideNativeCallbacks,
} from 'fencelock/zookeeper';
import { PORTS } from './topologies.js';

const run = promisify(execFile);

// --- nftables -------------------------------------------------------------------------------

/** Why nft cannot be used here (missing, or no permission), or undefined when it can. */
export async function nftUnavailable(): Promise<string | undefined> {
  try {
    await run('nft', ['list', 'tables']);
    return undefined;
  } catch (error) {
    const code = (error as { code?: string }).code;
    return code === 'ENOENT'
      ? 'nft is not installed (scripts/install-engines.sh installs nftables)'
      : `nft cannot be used: ${(error as Error).message.split('\n')[0]} (root is needed)`;
  }
}

/** One `ip` table of the run's own with one output chain; `remove()` deletes the whole table. */
export class NftTable {
  readonly name = `fencelock_torture_${process.pid}_${randomBytes(3).toString('hex')}`;
  #created = false;

  /** Create the table with `rules` (nft rule syntax) in a chain on the output hook. */
  async create(rules: readonly string[]): Promise<void> {
    await run('nft', ['add', 'table', 'ip', this.name]);
    this.#created = true;
    await run('nft', [
      'add',
      'chain',
      'ip',
      this.name,
      'out',
      '{ type filter hook output priority 0; }',
    ]);
    for (const rule of rules) {
      await run('nft', ['add', 'rule', 'ip', this.name, 'out', ...rule.split(' ')]);
    }
  }

  async remove(): Promise<void> {
    if (!this.#created) return;
    await run('nft', ['delete', 'table', 'ip', this.name]);
    this.#created = false;
  }
}

// --- etcd -----------------------------------------------------------------------------------

/** etcdctl against the shared cluster of scripts/services.sh, with short timeouts. */
async function etcdctl(...args: string[]): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, ETCDCTL_API: '3' };
  for (const name of Object.keys(env)) {
    if (name.startsWith('ETCD_') || (name.startsWith('ETCDCTL_') && name !== 'ETCDCTL_API')) {
      delete env[name];
    }
  }
  const { stdout } = await run('etcdctl', ['--dial-timeout=1s', '--command-timeout=2s', ...args], {
    env,
  });
  return stdout;
}

/** Member numbers (1..3) of the shared etcd cluster. */
export const ETCD_MEMBERS = [1, 2, 3] as const;

/**
 * The member (1..3) that is the leader now, from `etcdctl endpoint status` (the simple format's
 * fifth field says whether the endpoint is the leader).
 */
export async function etcdLeader(): Promise<number | undefined> {
  const endpoints = ETCD_MEMBERS.map((n) => `http://127.0.0.1:${PORTS.etcdClientBase + n}`);
  const out = await etcdctl(`--endpoints=${endpoints.join(',')}`, 'endpoint', 'status').catch(
    (error: { stdout?: string }) => error.stdout ?? '',
  );
  for (const line of out.split('\n')) {
    const fields = line.split(',').map((f) => f.trim());
    if (fields[4] !== 'true') continue;
    const port = Number(/:(\d+)$/.exec(fields[0] ?? '')?.[1]);
    const member = port - PORTS.etcdClientBase;
    if ((ETCD_MEMBERS as readonly number[]).includes(member)) return member;
  }
  return undefined;
}

// --- ZooKeeper ------------------------------------------------------------------------------

/** Server numbers (1..3) of the shared ensemble; server n serves clients on base + n − 1. */
export const ZK_SERVERS = [1, 2, 3] as const;

/** The shared ensemble's connect string. */
export function zkConnectString(): string {
  return ZK_SERVERS.map((n) => `127.0.0.1:${PORTS.zkClientBase + n - 1}`).join(',');
}

const JAVA_MULTIPLIER = 0x5deece66dn;
const JAVA_MASK = (1n << 48n) - 1n;

/**
 * `java.util.Random(seed).nextBytes(count)`: the 48-bit linear congruential generator, each
 * `nextInt()` giving four bytes, low byte first.
 */
export function javaRandomBytes(seed: bigint, count: number): Buffer {
  let state = (BigInt.asUintN(64, seed) ^ JAVA_MULTIPLIER) & JAVA_MASK;
  const bytes = Buffer.alloc(count);
  let i = 0;
  while (i < count) {
    state = (state * JAVA_MULTIPLIER + 0xbn) & JAVA_MASK;
    let word = Number(BigInt.asIntN(32, state >> 16n));
    for (let k = 0; k < 4 && i < count; k++, word >>= 8) bytes[i++] = word & 0xff;
  }
  return bytes;
}

/**
 * The password of ZooKeeper session `sessionIdHex` (hex, as the C client and `ephemeralOwner`
 * print it). The server does not store passwords: it derives each from the session id
 * (`ZooKeeperServer.generatePasswd`: `new Random(id ^ 0xB3415C00L)`, 16 bytes) and checks a
 * reconnecting client's password against it. Returned as the C client binding reads and prints
 * passwords: 32 upper-case hex digits (it does not parse lower-case ones).
 */
export function zkSessionPassword(sessionIdHex: string): string {
  const id = BigInt.asIntN(64, BigInt(`0x${sessionIdHex}`));
  return javaRandomBytes(id ^ 0xb3415c00n, 16)
    .toString('hex')
    .toUpperCase();
}

async function nativeZooKeeper(): Promise<NativeZooKeeperClass> {
  const module = (await import('zookeeper')) as unknown as { default: NativeZooKeeperClass };
  return module.default;
}

/** Open a client on the shared ensemble (optionally resuming session `id`), or throw. */
async function zkConnect(
  timeoutMs: number,
  session?: { id: string; password: string },
): Promise<NativeZooKeeper> {
  const ZooKeeper = await nativeZooKeeper();
  await outsideNativeCallbacks();
  const zk = new ZooKeeper({
    connect: zkConnectString(),
    timeout: 4_000,
    debug_level: 0,
    host_order_deterministic: false,
    ...(session === undefined ? {} : { client_id: session.id, client_password: session.password }),
  });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      zk.close();
      reject(new Error(`no ZooKeeper session within ${timeoutMs} ms`));
    }, timeoutMs);
    zk.on('connect', () => {
      clearTimeout(timer);
      resolve();
    });
    zk.on('close', () => {
      clearTimeout(timer);
      reject(new Error('ZooKeeper client closed while connecting'));
    });
    zk.init({});
  });
  return zk;
}

/**
 * The session id (hex) of the holder of `lockDir`: the `ephemeralOwner` of its lowest-sequence
 * contender node (fencelock's layout `_c_<owner>-<w|r>-<sequence>`), or undefined when no node.
 */
export async function zkHolderSession(lockDir: string): Promise<string | undefined> {
  const zk = await zkConnect(5_000);
  try {
    const children = await new Promise<string[]>((resolve, reject) =>
      zk.a_get_children(lockDir, false, (rc, error, names) =>
        rc === 0 ? resolve(names) : reject(new Error(`${error} (${rc})`)),
      ),
    );
    const lowest = children
      .filter((name) => /-\d{10}$/.test(name))
      .sort((a, b) => Number(a.slice(-10)) - Number(b.slice(-10)))[0];
    if (lowest === undefined) return undefined;
    const stat = await new Promise<{ ephemeralOwner: string }>((resolve, reject) =>
      zk.a_exists(`${lockDir}/${lowest}`, false, (rc, error, value) =>
        rc === 0 ? resolve(value) : reject(new Error(`${error} (${rc})`)),
      ),
    );
    return stat.ephemeralOwner === '0' ? undefined : stat.ephemeralOwner;
  } finally {
    zk.close();
  }
}

/**
 * Curator's `KillSession`: connect with session `id` and its password (which moves the session
 * onto this connection and drops the owner's), then close it, which ends the session on the
 * ensemble: its ephemeral nodes are deleted, and its owner learns "session expired" when it
 * reconnects.
 */
export async function zkKillSession(id: string): Promise<void> {
  const zk = await zkConnect(5_000, { id, password: zkSessionPassword(id) });
  const resumed = zk.client_id === id;
  zk.close();
  if (!resumed) throw new Error(`ZooKeeper did not resume session ${id} (expired already?)`);
}

/** A four-letter-word command to ZooKeeper server `n`; its answer. */
export function zk4lw(n: number, word: string, timeoutMs = 2_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port: PORTS.zkClientBase + n - 1 });
    let answer = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`zk${n} did not answer ${word} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('connect', () => socket.write(word));
    socket.on('data', (data) => {
      answer += data.toString('utf8');
    });
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(answer);
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** The server (1..3) that holds a connection of session `id` (`cons` lists `sid=0x…`). */
export async function zkServerOf(id: string): Promise<number | undefined> {
  for (const n of ZK_SERVERS) {
    const cons = await zk4lw(n, 'cons').catch(() => '');
    if (new RegExp(`sid=0x0*${id.replace(/^0+/, '')}\\b`, 'i').test(cons)) return n;
  }
  return undefined;
}

// --- libfaketime ----------------------------------------------------------------------------

/** Path of Debian's libfaketime (package `libfaketime`), or undefined when not installed. */
export function libfaketimePath(): string | undefined {
  let dirs: string[];
  try {
    dirs = readdirSync('/usr/lib').filter((d) => d.endsWith('-linux-gnu'));
  } catch {
    return undefined;
  }
  return dirs
    .map((d) => join('/usr/lib', d, 'faketime', 'libfaketime.so.1'))
    .find((path) => existsSync(path));
}
