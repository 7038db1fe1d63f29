/**
 * `fencelock/metrics`: metrics adapters fed by fencelock's diagnostics_channel events.
 * `collectPrometheusMetrics` needs `prom-client` (a dependency); `collectOpenTelemetryMetrics`
 * takes a Meter from `@opentelemetry/api`, which the caller installs (only its types are used).
 */
export { LockActivity, type LockMetricsSink } from './activity.js';
export { HOLD_BUCKETS_SECONDS, WAIT_BUCKETS_SECONDS } from './buckets.js';
export {
  collectOpenTelemetryMetrics,
  type OpenTelemetryMetrics,
  type OpenTelemetryMetricsOptions,
} from './opentelemetry.js';
export {
  collectPrometheusMetrics,
  type PrometheusMetrics,
  type PrometheusMetricsOptions,
} from './prometheus.js';
