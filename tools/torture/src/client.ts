/**
 * One torture client, a child process of the harness (`fork`). It contends for one key on a
 * store through the public Locker API (the key's lock, a permit of its semaphore when the cell
 * is a semaphore's, or the leadership of its election when it is an election's) and, once granted, writes through the fenced register, then releases,
 * over and over, reporting each step to the harness over IPC, each with the client's reading of
 * the machine's monotonic clock (see `ClientMessage`), so every client's events share one clock.
 *
 * The client writes even when its lease was already reported lost (it says so in the event): the
 * resource, not the client's good manners, must be what refuses a stale holder.
 *
 * Configuration: one JSON argument (`ClientConfig`). The harness sends `{ type: 'stop' }` to end
 * the loop after the current cycle.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { setTimeout as sleep } from 'node:timers/promises';
import { CHANNELS, createLocker, type Lease, type Locker, type RenewEvent } from 'fencelock';
import { FencedRegister } from './register.js';

/** What the harness passes to a client. */
export interface ClientConfig {
  readonly client: string;
  readonly store: string;
  readonly key: string;
  /**
   * Take a permit of the key's semaphore of this many permits instead of the key's lock; absent
   * for a lock cell.
   */
  readonly permits?: number;
  /**
   * Campaign in the key's leader election (the client's id as the value) instead of taking the
   * key's lock: the leadership's term is the token it writes with.
   */
  readonly election?: boolean;
  /**
   * The lock-delay every grant carries (`LockOptions.lockDelayMs`), ms; absent for none. Never
   * with `permits` (permits carry none).
   */
  readonly lockDelayMs?: number;
  readonly ttlMs: number;
  /** Length of the critical section, ms, spread evenly over `writes` writes. */
  readonly holdMs: number;
  /** Writes through the register per critical section (the first after holdMs / writes). */
  readonly writes: number;
  /** Longest pause between a release and the next acquire (random in [0, it]), ms. */
  readonly idleMs: number;
  readonly registerUrl: string;
  readonly registerSchema: string;
  /** False only for the checker's self-test (broken variant). */
  readonly fenced: boolean;
}

/**
 * Messages a client sends to the harness (tokens as decimal strings). `atNs`: when the step
 * happened (asked for a grant, its acquire returned, its validity was read, it was lost, its
 * release began), on the machine's monotonic clock (`process.hrtime.bigint()`, CLOCK_MONOTONIC,
 * the same in every process). The harness places the steps by these readings, not by when their
 * messages arrive: messages of different clients can be read in either order (a release and the
 * grant it let in, on a store that hands over within a millisecond, were), and a client's own
 * message can wait while its event loop is held by a synchronous engine call.
 */
export type ClientMessage =
  | { readonly type: 'ready' }
  | { readonly type: 'acquiring'; readonly atNs: string }
  | {
      readonly type: 'acquired';
      readonly token: string;
      readonly remainingMs: number;
      readonly atNs: string;
    }
  | { readonly type: 'validity'; readonly remainingMs: number; readonly atNs: string }
  | { readonly type: 'written'; readonly accepted: boolean; readonly knewLost: boolean }
  | { readonly type: 'releasing'; readonly atNs: string }
  | { readonly type: 'released'; readonly outcome: string }
  | { readonly type: 'lost'; readonly reason: string; readonly atNs: string }
  | { readonly type: 'error'; readonly message: string };

function send(message: ClientMessage): void {
  process.send?.(message);
}

async function main(config: ClientConfig): Promise<void> {
  let stopping = false;
  process.on('message', (message: { type?: string }) => {
    if (message?.type === 'stop') stopping = true;
  });
  process.on('disconnect', () => {
    stopping = true;
  });

  const locker = createLocker(config.store);
  const register = new FencedRegister(config.registerUrl, config.registerSchema);
  let current: Lease | undefined;
  diagnostics_channel.subscribe(CHANNELS.renew, (message) => {
    const event = message as RenewEvent;
    if (event.ok && current !== undefined && event.owner === current.owner) {
      send({
        type: 'validity',
        remainingMs: current.remainingMs,
        atNs: process.hrtime.bigint().toString(),
      });
    }
  });
  send({ type: 'ready' });

  while (!stopping) {
    let lease: Lease;
    send({ type: 'acquiring', atNs: process.hrtime.bigint().toString() });
    try {
      lease = await acquire(locker, config);
    } catch (error) {
      if ((error as { code?: string }).code !== 'ERR_LOCK_TIMEOUT') {
        send({ type: 'error', message: (error as Error).message });
        await sleep(50);
      }
      continue;
    }
    const grantedNs = process.hrtime.bigint();
    current = lease;
    send({
      type: 'acquired',
      token: lease.fencingToken.toString(),
      remainingMs: lease.remainingMs,
      atNs: grantedNs.toString(),
    });
    lease.signal.addEventListener(
      'abort',
      () => {
        const reason = (lease.signal.reason as { reason?: string })?.reason ?? 'aborted';
        send({ type: 'lost', reason, atNs: process.hrtime.bigint().toString() });
      },
      { once: true },
    );
    for (let write = 0; write < config.writes; write++) {
      await sleep(config.holdMs / config.writes);
      try {
        const knewLost = lease.signal.aborted;
        const accepted = await register.write(lease.fencingToken, config.client, config.fenced);
        send({ type: 'written', accepted, knewLost });
      } catch (error) {
        send({ type: 'error', message: `register: ${(error as Error).message}` });
      }
    }
    // The critical section ends here, before the release's round trip.
    send({ type: 'releasing', atNs: process.hrtime.bigint().toString() });
    try {
      send({ type: 'released', outcome: await lease.release() });
    } catch (error) {
      send({ type: 'released', outcome: `error: ${(error as Error).message}` });
    }
    current = undefined;
    await sleep(Math.random() * config.idleMs);
  }
  await locker.close();
  await register.close();
}

/**
 * One grant: the key's lock, a permit of its semaphore (`config.permits`), or the leadership of
 * its election (`config.election`), with `config.lockDelayMs` if any.
 */
function acquire(locker: Locker, config: ClientConfig): Promise<Lease> {
  const options = {
    ttlMs: config.ttlMs,
    waitMs: 1_000,
    ...(config.lockDelayMs === undefined ? {} : { lockDelayMs: config.lockDelayMs }),
  };
  if (config.election) return locker.election(config.key).campaign(config.client, options);
  return config.permits === undefined
    ? locker.acquire(config.key, options)
    : locker.semaphore(config.key, { permits: config.permits }).acquire(options);
}

const config = JSON.parse(process.argv[2] ?? '{}') as ClientConfig;
main(config).then(
  () => process.exit(0),
  (error: unknown) => {
    send({ type: 'error', message: (error as Error)?.stack ?? String(error) });
    process.exit(1);
  },
);
