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
});

/** Published once per `acquire()` / `tryAcquire()` call, whatever its outcome. */
export interface AcquireEvent {
  readonly backend: string;
  readonly key: string;
  readonly owner: string;
  /** `granted`, `reentered` (hold count incremented), `busy` (tryAcquire found it held), `timeout`, `error`. */
  readonly outcome: 'granted' | 'reentered' | 'busy' | 'timeout' | 'error';
  readonly fencingToken?: bigint;
  /** Time from the call to its outcome, ms. */
  readonly waitMs: number;
  /** Engine attempts made. */
  readonly attempts: number;
  readonly error?: unknown;
}

/** Published when a lease's engine release completes (hold count reached 0) or fails. */
export interface ReleaseEvent {
  readonly backend: string;
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly outcome: 'released' | 'not-held' | 'not-owner' | 'error';
  /** Time from grant to release, ms. */
  readonly holdMs: number;
  readonly error?: unknown;
}

/** Published after every renewal attempt (watchdog or `extend()`). */
export interface RenewEvent {
  readonly backend: string;
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly ok: boolean;
  readonly error?: unknown;
}

/** Published once when a lease is lost. */
export interface LostEvent {
  readonly backend: string;
  readonly key: string;
  readonly owner: string;
  readonly fencingToken: bigint;
  readonly reason: string;
  readonly error: unknown;
}

const channels = {
  acquire: diagnostics_channel.channel(CHANNELS.acquire),
  release: diagnostics_channel.channel(CHANNELS.release),
  renew: diagnostics_channel.channel(CHANNELS.renew),
  lost: diagnostics_channel.channel(CHANNELS.lost),
};

/** Publish an event if anyone listens; builds the payload only then. */
export function publish<K extends keyof typeof channels>(
  name: K,
  payload: () => K extends 'acquire'
    ? AcquireEvent
    : K extends 'release'
      ? ReleaseEvent
      : K extends 'renew'
        ? RenewEvent
        : LostEvent,
): void {
  const channel = channels[name];
  if (channel.hasSubscribers) channel.publish(payload());
}
