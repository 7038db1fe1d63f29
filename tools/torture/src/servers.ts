/**
 * Engine processes a torture run starts for itself, on free loopback ports and in temporary
 * folders, so that faults which crash or lose data (F4, F11) never touch the shared engines of
 * `scripts/services.sh`: a Redis server (with AOF for the crash-restart cells) and a Sentinel
 * group of fault F4 (one primary, one replica, one Sentinel).
 *
 * Every process is a direct child of the harness (never daemonized), signalled only by its own
 * PID; `stop()` kills what is left and removes the folder.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A free TCP port on 127.0.0.1 (picked by the kernel, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}

/** Send one inline command to a Redis-protocol server on 127.0.0.1 and return the raw reply. */
export function redisCommand(port: number, command: string, timeoutMs = 1_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host: '127.0.0.1', port });
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer from 127.0.0.1:${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('connect', () => socket.write(`${command}\r\n`));
    socket.on('data', (data) => {
      reply += data.toString('utf8');
      if (complete(reply)) {
        clearTimeout(timer);
        socket.end();
        resolve(reply);
      }
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

/** Whether `reply` holds one whole RESP reply (simple, error, integer, bulk or flat array). */
function complete(reply: string): boolean {
  const lines = reply.split('\r\n');
  const head = lines[0] ?? '';
  if (lines.length < 2) return false;
  switch (head[0]) {
    case '+':
    case '-':
    case ':':
      return true;
    case '$': {
      const size = Number(head.slice(1));
      return size < 0 || Buffer.byteLength(reply) >= head.length + 2 + size + 2;
    }
    case '*': {
      const count = Number(head.slice(1));
      if (count <= 0) return true;
      // Flat arrays of bulk strings only (what the faults ask for): 2 lines per element.
      return lines.length >= 1 + 2 * count + 1;
    }
    default:
      return true;
  }
}

/** The bulk strings of a flat RESP array reply (null elements as undefined). */
export function bulkStrings(reply: string): (string | undefined)[] {
  const lines = reply.split('\r\n');
  const out: (string | undefined)[] = [];
  for (let i = 1; i < lines.length - 1; i += 2) {
    out.push(lines[i] === '$-1' ? undefined : lines[i + 1]);
  }
  return out;
}

async function until(
  check: () => Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (performance.now() > deadline) throw new Error(`${what}: not ready within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** One redis-server (or Sentinel) child process on a fixed port, restartable on its folder. */
export class RedisProcess {
  readonly port: number;
  readonly dir: string;
  readonly #args: readonly string[];
  #child: ChildProcess | undefined;
  #running = false;
  #exited: Promise<void> = Promise.resolve();

  /**
   * @param args extra redis-server arguments (a config file first for a Sentinel).
   * @param dir the server's working folder (AOF files, Sentinel config); kept across restarts.
   */
  constructor(port: number, dir: string, args: readonly string[]) {
    this.port = port;
    this.dir = dir;
    this.#args = args;
  }

  get pid(): number | undefined {
    return this.#running ? this.#child?.pid : undefined;
  }

  /** Start it and wait until it answers PING (not -LOADING). */
  async start(): Promise<void> {
    if (this.pid !== undefined) return;
    const child = spawn('redis-server', [...this.#args], {
      cwd: this.dir,
      stdio: 'ignore',
    });
    this.#child = child;
    this.#running = true;
    this.#exited = new Promise((resolve) => {
      const gone = () => {
        this.#running = false;
        resolve();
      };
      child.once('exit', gone);
      child.once('error', gone);
    });
    const deadline = performance.now() + 20_000;
    for (;;) {
      if (!this.#running) throw new Error(`redis-server on ${this.port} exited at start`);
      const reply = await redisCommand(this.port, 'PING', 500).catch(() => '');
      if (reply.startsWith('+PONG')) return;
      if (performance.now() > deadline) {
        throw new Error(`redis-server on ${this.port} did not answer within 20 s`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /** Send a signal to the process, if it runs. */
  signal(signal: NodeJS.Signals): void {
    if (this.pid !== undefined) this.#child?.kill(signal);
  }

  /** kill -9, and wait until it is gone. */
  async crash(): Promise<void> {
    this.signal('SIGKILL');
    await this.#exited;
  }

  /** Stop it (SIGCONT then SIGKILL: nothing of a torture server needs a clean shutdown). */
  async stop(): Promise<void> {
    this.signal('SIGCONT');
    await this.crash();
  }
}

/** A private Redis server, optionally with AOF (`appendfsync everysec` or `always`). */
export class OwnRedis {
  readonly appendfsync: 'everysec' | 'always' | undefined;
  #dir: string | undefined;
  #process: RedisProcess | undefined;

  constructor(appendfsync?: 'everysec' | 'always') {
    this.appendfsync = appendfsync;
  }

  get port(): number {
    if (this.#process === undefined) throw new Error('the server is not started');
    return this.#process.port;
  }

  get process(): RedisProcess {
    if (this.#process === undefined) throw new Error('the server is not started');
    return this.#process;
  }

  async start(): Promise<void> {
    const dir = mkdtempSync(join(tmpdir(), 'fencelock-torture-redis-'));
    this.#dir = dir;
    const port = await freePort();
    const persistence =
      this.appendfsync === undefined
        ? ['--appendonly', 'no']
        : ['--appendonly', 'yes', '--appendfsync', this.appendfsync];
    this.#process = new RedisProcess(port, dir, [
      '--bind',
      '127.0.0.1',
      '--port',
      String(port),
      '--dir',
      dir,
      '--save',
      '',
      ...persistence,
      '--logfile',
      join(dir, 'redis.log'),
    ]);
    await this.#process.start();
  }

  async stop(): Promise<void> {
    await this.#process?.stop();
    if (this.#dir !== undefined) rmSync(this.#dir, { recursive: true, force: true });
    this.#dir = undefined;
  }
}

/** Name the private Sentinel watches its primary under. */
export const OWN_SENTINEL_MASTER = 'fencelock';

/**
 * Fault F4's deployment: a primary, one replica and one Sentinel (quorum 1,
 * down-after-milliseconds 1000, failover-timeout 5000), no persistence.
 */
export class OwnSentinelGroup {
  #dir: string | undefined;
  #nodes: RedisProcess[] = [];
  #sentinel: RedisProcess | undefined;

  /** The data nodes: [0] the primary at start, [1] its replica. */
  get nodes(): readonly RedisProcess[] {
    return this.#nodes;
  }

  get sentinel(): RedisProcess {
    if (this.#sentinel === undefined) throw new Error('the group is not started');
    return this.#sentinel;
  }

  async start(): Promise<void> {
    const dir = mkdtempSync(join(tmpdir(), 'fencelock-torture-sentinel-'));
    this.#dir = dir;
    const [primaryPort, replicaPort, sentinelPort] = [
      await freePort(),
      await freePort(),
      await freePort(),
    ] as [number, number, number];
    const data = (port: number, extra: string[]) =>
      new RedisProcess(port, dir, [
        '--bind',
        '127.0.0.1',
        '--port',
        String(port),
        '--dir',
        dir,
        '--dbfilename',
        `dump-${port}.rdb`,
        '--save',
        '',
        '--appendonly',
        'no',
        // Full syncs at once (Redis 7 waits 5 s for more replicas to share a diskless one).
        '--repl-diskless-sync-delay',
        '0',
        '--logfile',
        join(dir, `redis-${port}.log`),
        ...extra,
      ]);
    this.#nodes = [
      data(primaryPort, []),
      data(replicaPort, ['--replicaof', '127.0.0.1', String(primaryPort)]),
    ];
    for (const node of this.#nodes) await node.start();
    await until(
      async () =>
        (await redisCommand(replicaPort, 'INFO replication')).includes('master_link_status:up'),
      20_000,
      'replica sync',
    );
    const conf = join(dir, 'sentinel.conf');
    writeFileSync(
      conf,
      [
        'bind 127.0.0.1',
        `port ${sentinelPort}`,
        `dir ${dir}`,
        `logfile ${join(dir, 'sentinel.log')}`,
        `sentinel monitor ${OWN_SENTINEL_MASTER} 127.0.0.1 ${primaryPort} 1`,
        `sentinel down-after-milliseconds ${OWN_SENTINEL_MASTER} 1000`,
        `sentinel failover-timeout ${OWN_SENTINEL_MASTER} 5000`,
        '',
      ].join('\n'),
    );
    this.#sentinel = new RedisProcess(sentinelPort, dir, [conf, '--sentinel']);
    await this.#sentinel.start();
    // The Sentinel has read the primary's INFO and knows the replica.
    await until(
      async () => {
        const fields = bulkStrings(
          await redisCommand(sentinelPort, `SENTINEL MASTER ${OWN_SENTINEL_MASTER}`),
        );
        return fields[fields.indexOf('num-slaves') + 1] === '1';
      },
      20_000,
      'sentinel sees the replica',
    );
  }

  /** The port the Sentinel names as the primary now. */
  async primaryPort(): Promise<number> {
    const reply = await redisCommand(
      this.sentinel.port,
      `SENTINEL GET-MASTER-ADDR-BY-NAME ${OWN_SENTINEL_MASTER}`,
    );
    return Number(bulkStrings(reply)[1]);
  }

  async stop(): Promise<void> {
    await Promise.allSettled([this.#sentinel?.stop(), ...this.#nodes.map((n) => n.stop())]);
    if (this.#dir !== undefined) rmSync(this.#dir, { recursive: true, force: true });
    this.#dir = undefined;
  }
}
