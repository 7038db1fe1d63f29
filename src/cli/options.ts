/**
 * Checks shared by CLI commands. Each returns the parsed value or throws a `UsageError` whose
 * message names the option, the accepted range and the value received; the CLI prints it on
 * one line and exits with code 2 before doing anything else.
 */
import { InvalidArgumentError } from '../index.js';
import { resolveStoreUrl } from '../stores.js';

/** Bad command-line input: printed as one line, exit code 2. */
export class UsageError extends Error {
  /** The offending option, e.g. `--workers`. */
  readonly option: string;

  constructor(option: string, message: string) {
    super(message);
    this.name = 'UsageError';
    this.option = option;
  }
}

/**
 * Parse a whole number in [`min`, `max`] given as text (digits only: no sign, no decimals).
 * @throws UsageError naming `option`.
 */
export function parseIntegerOption(option: string, raw: string, min: number, max: number): number {
  const value = /^\d+$/.test(raw.trim()) ? Number(raw.trim()) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw new UsageError(
      option,
      `invalid ${option}: expected an integer in [${min}, ${max}], received ${JSON.stringify(raw)}`,
    );
  }
  return value;
}

/**
 * Check a store URL the way `createLocker` does (scheme and parameters, no connection made).
 * @throws UsageError naming `option`.
 */
export function parseStoreOption(option: string, raw: string): string {
  try {
    resolveStoreUrl(raw);
  } catch (error) {
    if (!(error instanceof InvalidArgumentError)) throw error;
    const what = error.argument === 'store' ? '' : ` (${error.argument})`;
    throw new UsageError(
      option,
      `invalid ${option}${what}: expected ${error.allowed}, received ${JSON.stringify(raw)}`,
    );
  }
  return raw;
}
