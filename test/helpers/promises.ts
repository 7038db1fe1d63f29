/** Small promise and timer helpers shared by the tests. */

/**
 * How early a Node timer can fire, ms: libuv schedules it on the loop's cached millisecond clock,
 * so it can run up to 1 ms before its delay has passed on a fresh clock reading (seen in CI: a
 * 200 ms wait measured as 199.98 ms).
 */
export const TIMER_EARLY_MS = 1;

/** Whether `promise` has settled after `ms` (it is left running; never an unhandled rejection). */
export async function settledWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  promise.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
  return settled;
}
