/**
 * Hostile input at the library's entry points (issue 17): random and adversarial values — wrong
 * types, runs of one character up to 1 MB, URL-like prefixes, unicode, NUL — get a typed
 * `InvalidArgumentError` naming the argument, before any engine call, in time linear in their
 * size. Valid values pass through to the engine (an in-memory backend here: no network).
 */
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
  MAX_KEY_BYTES,
  STORE_SCHEMES,
  validateStoreUrl,
} from '../../packages/fencelock/src/index.js';
import { fuzzRuns, MB } from '../helpers/fuzz.js';
import { MemoryBackend } from './memory-backend.js';

const RUNS = fuzzRuns(2_000);

/** `unit` repeated to about `bytes` characters. */
const run = (unit: string, bytes = MB) => unit.repeat(Math.ceil(bytes / unit.length));

/** Characters and pieces that trip parsers: separators, escapes, surrogates, NUL, URL parts. */
const PIECES = [
  'a',
  'é',
  '😀',
  '\ud800',
  '\u0000',
  ':',
  '/',
  '//',
  '@',
  '?',
  '=',
  '&',
  '%',
  '%ZZ',
  '[',
  ']',
  '{',
  ' ',
  '"',
  'redis://',
  'postgres://u:pw@',
  'password=',
] as const;

/** Strings made of those pieces, and plain random strings. */
const hostileText = fc.oneof(
  fc.array(fc.constantFrom(...PIECES), { maxLength: 40 }).map((p) => p.join('')),
  fc.string({ unit: 'binary', maxLength: 80 }),
);

/** Hostile strings, and any value at all. */
const hostile = fc.oneof(hostileText, fc.anything());

/** Runs of one piece, up to 1 MB: the inputs that make a backtracking pattern quadratic. */
const LONG_RUNS = PIECES.map((piece) => [JSON.stringify(piece), run(piece)] as const);

/** What `validateKey` accepts. */
function isValidKey(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    value.length > 0 &&
    Buffer.byteLength(value) <= MAX_KEY_BYTES &&
    !/\p{Surrogate}/u.test(value) &&
    !value.includes('\u0000')
  );
}

/** Run `call`; answer the InvalidArgumentError it threw or rejected with, else undefined. */
async function invalidArgument(call: () => unknown): Promise<InvalidArgumentError | undefined> {
  try {
    await call();
    return undefined;
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error;
    throw error;
  }
}

let backend: MemoryBackend;
let locker: Locker;

beforeEach(() => {
  backend = new MemoryBackend();
  locker = createLocker(backend);
});

afterEach(async () => {
  await locker.close();
});

describe('keys', () => {
  it('are refused with InvalidArgumentError("key") before any engine call, or granted', async () => {
    await fc.assert(
      fc.asyncProperty(hostile, async (key) => {
        const calls = backend.totalCalls;
        const error = await invalidArgument(async () => {
          const lease = await locker.tryAcquire(key as string);
          await lease?.release();
        });
        if (isValidKey(key)) {
          expect(error).toBeUndefined();
        } else {
          expect(error?.argument).toBe('key');
          expect(backend.totalCalls).toBe(calls);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it.each(LONG_RUNS)('refuses 1 MB of %s at once', async (_name, key) => {
    for (const call of [
      () => locker.acquire(key),
      () => locker.tryAcquire(key),
      () => locker.withLock(key, async () => undefined),
      () => locker.inspect(key),
      () => locker.lock(key),
    ]) {
      const started = performance.now();
      const error = await invalidArgument(call);
      // Measured well under 10 ms; the bound is generous for a loaded machine.
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(error?.argument).toBe('key');
      expect(error?.message.length).toBeLessThan(1_000);
    }
    expect(backend.totalCalls).toBe(0);
  });
});

describe('options', () => {
  const FIELDS = [
    'ttlMs',
    'waitMs',
    'autoRenew',
    'maxHoldMs',
    'reentrant',
    'mode',
    'retry',
    'signal',
  ];

  it('are refused with InvalidArgumentError naming the option, or used', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...FIELDS), hostile, async (field, value) => {
        const calls = backend.totalCalls;
        const error = await invalidArgument(async () => {
          const lease = await locker.tryAcquire('k', { [field]: value } as never);
          await lease?.release();
        });
        if (error !== undefined) {
          expect(error.argument.startsWith(field)).toBe(true);
          expect(backend.totalCalls).toBe(calls);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('refuses an array where an options object or retry object belongs', async () => {
    expect((await invalidArgument(() => locker.tryAcquire('k', [] as never)))?.argument).toBe(
      'options',
    );
    expect(
      (await invalidArgument(() => locker.tryAcquire('k', { retry: [] as never })))?.argument,
    ).toBe('retry');
    expect(backend.totalCalls).toBe(0);
  });

  it('refuses an options value that is not an object', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.string(), fc.integer(), fc.boolean(), fc.bigInt(), fc.array(fc.anything())),
        async (options) => {
          const error = await invalidArgument(() => locker.tryAcquire('k', options as never));
          expect(error?.argument).toBe('options');
        },
      ),
    );
  });
});

describe('store URLs', () => {
  it('are refused with InvalidArgumentError("store"…) or accepted, never another error', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          hostile,
          fc
            .tuple(fc.constantFrom(...STORE_SCHEMES), fc.constantFrom(':', '://'), hostileText)
            .map(([scheme, sep, rest]) => `${scheme}${sep}${rest}`),
        ),
        (store) => {
          try {
            validateStoreUrl(store);
          } catch (error) {
            expect(error).toBeInstanceOf(InvalidArgumentError);
            expect((error as InvalidArgumentError).argument.startsWith('store')).toBe(true);
            // The message never carries a password it was given.
            expect((error as Error).message).not.toMatch(/u:pw@/);
          }
        },
      ),
      { numRuns: RUNS * 2 },
    );
  }, 60_000);

  const LONG_URLS = STORE_SCHEMES.flatMap((scheme) =>
    ['/', 'a', ':', '@', '?', 'a=', '?a=', '%', '[', ',', 'h:1,'].map(
      (piece) =>
        [
          `${scheme}://h:1/ + 1 MB of ${JSON.stringify(piece)}`,
          `${scheme}://h:1/${run(piece)}`,
        ] as const,
    ),
  );

  it.each(LONG_URLS)('answers %s in linear time', (_name, store) => {
    const started = performance.now();
    const error = (() => {
      try {
        createLocker(store);
        return undefined;
      } catch (e) {
        return e;
      }
    })();
    expect(performance.now() - started).toBeLessThan(1_000);
    if (error !== undefined) expect(error).toBeInstanceOf(InvalidArgumentError);
  });
});
