/**
 * Monotonic time for all lease arithmetic. Wall-clock time (`Date.now()`) jumps with NTP steps
 * and manual changes; `performance.now()` does not, so a lease's validity never depends on it
 * (DESIGN.md semantics 4).
 */

/** Milliseconds on the process's monotonic clock (`performance.now()`). */
export function monotonicNow(): number {
  return performance.now();
}
