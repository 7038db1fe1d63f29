/**
 * Helpers of the CLI tests: run the CLI compiled from the sources (a private build, as the flash-sale
 * test does: `dist/` may be stale or rebuilt by other tests meanwhile) as a real process, the
 * child fixture it runs, and a raw view of each store that bypasses fencelock (an ioredis
 * client, or a separate SQLite connection on the same file) to read or delete a lease on the
 * engine itself.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { Redis } from 'ioredis';
import { createRedisBackend } from '../../../packages/fencelock/src/backends/redis/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';

/** The command the tests run under `fencelock run` (see its header for the modes). */
export const CHILD = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/child.mjs');

let cli: string | undefined;

/**
 * Compile the workspaces for this test file (call in `beforeAll`, with a long hook timeout).
 * @returns a function that deletes the build (call in `afterAll`).
 */
export async function buildCli(): Promise<() => void> {
  const build = await privateBuild('cli');
  cli = build.cli;
  return () => {
    cli = undefined;
    build.remove();
  };
}

/** The built CLI's entry point (after `buildCli()`), for tests that start it their own way. */
export function cliPath(): string {
  if (cli === undefined) throw new Error('buildCli() first');
  return cli;
}

/** `fencelock run` arguments that run the child fixture: `-- node child.mjs <mode> …`. */
export function childCommand(...args: string[]): string[] {
  return ['--', process.execPath, CHILD, ...args];
}

/** How a CLI process ended. */
export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A CLI process still running. */
export interface RunningCli {
  readonly process: ChildProcess;
  /**
   * Settles when the CLI process itself has exited, with its exit code. Its output may stay open
   * after that, as long as a process it left behind holds it.
   */
  readonly exited: Promise<number | null>;
  /** Settles when it has exited and its output is closed. */
  readonly done: Promise<CliResult>;
}

const running = new Set<ChildProcess>();

/** Options of `startCli` / `runCli`: working folder, extra environment, text sent on stdin. */
export interface CliOptions {
  readonly cwd?: string;
  readonly env?: Record<string, string>;
  /** Written to the CLI's stdin, which is then closed (default: no stdin at all). */
  readonly input?: string;
}

/** Start `fencelock <args>` in `cwd` with extra environment variables. */
export function startCli(args: readonly string[], options: CliOptions = {}): RunningCli {
  if (cli === undefined) throw new Error('buildCli() first');
  const child = spawn(process.execPath, [cli, ...args], {
    cwd: options.cwd ?? ROOT,
    env: { ...process.env, ...options.env },
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (options.input !== undefined) child.stdin?.end(options.input);
  running.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const done = new Promise<CliResult>((resolvePromise, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => {
      running.delete(child);
      resolvePromise({ code, signal, stdout, stderr });
    });
  });
  done.catch(() => undefined);
  const exited = new Promise<number | null>((resolvePromise) => {
    child.once('exit', (code) => resolvePromise(code));
  });
  return { process: child, exited, done };
}

/** Run `fencelock <args>` to its end. */
export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return startCli(args, options).done;
}

/**
 * Stop every CLI process a test left running (after a failed assertion): SIGKILL, then wait for
 * its exit. The child fixture under it exits by itself within its safety limit.
 */
export async function stopLeftovers(): Promise<void> {
  const left = [...running];
  for (const child of left) child.kill('SIGKILL');
  await Promise.all(
    left.map((child) => new Promise((resolvePromise) => child.once('close', resolvePromise))),
  );
}

/**
 * Poll `check` every 20 ms until it returns something other than undefined. The limit only
 * keeps a broken run from hanging the suite; it is not a timing assertion.
 */
export async function waitFor<T>(
  what: string,
  check: () => T | undefined | Promise<T | undefined>,
  limitMs = 15_000,
): Promise<T> {
  const deadline = performance.now() + limitMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolvePromise) => setTimeout(resolvePromise, 20));
  }
}

/** Lines of a file the child fixture appends to ([] while it does not exist). */
export function linesOf(file: string): string[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean);
}

/** Wait until `file` has a line starting with `prefix`; returns that line. */
export function lineStartingWith(file: string, prefix: string): Promise<string> {
  return waitFor(`"${prefix}" in ${file}`, () =>
    linesOf(file).find((line) => line.startsWith(prefix)),
  );
}

/** Whether process `pid` still exists. */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

/**
 * Whether process `pid` is gone: it no longer exists, or it is a zombie (dead, waiting to be
 * reaped: an orphan's new parent, e.g. a container's PID 1, may never reap it).
 */
export function processGone(pid: number): boolean {
  if (!processExists(pid)) return true;
  return processState(pid) === 'Z';
}

/** The state letter of process `pid` from /proc (Linux): R, S, T (stopped), Z…; undefined if gone. */
export function processState(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
}

/** Prefix of every key this test process uses. */
const KEY_PREFIX = `cli-test:${process.pid}:`;

/** A key no other test run (or engineer sharing the engine) uses. */
export function uniqueKey(tag: string): string {
  return `${KEY_PREFIX}${randomUUID().slice(0, 8)}:${tag}`;
}

/** A lease as the engine stores it. */
export interface RawLease {
  readonly owner: string;
  readonly token: bigint;
}

/** One store as the tests use it: its URL for `--store`, and a raw view of the engine. */
export interface StoreUnderTest {
  readonly name: 'sqlite' | 'redis';
  readonly url: string;
  /**
   * `inspect` still names the key's last token once it is free: true with Redis's per-key
   * counter; false on SQLite, whose tokens come from one counter for the file (0 then).
   */
  readonly lastTokenOutlivesHolder: boolean;
  /** The lease record of `key` on the engine, or null. */
  rawLease(key: string): Promise<RawLease | null>;
  /** Delete the lease record of `key` on the engine, behind its holder's back. */
  deleteLease(key: string): Promise<void>;
  /** Whether the engine has any record (lease or fencing counter) of `key`. */
  hasAnyRecord(key: string): Promise<boolean>;
  /** Drop what the tests created and close the raw connections. */
  close(): Promise<void>;
}

/** The embedded store in a fresh temp folder; the raw view opens its own connection per call. */
export function sqliteStore(): StoreUnderTest & { readonly dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'fencelock-cli-test-'));
  const path = join(dir, 'locks.db');
  const withDb = <T>(fn: (db: Database.Database) => T): T => {
    const db = new Database(path);
    try {
      db.defaultSafeIntegers(true);
      db.pragma('busy_timeout = 5000');
      return fn(db);
    } finally {
      db.close();
    }
  };
  return {
    name: 'sqlite',
    url: `sqlite:${path}`,
    lastTokenOutlivesHolder: false,
    dir,
    async rawLease(key) {
      const row = withDb((db) =>
        db
          .prepare<[string], { owner: string; token: bigint }>(
            'SELECT owner, token FROM fencelock_leases WHERE key = ?',
          )
          .get(key),
      );
      return row ? { owner: row.owner, token: row.token } : null;
    },
    async deleteLease(key) {
      const changes = withDb(
        (db) => db.prepare('DELETE FROM fencelock_leases WHERE key = ?').run(key).changes,
      );
      if (changes !== 1) throw new Error(`no lease row of ${key} to delete`);
    },
    async hasAnyRecord(key) {
      if (!existsSync(path)) return false;
      return withDb(
        (db) =>
          db
            .prepare<[string], { n: bigint }>(
              'SELECT count(*) AS n FROM fencelock_leases WHERE key = ?',
            )
            .get(key)!.n > 0n,
      );
    },
    async close() {
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The Redis of `scripts/services.sh`; the raw view is a separate ioredis client. */
export function redisStore(): StoreUnderTest & {
  keysOf(key: string): { lock: string; fence: string; channel: string };
} {
  const raw = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  // Only for keysOf (the default prefix, as the CLI uses); never runs a lock operation.
  const layout = createRedisBackend({ client: raw });
  const keysOf = (key: string) => layout.keysOf(key);
  return {
    name: 'redis',
    url: REDIS_URL,
    lastTokenOutlivesHolder: true,
    keysOf,
    async rawLease(key) {
      const value = await raw.get(keysOf(key).lock);
      if (value === null) return null;
      const sep = value.indexOf(':');
      return { owner: value.slice(0, sep), token: BigInt(value.slice(sep + 1)) };
    },
    async deleteLease(key) {
      const deleted = await raw.del(keysOf(key).lock);
      if (deleted !== 1) throw new Error(`no lease key of ${key} to delete`);
    },
    async hasAnyRecord(key) {
      const { lock, fence } = keysOf(key);
      return (await raw.exists(lock, fence)) > 0;
    },
    async close() {
      // Every key of this test process, whether or not a test looked at it through this view.
      const pattern = layout.keysOf(`${KEY_PREFIX}*`).lock.replace(/:lock$/, ':*');
      const keys = await raw.keys(pattern);
      if (keys.length > 0) await raw.del(...keys);
      await raw.quit();
    },
  };
}

/** Both stores `run` must work on, for `describe.each`. */
export const STORES = [
  { name: 'sqlite', make: sqliteStore },
  { name: 'redis', make: redisStore },
] as const;
