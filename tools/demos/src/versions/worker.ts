/**
 * One client process of the versions demo, forked by `clients.ts`. It holds one connection to
 * the demo's Redis and one lock of its version's design: a naive lock from `naive-locks.ts`
 * (v1–v4, written straight on ioredis) or a fencelock lease (v5). It does nothing by itself:
 * it answers the orchestrator's commands one at a time (see `protocol.ts`), so the orchestrator
 * decides when each step happens and can crash or pause this process between two of them.
 *
 * The resource it writes is an unfenced Redis string (v1–v4: any write lands) or a `RedisFence`
 * register (v5: a write carrying an older fencing token than one already accepted is refused).
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import {
  type AcquireEvent,
  CHANNELS,
  createLocker,
  type Lease,
  type Locker,
  LockTimeoutError,
  type RenewEvent,
  StaleTokenError,
} from 'fencelock';
import { RedisFence } from 'fencelock/fencing/redis';
import { Redis } from 'ioredis';
import { createNaiveLock, type NaiveLock } from './naive-locks.js';
import { type ClientConfig, type Command, FENCED_RESOURCE, type Reply } from './protocol.js';

const config = JSON.parse(process.argv[2] ?? '{}') as ClientConfig;
let closing = false;

// The orchestrator went away: stop at once, leave no orphan behind.
process.on('disconnect', () => {
  if (!closing) process.exit(1);
});
// Ctrl-C reaches the whole process group: the orchestrator stops every client itself.
process.on('SIGINT', () => undefined);

type Answer = Exclude<Reply, { type: 'ready' | 'error' | 'closed' }>;

/** A lock design as the commands see it. */
interface Design {
  /** Reach Redis (and load the backend), so a bad store fails before the scenario starts. */
  connect(): Promise<void>;
  acquire(waitMs: number): Promise<Answer>;
  prepare(): Promise<Answer>;
  write(value: string): Promise<Answer>;
  release(): Promise<Answer>;
  close(): Promise<void>;
}

function send(message: Reply): Promise<void> {
  return new Promise((resolve, reject) => {
    if (!process.send || !process.connected) {
      reject(new Error('versions demo client: no IPC channel to the orchestrator'));
      return;
    }
    process.send(message, undefined, {}, (error) => (error ? reject(error) : resolve()));
  });
}

function openRedis(): Redis {
  const client = new Redis(config.redisUrl, { maxRetriesPerRequest: 2, connectTimeout: 5000 });
  // Commands report their own failures; without a listener ioredis would log each reconnect.
  client.on('error', () => undefined);
  return client;
}

async function quit(client: Redis): Promise<void> {
  if (client.status === 'end') return;
  await client.quit().catch(() => client.disconnect());
}

/** v1–v4: a naive lock and an unfenced resource. */
class NaiveDesign implements Design {
  readonly #redis = openRedis();
  readonly #lock: NaiveLock;

  constructor() {
    const version = config.version;
    if (version === 'v5') throw new Error('v5 is not a naive design');
    this.#lock = createNaiveLock(version, this.#redis, config.lockKey, config.ttlMs);
  }

  async connect(): Promise<void> {
    await this.#redis.ping();
  }

  async acquire(waitMs: number): Promise<Answer> {
    const startedAt = performance.now();
    let attempts = 0;
    for (;;) {
      attempts += 1;
      const granted = await this.#lock.tryAcquire();
      const waitedMs = Math.round(performance.now() - startedAt);
      if (granted) {
        return { type: 'acquired', attempts, waitedMs, owner: this.#lock.owner, token: null };
      }
      const leftMs = waitMs - (performance.now() - startedAt);
      if (leftMs <= 0) return { type: 'busy', attempts, waitedMs };
      await delay(Math.min(config.pollMs, leftMs));
    }
  }

  async prepare(): Promise<Answer> {
    const read = await this.#redis.get(config.resourceKey);
    return { type: 'prepared', believesHeld: this.#lock.believesHeld(), read };
  }

  async write(value: string): Promise<Answer> {
    // An unfenced resource: nothing to check a write against, so every write lands.
    await this.#redis.set(config.resourceKey, value);
    return { type: 'wrote', accepted: true, refusal: null };
  }

  async release(): Promise<Answer> {
    const lossNoticed = this.#lock.lossNoticed;
    const renewals = this.#lock.renewals;
    const { result, deletedOwner } = await this.#lock.release();
    return { type: 'released', result, deletedOwner, renewals, lossNoticed };
  }

  async close(): Promise<void> {
    this.#lock.stop();
    await quit(this.#redis);
  }
}

/** v5: a fencelock lease (watchdog on) and a `RedisFence` register. */
class FencedDesign implements Design {
  readonly #locker: Locker = createLocker(config.store, { ttlMs: config.ttlMs });
  readonly #redis = openRedis();
  readonly #fence = new RedisFence(this.#redis, config.resourceKey);
  #lease: Lease | undefined;
  #acquireAttempts: number | null = null;
  #renewals = 0;
  readonly #onAcquire = (message: unknown) => {
    const event = message as AcquireEvent;
    if (event.key === config.lockKey) this.#acquireAttempts = event.attempts;
  };
  readonly #onRenew = (message: unknown) => {
    const event = message as RenewEvent;
    if (event.ok && event.owner === this.#lease?.owner) this.#renewals += 1;
  };

  async connect(): Promise<void> {
    diagnostics_channel.subscribe(CHANNELS.acquire, this.#onAcquire);
    diagnostics_channel.subscribe(CHANNELS.renew, this.#onRenew);
    // Load the backend and reach Redis now, so a bad store fails before the scenario starts.
    await this.#locker.inspect(config.lockKey);
    await this.#redis.ping();
  }

  async acquire(waitMs: number): Promise<Answer> {
    const startedAt = performance.now();
    this.#acquireAttempts = null;
    try {
      this.#lease = await this.#locker.acquire(config.lockKey, { ttlMs: config.ttlMs, waitMs });
    } catch (error) {
      if (!(error instanceof LockTimeoutError)) throw error;
      const waitedMs = Math.round(performance.now() - startedAt);
      return { type: 'busy', attempts: this.#acquireAttempts, waitedMs };
    }
    this.#renewals = 0;
    return {
      type: 'acquired',
      attempts: this.#acquireAttempts,
      waitedMs: Math.round(performance.now() - startedAt),
      owner: this.#lease.owner,
      token: String(this.#lease.fencingToken),
    };
  }

  async prepare(): Promise<Answer> {
    const lease = this.#held();
    const record = await this.#fence.read(FENCED_RESOURCE);
    return { type: 'prepared', believesHeld: !lease.signal.aborted, read: record?.value ?? null };
  }

  async write(value: string): Promise<Answer> {
    const lease = this.#held();
    try {
      await this.#fence.write(FENCED_RESOURCE, lease.fencingToken, value);
    } catch (error) {
      if (!(error instanceof StaleTokenError)) throw error;
      return { type: 'wrote', accepted: false, refusal: `${error.name}: ${error.message}` };
    }
    return { type: 'wrote', accepted: true, refusal: null };
  }

  async release(): Promise<Answer> {
    const lease = this.#held();
    const lossNoticed = lease.signal.aborted;
    const renewals = this.#renewals;
    const result = await lease.release();
    this.#lease = undefined;
    return { type: 'released', result, deletedOwner: null, renewals, lossNoticed };
  }

  async close(): Promise<void> {
    diagnostics_channel.unsubscribe(CHANNELS.acquire, this.#onAcquire);
    diagnostics_channel.unsubscribe(CHANNELS.renew, this.#onRenew);
    try {
      await this.#locker.close();
    } finally {
      await quit(this.#redis);
    }
  }

  #held(): Lease {
    if (this.#lease === undefined) throw new Error(`client ${config.name} holds no lease`);
    return this.#lease;
  }
}

async function handle(design: Design, command: Command): Promise<Reply> {
  switch (command.type) {
    case 'acquire':
      return design.acquire(command.waitMs);
    case 'prepare':
      return design.prepare();
    case 'write':
      return design.write(command.value);
    case 'release':
      return design.release();
    case 'close':
      closing = true;
      await design.close();
      return { type: 'closed' };
  }
}

async function main(): Promise<void> {
  const design = config.version === 'v5' ? new FencedDesign() : new NaiveDesign();
  try {
    await design.connect();
  } catch (error) {
    await design.close().catch(() => undefined);
    throw error;
  }
  // One command at a time, in arrival order.
  let queue = Promise.resolve();
  process.on('message', (command: Command) => {
    queue = queue.then(async () => {
      let reply: Reply;
      try {
        reply = await handle(design, command);
      } catch (error) {
        reply = errorReply(error);
      }
      await send(reply).catch(() => undefined);
      if (reply.type === 'closed') process.disconnect();
    });
  });
  await send({ type: 'ready', pid: process.pid });
}

function errorReply(error: unknown): Reply {
  const message = error instanceof Error ? error.message : String(error);
  const stack = error instanceof Error ? error.stack : undefined;
  return stack === undefined ? { type: 'error', message } : { type: 'error', message, stack };
}

main().catch(async (error: unknown) => {
  await send(errorReply(error)).catch(() => undefined);
  closing = true;
  process.exit(1);
});
