/**
 * Hostile command-line values (issue 17): the CLI's option and argument checks answer a
 * `UsageError` naming the option, with a short message (a value is shown cut to 60 characters,
 * store passwords redacted), or the parsed value; never another error, in time linear in the
 * value's size.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  parseIntegerOption,
  parseKeyArgument,
  parseStoreOption,
  UsageError,
} from '../../packages/cli/src/cli/usage.js';
import { fuzzRuns, MB } from '../helpers/fuzz.js';

const RUNS = fuzzRuns(2_000);

/** Text that trips parsers: digits and signs, separators, surrogates, NUL, URL parts. */
const hostileText = fc.oneof(
  fc
    .array(
      fc.constantFrom(
        '1',
        '0',
        '-',
        '+',
        '.',
        'e',
        ' ',
        '\t',
        '٣',
        'a',
        '\ud800',
        '\u0000',
        'redis://',
        'u:pw@',
        ':',
        '?password=',
      ),
      { maxLength: 30 },
    )
    .map((pieces) => pieces.join('')),
  fc.string({ unit: 'binary', maxLength: 60 }),
);

/** Run `parse`; the value it returned, or the UsageError it threw (any other error fails). */
function outcome<T>(parse: () => T): T | UsageError {
  try {
    return parse();
  } catch (error) {
    if (error instanceof UsageError) return error;
    throw error;
  }
}

/** A usage message stays short whatever it was given. */
function expectShortMessage(error: UsageError, option: string): void {
  expect(error.option).toBe(option);
  expect(error.message.startsWith(`invalid ${option}`)).toBe(true);
  expect(error.message.length).toBeLessThan(600);
}

describe('CLI usage checks on hostile values', () => {
  it('--ttl-style integers: the value in range, or a UsageError naming the option', () => {
    fc.assert(
      fc.property(hostileText, (raw) => {
        const parsed = outcome(() => parseIntegerOption('--ttl', raw, 100, 2_147_483_647));
        if (parsed instanceof UsageError) expectShortMessage(parsed, '--ttl');
        else {
          expect(raw.trim()).toMatch(/^\d+$/);
          expect(parsed).toBe(Number(raw.trim()));
          expect(parsed).toBeGreaterThanOrEqual(100);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('keys: the key, or a UsageError naming the argument', () => {
    fc.assert(
      fc.property(hostileText, (raw) => {
        const parsed = outcome(() => parseKeyArgument('<key>', raw));
        if (parsed instanceof UsageError) expectShortMessage(parsed, '<key>');
        else expect(parsed).toBe(raw);
      }),
      { numRuns: RUNS },
    );
  });

  it('store URLs: the URL, or a UsageError naming the option without its password', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          hostileText,
          hostileText.map((rest) => `redis://u:S3cret@${rest}`),
          hostileText.map((rest) => `postgres://u:S3cret@h/db?${rest}`),
          hostileText.map((rest) => `postgres://u@h/db?${rest}&password=S3cret`),
        ),
        (raw) => {
          const parsed = outcome(() => parseStoreOption('--store', raw));
          if (parsed instanceof UsageError) {
            expectShortMessage(parsed, '--store');
            // The URLs given a password never show it.
            expect(parsed.message).not.toContain('S3cret');
          } else expect(parsed).toBe(raw);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it.each<[string, () => unknown]>([
    ['--ttl', () => parseIntegerOption('--ttl', '9'.repeat(MB), 100, 2_147_483_647)],
    ['<key>', () => parseKeyArgument('<key>', 'a'.repeat(MB))],
    ['--store', () => parseStoreOption('--store', `redis://u:S3cret@${'a'.repeat(MB)}:x`)],
    ['--store', () => parseStoreOption('--store', `redis://${'a:'.repeat(MB / 2)}`)],
  ])('refuses 1 MB for %s at once, with a short message', (option, parse) => {
    const started = performance.now();
    const parsed = outcome(parse);
    expect(performance.now() - started).toBeLessThan(1_000);
    expect(parsed).toBeInstanceOf(UsageError);
    expectShortMessage(parsed as UsageError, option);
    expect((parsed as UsageError).message).not.toContain('S3cret');
  });
});
