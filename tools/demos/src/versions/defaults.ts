/**
 * Defaults and bounds of `fencelock demo versions`, and the five lock designs it runs. Kept
 * apart from the orchestrator so the CLI can show them in `--help` without loading the demo
 * (and ioredis).
 */

/** Default option values. */
export const VERSIONS_DEFAULTS = Object.freeze({
  /** The Redis of `scripts/services.sh`. */
  store: 'redis://127.0.0.1:6390',
  /** Lease length of every version that has one, ms. */
  ttlMs: 500,
});

/** Bounds of `--ttl`, ms. */
export const VERSIONS_TTL_LIMITS = Object.freeze({
  /**
   * Below this a watchdog renewing every ttl / 3 on a loaded machine misses renewals even
   * without a pause, and the scenarios stop showing what they are meant to show.
   */
  minMs: 100,
  /** Above this the whole demo takes more than a minute. */
  maxMs: 5000,
});

/** The five versions, in order. */
export const VERSION_IDS = ['v1', 'v2', 'v3', 'v4', 'v5'] as const;

/** One of the five versions. */
export type VersionId = (typeof VERSION_IDS)[number];

/** What each version is, the fault it meets, and the failure it is expected to show. */
export const VERSION_PLANS: Readonly<
  Record<
    VersionId,
    {
      /** Short name for the summary table. */
      readonly short: string;
      readonly design: string;
      readonly fault: string;
      readonly expected: string;
    }
  >
> = Object.freeze({
  v1: {
    short: 'SETNX, no TTL',
    design: 'SETNX, no TTL',
    fault: 'the holder is killed (kill -9) inside its critical section',
    expected: 'deadlock: nobody acquires within the observation window',
  },
  v2: {
    short: 'SET NX PX + DEL',
    design: 'SET NX PX, release by plain DEL',
    fault: 'the holder works longer than the TTL, then releases',
    expected: "the late release deletes another client's lock (wrong deletions >= 1)",
  },
  v3: {
    short: '+ owner-checked release',
    design: 'SET NX PX, owner-checked release (Lua compare-and-delete)',
    fault: 'the holder works longer than the TTL (no renewal)',
    expected: 'two holders at once (overlaps >= 1)',
  },
  v4: {
    short: '+ watchdog renewal',
    design: 'v3 plus a watchdog renewing every ttl/3',
    fault: 'the holder is paused (SIGSTOP) past the TTL, then resumed (SIGCONT)',
    expected:
      'two holders at once, and the stale write is accepted (overlaps >= 1, stale accepted >= 1)',
  },
  v5: {
    short: 'fencelock + fencing token',
    design: 'fencelock lease + fencing token checked by the resource (RedisFence)',
    fault: 'the holder is paused (SIGSTOP) past the TTL, then resumed (SIGCONT)',
    expected: 'the stale write is rejected (stale rejected >= 1, stale accepted = 0)',
  },
});
