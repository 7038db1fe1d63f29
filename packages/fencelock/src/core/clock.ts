/**
 * Monotonic time for all lease arithmetic. Wall-clock time (`Date.now()`) jumps with NTP steps
 * and manual changes; `performance.now()` does not, so a lease's validity never depends on it
 * (docs/semantics.md, "Validity (monotonic clock, drift)"). Drift math sits beside it.
 */

/** Milliseconds on the process's monotonic clock (`performance.now()`). */
export function monotonicNow(): number {
  return performance.now();
}

/**
 * Drift allowance for a lease of `ttlMs`, ms: `ttlMs × driftFactor + 2` (the Redis
 * documentation's Redlock algorithm, "Distributed locks with Redis": clock drift between
 * processes, plus 2 ms for the timer's granularity). A lease granted at `start` is believed valid
 * only until `start + ttlMs − driftMs(ttlMs, driftFactor)`.
 */
export function driftMs(ttlMs: number, driftFactor: number): number {
  return ttlMs * driftFactor + 2;
}
