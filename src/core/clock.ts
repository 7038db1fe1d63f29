/**
 * Monotonic time for all lease arithmetic. Wall-clock time (`Date.now()`) jumps with NTP steps
 * and manual changes; `performance.now()` does not, so a lease's validity never depends on it
 * (DESIGN.md semantics 4).
 */
import { performance } from 'node:perf_hooks';

/** Milliseconds on the process's monotonic clock. */
export function monotonicNow(): number {
  return performance.now();
}
