/**
 * Prometheus metrics for fencelock, fed by its diagnostics_channel events (prom-client).
 *
 * Names follow Prometheus conventions (base units, `_seconds`, `_total`); labels are bounded:
 * `backend` (engine name, e.g. `redis`), `outcome` and `reason` — never the key or the owner.
 */
import { Counter, Gauge, Histogram, type Registry, register } from 'prom-client';
import { InvalidArgumentError } from '../errors.js';
import { LockActivity } from './activity.js';
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
 * | `<prefix>acquire_attempts_total` | counter | backend, outcome | acquire calls (`acquire`, `tryAcquire`, `withLock`, owner-addressed) by outcome: granted, reentered, busy, timeout, error |
 * | `<prefix>acquire_wait_seconds` | histogram | backend, outcome | time from an acquire call to its outcome |
 * | `<prefix>hold_seconds` | histogram | backend | time from grant to release, when known |
 * | `<prefix>releases_total` | counter | backend, outcome | releases that reached the engine: released, not-held, not-owner, error |
 * | `<prefix>renewals_total` | counter | backend | renewal attempts (watchdog, `extend`, owner-addressed) |
 * | `<prefix>renew_failures_total` | counter | backend | renewals the engine refused or did not answer |
 * | `<prefix>leases_lost_total` | counter | backend, reason | leases lost: expired, not-owner, not-held, max-hold, session-lost |
 * | `<prefix>holders` | gauge | backend | leases held now (granted, not released, lost or past their last TTL) |
 * | `<prefix>waiters` | gauge | backend | acquire calls waiting now for a held key |
 *
 * @returns the registry, the metric names, and `unsubscribe()`.
 * @throws InvalidArgumentError for a malformed prefix or bucket list.
 * @throws Error from prom-client when a metric of the same name is already registered.
 */
export function collectPrometheusMetrics(
  options: PrometheusMetricsOptions = {},
): PrometheusMetrics {
  if (typeof options !== 'object' || options === null) {
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

  const activity = new LockActivity();
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
          labelNames: ['backend', 'outcome'] as const,
          registers,
        }),
    );
    const waitSeconds = made(
      'acquire_wait_seconds',
      (name) =>
        new Histogram({
          name,
          help: 'Time from an acquire call to its outcome, in seconds.',
          labelNames: ['backend', 'outcome'] as const,
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
          labelNames: ['backend'] as const,
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
          labelNames: ['backend', 'outcome'] as const,
          registers,
        }),
    );
    const renewals = made(
      'renewals_total',
      (name) =>
        new Counter({
          name,
          help: 'Renewal attempts (watchdog, extend, owner-addressed).',
          labelNames: ['backend'] as const,
          registers,
        }),
    );
    const renewFailures = made(
      'renew_failures_total',
      (name) =>
        new Counter({
          name,
          help: 'Renewals the engine refused or did not answer.',
          labelNames: ['backend'] as const,
          registers,
        }),
    );
    const lost = made(
      'leases_lost_total',
      (name) =>
        new Counter({
          name,
          help: 'Leases lost while their holder believed it held them, by reason.',
          labelNames: ['backend', 'reason'] as const,
          registers,
        }),
    );
    made(
      'holders',
      (name) =>
        new Gauge({
          name,
          help: 'Leases held now through this process.',
          labelNames: ['backend'] as const,
          registers,
          collect() {
            for (const [backend, n] of activity.holders()) this.set({ backend }, n);
          },
        }),
    );
    made(
      'waiters',
      (name) =>
        new Gauge({
          name,
          help: 'Acquire calls waiting now for a held key.',
          labelNames: ['backend'] as const,
          registers,
          collect() {
            for (const [backend, n] of activity.waiters()) this.set({ backend }, n);
          },
        }),
    );

    const stop = activity.subscribe({
      acquire(backend, outcome, seconds) {
        acquires.inc({ backend, outcome });
        waitSeconds.observe({ backend, outcome }, seconds);
      },
      release(backend, outcome, seconds) {
        releases.inc({ backend, outcome });
        if (seconds !== undefined) holdSeconds.observe({ backend }, seconds);
      },
      renew(backend, ok) {
        renewals.inc({ backend });
        if (!ok) renewFailures.inc({ backend });
      },
      lost(backend, reason) {
        lost.inc({ backend, reason });
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
