/**
 * The part shared by the metrics adapters: subscribe to fencelock's diagnostics_channel events,
 * hand each one to a sink as plain numbers and bounded labels (backend, store, outcome, reason —
 * never the key or the owner, which would make one time series per lock), and keep the two
 * figures that no single event carries: how many leases are held and how many acquires are
 * waiting, per backend and store.
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
import { InvalidArgumentError } from '../errors.js';
import { redactStoreUrl } from '../redact.js';

/** The labels every fencelock metric carries. */
export interface LockLabels {
  /** Engine name, e.g. `redis`, `postgres`. */
  readonly backend: string;
  /**
   * Which store: the `store` name an event carries (password redacted, at most
   * `MAX_STORE_LABEL_CHARS` characters), else the backend name. Past `maxStores` distinct names,
   * further stores share `OTHER_STORES`.
   */
  readonly store: string;
}

/** Receives each event, reduced to metric values. Durations are in seconds. */
export interface LockMetricsSink {
  /** One `acquire()` / `tryAcquire()` / owner-addressed acquire call ended with `outcome`. */
  acquire(labels: LockLabels, outcome: AcquireEvent['outcome'], waitSeconds: number): void;
  /**
   * A release reached the engine. `holdSeconds` is the time since the grant when known (the
   * event's `holdMs`, or the time since this process saw the grant); undefined otherwise.
   */
  release(
    labels: LockLabels,
    outcome: ReleaseEvent['outcome'],
    holdSeconds: number | undefined,
  ): void;
  /** A renewal attempt ended; `ok` is false when the engine refused it or did not answer. */
  renew(labels: LockLabels, ok: boolean): void;
  /** A lease was lost, for `reason` (`expired`, `not-owner`, `not-held`, `max-hold`, `session-lost`). */
  lost(labels: LockLabels, reason: string): void;
}

/** Default of `maxStores`: distinct store labels before the rest share `OTHER_STORES`. */
export const DEFAULT_MAX_STORES = 64;
/** The store label of stores past `maxStores`. */
export const OTHER_STORES = 'other';
/** Longest store label, characters (a longer name is cut, with `…`). */
export const MAX_STORE_LABEL_CHARS = 200;

/** Options of `LockActivity`. */
export interface LockActivityOptions {
  /**
   * Distinct store labels kept apart (a bound on the time series per metric); events of further
   * stores are labelled `OTHER_STORES`. @default DEFAULT_MAX_STORES
   */
  readonly maxStores?: number;
}

/** Fields every event has; `store` is set by lockers that name their store. */
interface EventBase {
  readonly backend: string;
  readonly key: string;
  readonly owner: string;
  readonly store?: unknown;
}

interface Holding {
  readonly labels: LockLabels;
  /** The grant's fencing token, if the event carried one. */
  readonly fencingToken: bigint | undefined;
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
 * A lease counts as held from its grant until its release, its loss, a renewal of it the engine
 * refused, or the end of the last TTL the engine applied (from the grant or a renewal) —
 * whichever comes first. The TTL bound covers owner-addressed grants (the sidecar's), which no
 * process tracks and which may simply expire.
 * An acquire counts as waiting between its `wait` start and end events. Both are counted per
 * backend and store (`LockLabels`).
 */
export class LockActivity {
  readonly #holdings = new Map<string, Holding>();
  readonly #waiting = new Map<string, LockLabels>();
  /**
   * Every label pair seen, by `backend\0store`, so that gauges report 0 rather than vanish
   * (and one object per pair).
   */
  readonly #labels = new Map<string, LockLabels>();
  /** Store labels given out so far (at most `#maxStores`, besides `OTHER_STORES`). */
  readonly #stores = new Set<string>();
  readonly #maxStores: number;
  #sizeAfterSweep = 0;
  #unsubscribe: (() => void) | undefined;

  /** @throws InvalidArgumentError for a `maxStores` that is not a positive integer. */
  constructor(options: LockActivityOptions = {}) {
    const maxStores = options?.maxStores ?? DEFAULT_MAX_STORES;
    if (!Number.isSafeInteger(maxStores) || maxStores < 1) {
      throw new InvalidArgumentError('maxStores', 'a positive integer', maxStores);
    }
    this.#maxStores = maxStores;
  }

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

  /** Leases held now, per backend and store (every pair seen so far, 0 included). */
  holders(): [LockLabels, number][] {
    this.#sweep(monotonicNow());
    return this.#count([...this.#holdings.values()].map((holding) => holding.labels));
  }

  /** Acquires waiting now, per backend and store (every pair seen so far, 0 included). */
  waiters(): [LockLabels, number][] {
    return this.#count(this.#waiting.values());
  }

  #count(labelled: Iterable<LockLabels>): [LockLabels, number][] {
    const counts = new Map<LockLabels, number>([...this.#labels.values()].map((l) => [l, 0]));
    for (const labels of labelled) counts.set(labels, (counts.get(labels) ?? 0) + 1);
    return [...counts];
  }

  /** The labels of `event`: one object per backend and store. */
  #labelsOf(event: EventBase): LockLabels {
    let store = storeName(event);
    if (!this.#stores.has(store)) {
      if (this.#stores.size < this.#maxStores) this.#stores.add(store);
      else store = OTHER_STORES;
    }
    const id = `${event.backend}\0${store}`;
    let labels = this.#labels.get(id);
    if (labels === undefined) {
      labels = Object.freeze({ backend: event.backend, store });
      this.#labels.set(id, labels);
    }
    return labels;
  }

  #onAcquire(event: AcquireEvent, sink: LockMetricsSink): void {
    const labels = this.#labelsOf(event);
    sink.acquire(labels, event.outcome, event.waitMs / 1000);
    if (event.outcome !== 'granted' && event.outcome !== 'reentered') return;
    const id = holdingId(event);
    if (event.outcome === 'reentered' && this.#holdings.has(id)) return;
    const now = monotonicNow();
    this.#holdings.set(id, {
      labels,
      fencingToken: event.fencingToken,
      grantedAt: now,
      expiresAt: now + (event.ttlMs ?? Number.POSITIVE_INFINITY),
    });
    if (this.#holdings.size >= this.#sizeAfterSweep + SWEEP_GROWTH) this.#sweep(now);
  }

  #onRelease(event: ReleaseEvent, sink: LockMetricsSink): void {
    const labels = this.#labelsOf(event);
    const id = holdingId(event);
    const holding = this.#holdings.get(id);
    // The grant ends when it was released, or when the engine refused to release this very grant
    // (same token): a refused release naming another token (a stale or forged one) leaves the
    // holder counted, as does a release that failed.
    const ended =
      event.outcome === 'released' ||
      (event.outcome !== 'error' && event.fencingToken === holding?.fencingToken);
    if (ended) this.#holdings.delete(id);
    const holdMs =
      event.holdMs ?? (holding === undefined ? undefined : monotonicNow() - holding.grantedAt);
    sink.release(labels, event.outcome, holdMs === undefined ? undefined : holdMs / 1000);
  }

  #onRenew(event: RenewEvent, sink: LockMetricsSink): void {
    const labels = this.#labelsOf(event);
    sink.renew(labels, event.ok);
    const holding = this.#holdings.get(holdingId(event));
    if (holding === undefined) return;
    if (event.ok && event.ttlMs !== undefined) holding.expiresAt = monotonicNow() + event.ttlMs;
    // The engine refused to renew this very grant (not a failed call): it is no longer held. An
    // owner-addressed renewal gets no `lost` event (see `Locker.renewForOwner`), so this ends
    // the sidecar's count of it.
    if (!event.ok && event.error === undefined && event.fencingToken === holding.fencingToken) {
      this.#holdings.delete(holdingId(event));
    }
  }

  #onLost(event: LostEvent, sink: LockMetricsSink): void {
    const labels = this.#labelsOf(event);
    this.#holdings.delete(holdingId(event));
    sink.lost(labels, event.reason);
  }

  #onWait(event: WaitEvent): void {
    const labels = this.#labelsOf(event);
    const id = holdingId(event);
    if (event.phase === 'start') this.#waiting.set(id, labels);
    else this.#waiting.delete(id);
  }

  #sweep(now: number): void {
    for (const [id, holding] of this.#holdings) {
      if (holding.expiresAt <= now) this.#holdings.delete(id);
    }
    this.#sizeAfterSweep = this.#holdings.size;
  }
}

/**
 * Backend, store, key and owner identify one lease (owners are unique per grant or per caller;
 * an owner-addressed owner may use the same key on two stores).
 */
function holdingId(event: EventBase): string {
  const store = typeof event.store === 'string' ? event.store : '';
  return `${event.backend}\0${store}\0${event.key}\0${event.owner}`;
}

/**
 * The store label of an event: its `store` name without a password (a name may be a store URL),
 * cut to `MAX_STORE_LABEL_CHARS`; the backend name when the event names no store.
 */
function storeName(event: EventBase): string {
  const { store } = event;
  if (typeof store !== 'string' || store === '') return event.backend;
  const name = redactStoreUrl(store);
  return name.length <= MAX_STORE_LABEL_CHARS
    ? name
    : `${name.slice(0, MAX_STORE_LABEL_CHARS - 1)}…`;
}
