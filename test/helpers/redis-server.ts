/**
 * A private, throw-away `redis-server` for fault tests: its own free loopback port, its own temp
 * dir, no persistence. Fault tests pause, resume and stop it by PID and never touch the shared
 * server of `scripts/services.sh`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A running private Redis. */
export interface PrivateRedis {
  readonly port: number;
  /** `redis://127.0.0.1:<port>` */
  readonly url: string;
  readonly pid: number;
  /** SIGCONT, SIGTERM, then SIGKILL after 3 s; removes the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** Freeze the server (SIGSTOP): connections stay open, nothing is answered. */
  pause(): void;
  /** Thaw the server (SIGCONT). */
  resume(): void;
}

export interface StartRedisOptions {
  /** Extra `redis-server` arguments, e.g. `['--enable-debug-command', 'local']`. */
  readonly args?: readonly string[];
  /** How long to wait for PING, ms. @default 10000 */
  readonly readyTimeoutMs?: number;
}

const REDIS_SERVER = process.env.FENCELOCK_REDIS_SERVER ?? '/usr/bin/redis-server';

/** A loopback TCP port that was free a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => {
        if (address !== null && typeof address === 'object') resolve(address.port);
        else reject(new Error('no port'));
      });
    });
  });
}

/** One raw `PING` on a fresh connection; true on `+PONG`. */
export function ping(port: number, timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('error', () => done(false));
    socket.on('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString('latin1');
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const running = new Set<ChildProcess>();
let exitHookInstalled = false;

/** Last resort: never leave a server behind if the test process exits without afterAll. */
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.once('exit', () => {
    for (const child of running) {
      if (child.pid === undefined) continue;
      try {
        process.kill(child.pid, 'SIGCONT');
        process.kill(child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

/**
 * A tiny watcher that kills the server (SIGCONT, then SIGKILL, by PID) if this test process dies
 * without running its hooks (a killed worker emits no 'exit' event). Stopped first by `stop()`.
 */
function startGuard(serverPid: number): ChildProcess {
  const script =
    'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 0.5; done; ' +
    'kill -0 "$1" 2>/dev/null || { kill -CONT "$2"; kill -KILL "$2"; } 2>/dev/null';
  const guard = spawn(
    '/bin/sh',
    ['-c', script, 'fencelock-redis-guard', String(process.pid), String(serverPid)],
    { stdio: 'ignore', detached: true },
  );
  guard.on('error', () => undefined);
  guard.unref();
  return guard;
}

function killGuard(guard: ChildProcess): void {
  if (exited(guard) || guard.pid === undefined) return;
  try {
    process.kill(guard.pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, ms);
    const onExit = () => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

/**
 * Start `redis-server --port <free> --bind 127.0.0.1 --save '' --appendonly no --dir <tmp>` as a
 * direct child and wait until it answers PING. Retries on another port if the first was taken.
 */
export async function startRedis(options: StartRedisOptions = {}): Promise<PrivateRedis> {
  installExitHook();
  const readyTimeoutMs = options.readyTimeoutMs ?? 10_000;
  let lastError: unknown;
  for (let tries = 0; tries < 5; tries += 1) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'fencelock-redis-'));
    const child = spawn(
      REDIS_SERVER,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
        '--logfile',
        join(dir, 'redis.log'),
        ...(options.args ?? []),
      ],
      { stdio: 'ignore' },
    );
    child.on('error', (error) => {
      lastError = error;
    });
    running.add(child);
    child.once('exit', () => running.delete(child));
    const deadline = performance.now() + readyTimeoutMs;
    let ready = false;
    while (!exited(child) && performance.now() < deadline) {
      if (await ping(port)) {
        ready = true;
        break;
      }
      await sleep(50);
    }
    if (ready && child.pid !== undefined) return handle(child, child.pid, port, dir);
    lastError ??= new Error(`redis-server on port ${port} did not answer PING`);
    await stopChild(child);
    rmSync(dir, { recursive: true, force: true });
  }
  throw new Error(`could not start a private redis-server: ${String(lastError)}`);
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (exited(child) || child.pid === undefined) return;
  try {
    process.kill(child.pid, 'SIGCONT');
    process.kill(child.pid, 'SIGTERM');
  } catch {
    return;
  }
  if (await waitExit(child, 3_000)) return;
  try {
    process.kill(child.pid, 'SIGKILL');
  } catch {
    return;
  }
  await waitExit(child, 3_000);
}

function handle(child: ChildProcess, pid: number, port: number, dir: string): PrivateRedis {
  let stopped: Promise<void> | undefined;
  const guard = startGuard(pid);
  child.once('exit', () => killGuard(guard));
  const signal = (name: NodeJS.Signals) => {
    if (exited(child)) throw new Error(`redis-server ${pid} has exited`);
    process.kill(pid, name);
  };
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    pid,
    pause: () => signal('SIGSTOP'),
    resume: () => signal('SIGCONT'),
    stop() {
      killGuard(guard);
      stopped ??= stopChild(child).then(() => rmSync(dir, { recursive: true, force: true }));
      return stopped;
    },
  };
}
