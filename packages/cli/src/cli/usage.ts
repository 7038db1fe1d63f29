/**
 * Checks shared by CLI commands. Each returns the parsed value or throws a `UsageError` whose
 * message names the option, the accepted range and the value received; the CLI prints it on
 * one line and exits with code 2 before doing anything else.
 */
import {
  DEFAULT_SQLITE_PATH,
  InvalidArgumentError,
  redactStoreUrl,
  validateElectionValue,
  validateKey,
  validateStoreUrl,
} from 'fencelock';

/**
 * Store of `run` and `inspect` when `--store` is not given: the embedded SQLite file
 * `./.fencelock/locks.db`, relative to the working directory (so processes started from the same
 * folder share it).
 */
export const DEFAULT_CLI_STORE = `sqlite:${DEFAULT_SQLITE_PATH}`;

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

/** Longest part of a received value a usage message repeats, characters. */
const SHOWN_CHARS = 60;

/** `raw` as a usage message shows it: JSON-quoted, cut after `SHOWN_CHARS` characters. */
export function shownValue(raw: string): string {
  return JSON.stringify(raw.length > SHOWN_CHARS ? `${raw.slice(0, SHOWN_CHARS)}…` : raw);
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
      `invalid ${option}: expected an integer in [${min}, ${max}], received ${shownValue(raw)}`,
    );
  }
  return value;
}

/**
 * Check a store URL the way `createLocker` does (scheme and parameters, no connection made).
 * @throws UsageError naming `option`; the URL it echoes has its password redacted.
 */
export function parseStoreOption(option: string, raw: string): string {
  try {
    validateStoreUrl(raw);
  } catch (error) {
    if (!(error instanceof InvalidArgumentError)) throw error;
    const what = error.argument === 'store' ? '' : ` (${error.argument})`;
    throw new UsageError(
      option,
      `invalid ${option}${what}: expected ${error.allowed}, received ${shownValue(redactStoreUrl(raw))}`,
    );
  }
  return raw;
}

/**
 * Check a lock key given on the command line, as the Locker would (1 to 1024 UTF-8 bytes, no
 * lone surrogate).
 * @throws UsageError naming `argument`.
 */
export function parseKeyArgument(argument: string, raw: string): string {
  try {
    return validateKey(raw);
  } catch (error) {
    if (!(error instanceof InvalidArgumentError)) throw error;
    throw new UsageError(
      argument,
      `invalid ${argument}: expected ${error.allowed}, received ${shownValue(raw)}`,
    );
  }
}

/**
 * Check the value a candidate publishes (`elect --value`) by the library's rule
 * (`validateElectionValue`: a well-formed string without U+0000 of at most 64 KiB of UTF-8).
 * @throws UsageError naming `option`.
 */
export function parseElectionValue(option: string, raw: string): string {
  try {
    return validateElectionValue(raw);
  } catch (error) {
    if (!(error instanceof InvalidArgumentError)) throw error;
    throw new UsageError(
      option,
      `invalid ${option}: expected ${error.allowed}, received ${shownValue(raw)}`,
    );
  }
}
