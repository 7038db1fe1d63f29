/**
 * OpenTelemetry metrics for fencelock, fed by its diagnostics_channel events. Takes a `Meter`
 * from `@opentelemetry/api` (an optional peer dependency: only its types are imported here, so
 * nothing of it is loaded unless the caller has it). Instrument names follow OpenTelemetry's
 * dotted style with units; attributes are bounded like the Prometheus adapter's.
 */
import type { BatchObservableResult, Meter } from '@opentelemetry/api';
import { InvalidArgumentError } from '../errors.js';
import { LockActivity } from './activity.js';
import { HOLD_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from './buckets.js';

/** Options of `collectOpenTelemetryMetrics`. */
export interface OpenTelemetryMetricsOptions {
  /** The meter to create instruments with, e.g. `metrics.getMeter('fencelock')`. */
  readonly meter: Meter;
  /** Prefix of every instrument name. @default 'fencelock.' */
  readonly prefix?: string;
  /**
   * Distinct `store` attribute values kept apart; further stores share `store: 'other'`.
   * @default 64
   */
  readonly maxStores?: number;
}

/** What `collectOpenTelemetryMetrics` returns. */
export interface OpenTelemetryMetrics {
  /** Names of the instruments created. */
  readonly names: readonly string[];
  /** Stop listening to events and detach the gauges' callbacks. Idempotent. */
  unsubscribe(): void;
}

/**
 * Create fencelock's instruments on `meter` and keep them up to date from the events of every
 * locker in this process. Attributes: `backend`, `store`, and `outcome` or `reason` where listed.
 *
 * | instrument | kind | unit | attributes |
 * | --- | --- | --- | --- |
 * | `<prefix>acquire.attempts` | counter | `{call}` | backend, store, outcome |
 * | `<prefix>acquire.wait.duration` | histogram | `s` | backend, store, outcome |
 * | `<prefix>hold.duration` | histogram | `s` | backend, store |
 * | `<prefix>releases` | counter | `{release}` | backend, store, outcome |
 * | `<prefix>renewals` | counter | `{renewal}` | backend, store |
 * | `<prefix>renew.failures` | counter | `{renewal}` | backend, store |
 * | `<prefix>leases.lost` | counter | `{lease}` | backend, store, reason |
 * | `<prefix>holders` | observable gauge | `{lease}` | backend, store |
 * | `<prefix>waiters` | observable gauge | `{call}` | backend, store |
 *
 * Meanings (and those of `store` and `maxStores`) are those of `collectPrometheusMetrics`.
 * @throws InvalidArgumentError when `meter` is not a Meter, `prefix` is not a string or
 *   `maxStores` is not a positive integer.
 */
export function collectOpenTelemetryMetrics(
  options: OpenTelemetryMetricsOptions,
): OpenTelemetryMetrics {
  const meter = (options as { meter?: unknown } | undefined)?.meter as Meter | undefined;
  if (
    typeof meter !== 'object' ||
    meter === null ||
    typeof meter.createCounter !== 'function' ||
    typeof meter.addBatchObservableCallback !== 'function'
  ) {
    throw new InvalidArgumentError('meter', 'an OpenTelemetry Meter', meter);
  }
  const prefix = options.prefix ?? 'fencelock.';
  if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'a string', prefix);
  const name = (suffix: string) => `${prefix}${suffix}`;
  // Before any instrument is made: it validates `maxStores`.
  const activity = new LockActivity(options);

  const acquires = meter.createCounter(name('acquire.attempts'), {
    description: 'Acquire calls (acquire, tryAcquire, withLock, owner-addressed) by outcome.',
    unit: '{call}',
  });
  const waitDuration = meter.createHistogram(name('acquire.wait.duration'), {
    description: 'Time from an acquire call to its outcome.',
    unit: 's',
    advice: { explicitBucketBoundaries: [...WAIT_BUCKETS_SECONDS] },
  });
  const holdDuration = meter.createHistogram(name('hold.duration'), {
    description: 'Time from grant to release (when the releasing process knows it).',
    unit: 's',
    advice: { explicitBucketBoundaries: [...HOLD_BUCKETS_SECONDS] },
  });
  const releases = meter.createCounter(name('releases'), {
    description: 'Releases that reached the engine, by outcome.',
    unit: '{release}',
  });
  const renewals = meter.createCounter(name('renewals'), {
    description: 'Renewal attempts (watchdog, extend, owner-addressed).',
    unit: '{renewal}',
  });
  const renewFailures = meter.createCounter(name('renew.failures'), {
    description: 'Renewals the engine refused or did not answer.',
    unit: '{renewal}',
  });
  const lost = meter.createCounter(name('leases.lost'), {
    description: 'Leases lost while their holder believed it held them, by reason.',
    unit: '{lease}',
  });
  const holders = meter.createObservableGauge(name('holders'), {
    description: 'Leases held now through this process.',
    unit: '{lease}',
  });
  const waiters = meter.createObservableGauge(name('waiters'), {
    description: 'Acquire calls waiting now for a held key.',
    unit: '{call}',
  });

  const observe = (observer: BatchObservableResult) => {
    for (const [labels, n] of activity.holders()) observer.observe(holders, n, { ...labels });
    for (const [labels, n] of activity.waiters()) observer.observe(waiters, n, { ...labels });
  };
  meter.addBatchObservableCallback(observe, [holders, waiters]);
  const stop = activity.subscribe({
    acquire(labels, outcome, seconds) {
      acquires.add(1, { ...labels, outcome });
      waitDuration.record(seconds, { ...labels, outcome });
    },
    release(labels, outcome, seconds) {
      releases.add(1, { ...labels, outcome });
      if (seconds !== undefined) holdDuration.record(seconds, { ...labels });
    },
    renew(labels, ok) {
      renewals.add(1, { ...labels });
      if (!ok) renewFailures.add(1, { ...labels });
    },
    lost(labels, reason) {
      lost.add(1, { ...labels, reason });
    },
  });
  let active = true;
  return {
    names: Object.freeze(
      [
        'acquire.attempts',
        'acquire.wait.duration',
        'hold.duration',
        'releases',
        'renewals',
        'renew.failures',
        'leases.lost',
        'holders',
        'waiters',
      ].map(name),
    ),
    unsubscribe() {
      if (!active) return;
      active = false;
      stop();
      meter.removeBatchObservableCallback(observe, [holders, waiters]);
    },
  };
}
