// Time and statistics shared by the bench's parent and its workers.
//
// One clock for every process: `process.hrtime.bigint()` reads CLOCK_MONOTONIC, the same clock
// Java's `System.nanoTime()` reads on Linux, and it is system-wide (not per process, unlike
// `performance.now()`, whose origin is each process's start). So a release stamped in one worker
// and the next grant stamped in another are comparable without sending events anywhere while
// the workload runs. Values are milliseconds as floats (about 1e7 ms after a few hours of uptime:
// far inside the exact range of a double, sub-microsecond resolution).

/** Monotonic milliseconds on the machine-wide clock (see above). */
export function nowMs() {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** Resolve after `ms` milliseconds. */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** Resolve at monotonic time `atMs` (see `nowMs`). */
export function sleepUntil(atMs) {
  return sleep(atMs - nowMs());
}

/** Nearest-rank percentile `p` (0..100) of an ascending array; NaN when empty. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** Count, p50, p99 and max of some samples (ms). */
export function summarize(values) {
  const sorted = Float64Array.from(values).sort();
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.length > 0 ? sorted[sorted.length - 1] : Number.NaN,
  };
}

/** Median of some numbers (the mean of the middle two for an even count); NaN when empty. */
export function median(values) {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Spread of repeated measurements: min, max, and (max − min) / median in percent, the figure
 * the report quotes as ±.
 */
export function spread(values) {
  const finite = values.filter((v) => Number.isFinite(v));
  if (finite.length === 0) return { min: Number.NaN, max: Number.NaN, pct: Number.NaN };
  const min = Math.min(...finite);
  const max = Math.max(...finite);
  const mid = median(finite);
  return { min, max, pct: mid === 0 ? 0 : ((max - min) / mid) * 100 };
}

/**
 * Fold the runs of one measurement (an array of flat objects of numbers) into the median and
 * spread of each field.
 */
export function foldRuns(runs) {
  const fields = new Set(runs.flatMap((run) => Object.keys(run)));
  const medianOf = {};
  const spreadOf = {};
  for (const field of fields) {
    const values = runs.map((run) => run[field]).filter((v) => typeof v === 'number');
    medianOf[field] = median(values);
    spreadOf[field] = spread(values);
  }
  return { median: medianOf, spread: spreadOf };
}

/** Round for the JSON report: 3 significant decimals for small values, integers for big ones. */
export function round(value) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return value;
  if (Math.abs(value) >= 100) return Math.round(value);
  return Math.round(value * 1000) / 1000;
}
