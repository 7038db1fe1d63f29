/** Default histogram buckets shared by the metrics adapters, in seconds. */

/** Wait-time buckets, seconds: 1 ms to 1 min. */
export const WAIT_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
]);

/** Hold-time buckets, seconds: 10 ms to 1 h. */
export const HOLD_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
]);
