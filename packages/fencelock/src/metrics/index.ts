/**
 * `fencelock/metrics`: metrics adapters fed by fencelock's diagnostics_channel events, both of
 * them, so it needs `prom-client` (an optional peer dependency) installed.
 * `fencelock/metrics/prometheus` (`collectPrometheusMetrics`, needs `prom-client`) and
 * `fencelock/metrics/opentelemetry` (`collectOpenTelemetryMetrics`, takes a Meter from
 * `@opentelemetry/api`, which the caller installs; only its types are used) export one each.
 */
export {
  DEFAULT_MAX_STORES,
  LockActivity,
  type LockActivityOptions,
  type LockLabels,
  type LockMetricsSink,
  MAX_STORE_LABEL_CHARS,
  OTHER_STORES,
} from './activity.js';
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
