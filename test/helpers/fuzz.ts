/** Shared settings of the property-based (fast-check) tests of hostile input. */

/** One mebibyte, the size of the longest values the tests send. */
export const MB = 1_048_576;

/**
 * Random cases per property: `defaultRuns`, or `FENCELOCK_FUZZ_RUNS` for a long run (e.g.
 * `FENCELOCK_FUZZ_RUNS=40000 npx vitest run test/unit/hostile-input.test.ts --testTimeout 0`).
 */
export function fuzzRuns(defaultRuns: number): number {
  const configured = Number(process.env.FENCELOCK_FUZZ_RUNS);
  return Number.isSafeInteger(configured) && configured > 0 ? configured : defaultRuns;
}
