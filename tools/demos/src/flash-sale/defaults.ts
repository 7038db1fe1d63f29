/**
 * Defaults of the flash-sale demo's options. Kept apart from the orchestrator so the CLI can show
 * them in `--help` without loading the demo (and its SQLite driver).
 */
export const FLASH_SALE_DEFAULTS = Object.freeze({
  /** Worker processes. */
  workers: 8,
  /** Initial stock. */
  stock: 100,
  /** Purchase attempts in all, split across the workers. */
  attempts: 2000,
  /** Lease length, ms. */
  ttlMs: 5000,
});

/** Upper bounds the CLI accepts, to keep a typo from forking thousands of processes. */
export const FLASH_SALE_LIMITS = Object.freeze({
  workers: 256,
  stock: 1_000_000_000,
  attempts: 100_000_000,
  /** Largest delay a Node.js timer accepts (2^31 − 1 ms). */
  ttlMs: 2_147_483_647,
});
