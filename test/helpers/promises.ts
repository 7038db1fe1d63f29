/** Small promise helpers shared by the integration tests. */

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
