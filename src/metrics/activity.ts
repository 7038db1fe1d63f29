/**
 * The part shared by the metrics adapters: subscribe to fencelock's diagnostics_channel events,
 * hand each one to a sink as plain numbers and bounded labels (backend, outcome, reason — never
 * the key or the owner, which would make one time series per lock), and keep the two figures
 * that no single event carries: how many leases are held and how many acquires are waiting, per
 * backend.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { monotonicNow } from '../core/clock.js';
import {
  type AcquireEvent,
  CHANNELS,
  type LostEvent,
  type ReleaseEvent,
  type RenewEvent,
  type WaitEvent,
} from '../core/events.js';

/** Receives each event, reduced to metric values. Durations are in seconds. */
export interface LockMetricsSink {
  /** One `acquire()` / `tryAcquire()` / owner-addressed acquire call ended with `outcome`. */
  acquire(backend: string, outcome: AcquireEvent['outcome'], waitSeconds: number): void;
  /**
   * A release reached the engine. `holdSeconds` is the time since the grant when known (the
   * event's `holdMs`, or the time since this process saw the grant); undefined otherwise.
   */
  release(backend: string, outcome: ReleaseEvent['outcome'], holdSeconds: number | undefined): void;
  /** A renewal attempt ended; `ok` is false when the engine refused it or did not answer. */
  renew(backend: string, ok: boolean): void;
  /** A lease was lost, for `reason` (`expired`, `not-owner`, `not-held`, `max-hold`, `session-lost`). */
  lost(backend: string, reason: string): void;
}

interface Holding {
  readonly backend: string;
  /** Monotonic ms when this process saw the grant. */
  readonly grantedAt: number;
  /** Monotonic ms when the engine drops the lease unless renewed (last TTL seen). */
  expiresAt: number;
}

/** Sweep expired holdings once the table has grown this much since the last sweep. */
const SWEEP_GROWTH = 1024;

/**
 * Live view of lock activity in this process, fed by diagnostics_channel.
 *
 * A lease counts as held from its grant until its release, its loss, or the end of the last TTL
 * the engine applied (from the grant or a renewal) — whichever comes first. The TTL bound covers
 * owner-addressed grants (the sidecar's), which no process tracks and which may simply expire.
 * An acquire counts as waiting between its `wait` start and end events.
 */
export class LockActivity {
  readonly #holdings = new Map<string, Holding>();
  readonly #waiting = new Map<string, string>();
  /** Every backend name seen, so that gauges report 0 rather than vanish. */
  readonly #backends = new Set<string>();
  #sizeAfterSweep = 0;
  #unsubscribe: (() => void) | undefined;

  /**
   * Start listening and forward each event to `sink`. Call once per instance.
   * @returns a function that stops listening (idempotent).
   */
  subscribe(sink: LockMetricsSink): () => void {
    if (this.#unsubscribe) throw new Error('fencelock: LockActivity is already subscribed');
    const handlers: [string, (message: unknown) => void][] = [
      [CHANNELS.acquire, (m) => this.#onAcquire(m as AcquireEvent, sink)],
      [CHANNELS.release, (m) => this.#onRelease(m as ReleaseEvent, sink)],
      [CHANNELS.renew, (m) => this.#onRenew(m as RenewEvent, sink)],
      [CHANNELS.lost, (m) => this.#onLost(m as LostEvent, sink)],
      [CHANNELS.wait, (m) => this.#onWait(m as WaitEvent)],
    ];
    for (const [name, fn] of handlers) diagnostics_channel.subscribe(name, fn);
    let active = true;
    this.#unsubscribe = () => {
      if (!active) return;
      active = false;
      for (const [name, fn] of handlers) diagnostics_channel.unsubscribe(name, fn);
    };
    return this.#unsubscribe;
  }

  /** Leases held now, per backend (every backend seen so far, 0 included). */
  holders(): Map<string, number> {
    this.#sweep(monotonicNow());
    const counts = this.#zeroes();
    for (const { backend } of this.#holdings.values()) {
      counts.set(backend, (counts.get(backend) ?? 0) + 1);
    }
    return counts;
  }

  /** Acquires waiting now, per backend (every backend seen so far, 0 included). */
  waiters(): Map<string, number> {
    const counts = this.#zeroes();
    for (const backend of this.#waiting.values()) {
      counts.set(backend, (counts.get(backend) ?? 0) + 1);
    }
    return counts;
  }

  #zeroes(): Map<string, number> {
    return new Map([...this.#backends].map((backend) => [backend, 0]));
  }

  #onAcquire(event: AcquireEvent, sink: LockMetricsSink): void {
    this.#backends.add(event.backend);
    sink.acquire(event.backend, event.outcome, event.waitMs / 1000);
    if (event.outcome !== 'granted' && event.outcome !== 'reentered') return;
    const id = holdingId(event);
    if (event.outcome === 'reentered' && this.#holdings.has(id)) return;
    const now = monotonicNow();
    this.#holdings.set(id, {
      backend: event.backend,
      grantedAt: now,
      expiresAt: now + (event.ttlMs ?? Number.POSITIVE_INFINITY),
    });
    if (this.#holdings.size >= this.#sizeAfterSweep + SWEEP_GROWTH) this.#sweep(now);
  }

  #onRelease(event: ReleaseEvent, sink: LockMetricsSink): void {
    this.#backends.add(event.backend);
    const id = holdingId(event);
    const holding = this.#holdings.get(id);
    this.#holdings.delete(id);
    const holdMs =
      event.holdMs ?? (holding === undefined ? undefined : monotonicNow() - holding.grantedAt);
    sink.release(event.backend, event.outcome, holdMs === undefined ? undefined : holdMs / 1000);
  }

  #onRenew(event: RenewEvent, sink: LockMetricsSink): void {
    this.#backends.add(event.backend);
    sink.renew(event.backend, event.ok);
    const holding = this.#holdings.get(holdingId(event));
    if (holding === undefined) return;
    if (event.ok && event.ttlMs !== undefined) holding.expiresAt = monotonicNow() + event.ttlMs;
  }

  #onLost(event: LostEvent, sink: LockMetricsSink): void {
    this.#backends.add(event.backend);
    this.#holdings.delete(holdingId(event));
    sink.lost(event.backend, event.reason);
  }

  #onWait(event: WaitEvent): void {
    this.#backends.add(event.backend);
    const id = holdingId(event);
    if (event.phase === 'start') this.#waiting.set(id, event.backend);
    else this.#waiting.delete(id);
  }

  #sweep(now: number): void {
    for (const [id, holding] of this.#holdings) {
      if (holding.expiresAt <= now) this.#holdings.delete(id);
    }
    this.#sizeAfterSweep = this.#holdings.size;
  }
}

/** Backend, key and owner identify one lease (owners are unique per grant or per caller). */
function holdingId(event: { backend: string; key: string; owner: string }): string {
  return `${event.backend}\0${event.key}\0${event.owner}`;
}
