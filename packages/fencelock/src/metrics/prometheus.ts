/**
 * Prometheus metrics for fencelock, fed by its diagnostics_channel events (prom-client).
 *
 * Names follow Prometheus conventions (base units, `_seconds`, `_total`); labels are bounded:
 * `backend` (engine name, e.g. `redis`), `store` (which store: see `LockLabels`), `outcome` and
 * `reason` — never the key or the owner.
 */
import { Counter, Gauge, Histogram, type Registry, register } from 'prom-client';
import { InvalidArgumentError } from '../errors.js';
import { isOptionsObject } from '../options.js';
import { LockActivity, type LockLabels } from './activity.js';
import { HOLD_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from './buckets.js';

/** Options of `collectPrometheusMetrics`. */
export interface PrometheusMetricsOptions {
  /** Registry to register the metrics in. @default prom-client's global `register` */
  readonly registry?: Registry;
  /** Prefix of every metric name. @default 'fencelock_' */
  readonly prefix?: string;
  /** Bucket bounds of the wait-time histogram, seconds. @default WAIT_BUCKETS_SECONDS */
  readonly waitBucketsSeconds?: readonly number[];
  /** Bucket bounds of the hold-time histogram, seconds. @default HOLD_BUCKETS_SECONDS */
  readonly holdBucketsSeconds?: readonly number[];
  /**
   * Distinct `store` label values kept apart; further stores share `store="other"` (a bound on
   * the time series). @default 64
   */
  readonly maxStores?: number;
}

/** What `collectPrometheusMetrics` returns. */
export interface PrometheusMetrics {
  /** The registry the metrics live in. */
  readonly registry: Registry;
  /** Names of the registered metrics. */
  readonly names: readonly string[];
  /** Stop listening to events and remove the metrics from the registry. Idempotent. */
  unsubscribe(): void;
}

const PREFIX = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

/**
 * Register fencelock's metrics in a prom-client registry and keep them up to date from the
 * diagnostics_channel events of every locker in this process:
 *
 * | metric | type | labels | meaning |
 * | --- | --- | --- | --- |
 * | `<prefix>acquire_attempts_total` | counter | backend, store, outcome | acquire calls (`acquire`, `tryAcquire`, `withLock`, owner-addressed) by outcome: granted, reentered, busy, timeout, error |
 * | `<prefix>acquire_wait_seconds` | histogram | backend, store, outcome | time from an acquire call to its outcome |
 * | `<prefix>hold_seconds` | histogram | backend, store | time from grant to release, when known |
 * | `<prefix>releases_total` | counter | backend, store, outcome | releases that reached the engine: released, not-held, not-owner, error |
 * | `<prefix>renewals_total` | counter | backend, store | renewal attempts (watchdog, `extend`, owner-addressed) |
 * | `<prefix>renew_failures_total` | counter | backend, store | renewals the engine refused or did not answer |
 * | `<prefix>leases_lost_total` | counter | backend, store, reason | leases lost: expired, not-owner, not-held, max-hold, session-lost |
 * | `<prefix>holders` | gauge | backend, store | leases held now (granted, not released, lost or past their last TTL) |
 * | `<prefix>waiters` | gauge | backend, store | acquire calls waiting now for a held key |
 *
 * `store` is the name of the store an event comes from when its locker names it (password
 * redacted), else the backend name; past `maxStores` names, further stores share `other`.
 *
 * @returns the registry, the metric names, and `unsubscribe()`.
 * @throws InvalidArgumentError for a malformed prefix or bucket list, or a `maxStores` that is
 *   not a positive integer.
 * @throws Error from prom-client when a metric of the same name is already registered.
 */
export function collectPrometheusMetrics(
  options: PrometheusMetricsOptions = {},
): PrometheusMetrics {
  if (!isOptionsObject(options)) {
    throw new InvalidArgumentError('options', 'an options object', options);
  }
  const registry = options.registry ?? register;
  const prefix = options.prefix ?? 'fencelock_';
  if (typeof prefix !== 'string' || (prefix !== '' && !PREFIX.test(prefix))) {
    throw new InvalidArgumentError(
      'prefix',
      'a Prometheus metric name prefix ([a-zA-Z_:][a-zA-Z0-9_:]*)',
      prefix,
    );
  }
  const waitBuckets = validateBuckets(
    options.waitBucketsSeconds ?? WAIT_BUCKETS_SECONDS,
    'waitBucketsSeconds',
  );
  const holdBuckets = validateBuckets(
    options.holdBucketsSeconds ?? HOLD_BUCKETS_SECONDS,
    'holdBucketsSeconds',
  );

  const activity = new LockActivity(options);
  const registers = [registry];
  const names: string[] = [];
  /** Build (and so register) one metric, and remember its name once it is registered. */
  const made = <T>(suffix: string, build: (name: string) => T): T => {
    const metric = build(`${prefix}${suffix}`);
    names.push(`${prefix}${suffix}`);
    return metric;
  };
  // A clash (a second adapter on the same registry) throws and leaves none of this call's
  // metrics behind.
  try {
    const acquires = made(
      'acquire_attempts_total',
      (name) =>
        new Counter({
          name,
          help: 'Acquire calls (acquire, tryAcquire, withLock, owner-addressed) by outcome.',
          labelNames: ['backend', 'store', 'outcome'] as const,
          registers,
        }),
    );
    const waitSeconds = made(
      'acquire_wait_seconds',
      (name) =>
        new Histogram({
          name,
          help: 'Time from an acquire call to its outcome, in seconds.',
          labelNames: ['backend', 'store', 'outcome'] as const,
          buckets: [...waitBuckets],
          registers,
        }),
    );
    const holdSeconds = made(
      'hold_seconds',
      (name) =>
        new Histogram({
          name,
          help: 'Time from grant to release, in seconds (when the releasing process knows it).',
          labelNames: ['backend', 'store'] as const,
          buckets: [...holdBuckets],
          registers,
        }),
    );
    const releases = made(
      'releases_total',
      (name) =>
        new Counter({
          name,
          help: 'Releases that reached the engine, by outcome.',
          labelNames: ['backend', 'store', 'outcome'] as const,
          registers,
        }),
    );
    const renewals = made(
      'renewals_total',
      (name) =>
        new Counter({
          name,
          help: 'Renewal attempts (watchdog, extend, owner-addressed).',
          labelNames: ['backend', 'store'] as const,
          registers,
        }),
    );
    const renewFailures = made(
      'renew_failures_total',
      (name) =>
        new Counter({
          name,
          help: 'Renewals the engine refused or did not answer.',
          labelNames: ['backend', 'store'] as const,
          registers,
        }),
    );
    const lost = made(
      'leases_lost_total',
      (name) =>
        new Counter({
          name,
          help: 'Leases lost while their holder believed it held them, by reason.',
          labelNames: ['backend', 'store', 'reason'] as const,
          registers,
        }),
    );
    made(
      'holders',
      (name) =>
        new Gauge({
          name,
          help: 'Leases held now through this process.',
          labelNames: ['backend', 'store'] as const,
          registers,
          collect() {
            for (const [labels, n] of activity.holders()) this.set(labels, n);
          },
        }),
    );
    made(
      'waiters',
      (name) =>
        new Gauge({
          name,
          help: 'Acquire calls waiting now for a held key.',
          labelNames: ['backend', 'store'] as const,
          registers,
          collect() {
            for (const [labels, n] of activity.waiters()) this.set(labels, n);
          },
        }),
    );

    const stop = activity.subscribe({
      acquire(labels: LockLabels, outcome, seconds) {
        acquires.inc({ ...labels, outcome });
        waitSeconds.observe({ ...labels, outcome }, seconds);
      },
      release(labels, outcome, seconds) {
        releases.inc({ ...labels, outcome });
        if (seconds !== undefined) holdSeconds.observe(labels, seconds);
      },
      renew(labels, ok) {
        renewals.inc(labels);
        if (!ok) renewFailures.inc(labels);
      },
      lost(labels, reason) {
        lost.inc({ ...labels, reason });
      },
    });
    let active = true;
    return {
      registry,
      names: Object.freeze([...names]),
      unsubscribe() {
        if (!active) return;
        active = false;
        stop();
        for (const name of names) registry.removeSingleMetric(name);
      },
    };
  } catch (error) {
    for (const name of names) registry.removeSingleMetric(name);
    throw error;
  }
}

function validateBuckets(value: unknown, argument: string): readonly number[] {
  const ok =
    Array.isArray(value) &&
    value.length > 0 &&
    value.every(
      (b, i) =>
        typeof b === 'number' && Number.isFinite(b) && b > 0 && (i === 0 || b > value[i - 1]),
    );
  if (!ok) {
    throw new InvalidArgumentError(
      argument,
      'a non-empty increasing list of positive seconds',
      value,
    );
  }
  return value as readonly number[];
}
