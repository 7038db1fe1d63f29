/**
 * Lifecycle events on `node:diagnostics_channel`. Publishing costs nothing when no one
 * subscribes, and a subscriber's exception never reaches lock code (diagnostics_channel reports
 * it on the next tick instead). Subscribe with `diagnostics_channel.subscribe(CHANNELS.acquire, fn)`.
 */
import diagnostics_channel from 'node:diagnostics_channel';

/** Channel names. */
export const CHANNELS = Object.freeze({
  acquire: 'fencelock:acquire',
  release: 'fencelock:release',
  renew: 'fencelock:renew',
  lost: 'fencelock:lost',
  wait: 'fencelock:wait',
});

/** Where an event comes from: every payload has these. */
export interface EventOrigin {
  /** The backend's name (`redis`, `etcd`, …). */
  readonly backend: string;
  /**
   * The store's name (the locker's `name` option, else its store URL without user info and
   * parameters, else the backend's name): tells apart lockers over different stores.
   */
  readonly store: string;
}

/** Published once per `acquire()` / `tryAcquire()` call, whatever its outcome. */
export interface AcquireEvent extends EventOrigin {
  readonly key: string;
  readonly owner: string;
  /** `granted`, `reentered` (hold count incremented), `busy` (tryAcquire found it held), `timeout`, `error`. */
  readonly outcome: 'granted' | 'reentered' | 'busy' | 'timeout' | 'error';
  readonly fencingToken?: bigint;
  /** Time from the call to its outcome, ms. */
  readonly waitMs: number;
  /** Engine attempts made. */
  readonly attempts: number;
  /** Lease length the engine applied, ms (`granted` and `reentered` outcomes only). */
  readonly ttlMs?: number;
  readonly error?: unknown;
}

/**
 * Published when a lease's engine release completes (hold count reached 0) or fails, and when an
 * owner-addressed release (`locker.releaseForOwner`) reaches the engine.
 */
export interface ReleaseEvent extends EventOrigin {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly outcome: 'released' | 'not-held' | 'not-owner' | 'error';
  /**
   * Time from grant to release, ms. Absent for owner-addressed releases: the process that
   * releases by owner keeps no grant time (it may not be the one that granted).
   */
  readonly holdMs?: number;
  readonly error?: unknown;
}

/** Published after every renewal attempt (watchdog, `extend()` or `locker.renewForOwner`). */
export interface RenewEvent extends EventOrigin {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly ok: boolean;
  /** Lease length the engine applied, ms (successful renewals only). */
  readonly ttlMs?: number;
  readonly error?: unknown;
}

/** Published once when a lease is lost. */
export interface LostEvent extends EventOrigin {
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly reason: string;
  readonly error: unknown;
}

/**
 * Published when a blocking acquire starts to wait (its first attempt found the key held) and
 * once more when that wait ends, whatever the outcome (granted, timeout, abort, error). Every
 * `start` is followed by exactly one `end` for the same `owner` and `key`; a `tryAcquire` never
 * waits. Metrics count current waiters from these.
 */
export interface WaitEvent extends EventOrigin {
  readonly key: string;
  readonly owner: string;
  readonly phase: 'start' | 'end';
}

const channels = {
  acquire: diagnostics_channel.channel(CHANNELS.acquire),
  release: diagnostics_channel.channel(CHANNELS.release),
  renew: diagnostics_channel.channel(CHANNELS.renew),
  lost: diagnostics_channel.channel(CHANNELS.lost),
  wait: diagnostics_channel.channel(CHANNELS.wait),
};

/** Payload type of each channel. */
export interface EventPayloads {
  readonly acquire: AcquireEvent;
  readonly release: ReleaseEvent;
  readonly renew: RenewEvent;
  readonly lost: LostEvent;
  readonly wait: WaitEvent;
}

/**
 * Whether anyone listens on channel `name`: for a caller that would allocate to publish (a
 * payload builder with extra fields), on a path taken once per acquire.
 */
export function isObserved(name: keyof typeof channels): boolean {
  return channels[name].hasSubscribers;
}

/** Publish an event if anyone listens; builds the payload only then. */
export function publish<K extends keyof typeof channels>(
  name: K,
  payload: () => EventPayloads[K],
): void {
  const channel = channels[name];
  if (channel.hasSubscribers) channel.publish(payload());
}
