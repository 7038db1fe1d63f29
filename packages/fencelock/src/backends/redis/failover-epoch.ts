/**
 * The failover epoch of a Sentinel-managed primary, for fencing tokens that do not go back
 * across a failover.
 *
 * Replication is asynchronous: a replica promoted before it received the latest grant has an
 * older fencing counter, and would hand out a token already used. Sentinel numbers every
 * failover (the primary's `config-epoch`), so the Redis backend on Sentinel makes its token
 * `epoch × 2^53 + counter`: any token of a newer primary is larger than every token of an older
 * one. The counter is the granting script's (the server's clock in µs at least, below 2^53 until
 * the year 2255); tokens of the former `epoch × 2^32 + counter` form are all below the new ones.
 * A token fits a PostgreSQL `bigint` (the PgFence guard) up to epoch 1023. The epoch is read from the Sentinels after each (re)connection, only from Sentinels that
 * name the very primary this client is connected to (a Sentinel that has not yet seen the
 * failover names the old one and is not believed).
 */
import { Redis } from 'ioredis';
import { BackendError } from '../../errors.js';
import type { SentinelConfig } from './url.js';

/** Bits of the counter in a token on Sentinel: a clock in µs needs 51 now, 53 until 2255. */
const COUNTER_BITS = 53n;
const COUNTER_MASK = (1n << COUNTER_BITS) - 1n;

/** `epoch × 2^53 + counter`. */
export function composeToken(epoch: bigint, counter: bigint): bigint {
  return (epoch << COUNTER_BITS) | (counter & COUNTER_MASK);
}

/** The per-key counter inside a token made by `composeToken`. */
export function counterOf(token: bigint): bigint {
  return token & COUNTER_MASK;
}

/** The epoch a grant was made in, and the connection generation it was read for. */
export interface EpochReading {
  readonly epoch: bigint;
  readonly generation: number;
}

/** Tracks the failover epoch of the primary a Sentinel-aware ioredis client is connected to. */
export class FailoverEpoch {
  readonly #client: Redis;
  readonly #sentinel: SentinelConfig;
  readonly #timeoutMs: number;
  #reading: Promise<EpochReading> | undefined;
  /** Bumped whenever the client's connection closes: the next primary may be another one. */
  #generation = 0;

  constructor(client: Redis, sentinel: SentinelConfig, timeoutMs: number) {
    this.#client = client;
    this.#sentinel = sentinel;
    this.#timeoutMs = timeoutMs;
    client.on('close', () => {
      this.#generation += 1;
      this.#reading = undefined;
    });
  }

  /** Increases with every lost connection of the client. */
  get generation(): number {
    return this.#generation;
  }

  /**
   * The epoch of the primary the client is connected to now (read once per connection).
   * @throws BackendError when no Sentinel confirms that primary.
   */
  current(): Promise<EpochReading> {
    const reading = this.#reading ?? this.#read();
    this.#reading = reading;
    reading.catch(() => {
      if (this.#reading === reading) this.#reading = undefined;
    });
    return reading;
  }

  async #read(): Promise<EpochReading> {
    // Through the client's queue: resolves once it is connected (to the current primary).
    await this.#client.ping();
    const generation = this.#generation;
    const socket = (
      this.#client as unknown as { stream?: { remoteAddress?: string; remotePort?: number } }
    ).stream;
    const host = socket?.remoteAddress?.replace(/^::ffff:/, '');
    const port = socket?.remotePort;
    const answers = await Promise.all(
      this.#sentinel.sentinels.map((s) => this.#askSentinel(s.host, s.port)),
    );
    let epoch: bigint | undefined;
    for (const answer of answers) {
      if (answer === undefined || answer.ip !== host || answer.port !== port) continue;
      if (epoch === undefined || answer.epoch > epoch) epoch = answer.epoch;
    }
    if (epoch === undefined) {
      throw new BackendError(
        'redis',
        'read the failover epoch',
        new Error(`no Sentinel names ${host}:${port} as the primary "${this.#sentinel.name}"`),
      );
    }
    return { epoch, generation };
  }

  async #askSentinel(
    host: string,
    port: number,
  ): Promise<{ ip: string; port: number; epoch: bigint } | undefined> {
    const sentinel = new Redis({
      host,
      port,
      lazyConnect: true,
      connectTimeout: this.#timeoutMs,
      commandTimeout: this.#timeoutMs,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      ...(this.#sentinel.password ? { password: this.#sentinel.password } : {}),
    });
    sentinel.on('error', () => undefined);
    try {
      await sentinel.connect();
      const flat = (await sentinel.call('SENTINEL', 'MASTER', this.#sentinel.name)) as string[];
      const fields = new Map<string, string>();
      for (let i = 0; i + 1 < flat.length; i += 2) fields.set(flat[i]!, flat[i + 1]!);
      const epoch = fields.get('config-epoch');
      const ip = fields.get('ip');
      if (epoch === undefined || ip === undefined) return undefined;
      return { ip, port: Number(fields.get('port')), epoch: BigInt(epoch) };
    } catch {
      return undefined; // this Sentinel is down or does not know the primary: others decide
    } finally {
      sentinel.disconnect();
    }
  }
}
