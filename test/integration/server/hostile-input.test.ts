/**
 * Hostile input at the sidecar (issue 17): random and adversarial bodies, keys, owners, tokens and
 * headers on every lock route get a 4xx with an error code — never a 5xx, never a dropped
 * connection — and a 1 MB key or body is refused at once. A sidecar in this process over a SQLite
 * file, with a token, on a loopback port; requests go over real HTTP.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Sidecar } from '../../../packages/cli/src/server/index.js';
import { fuzzRuns, MB } from '../../helpers/fuzz.js';
import { startInProcess } from './support.js';

const TOKEN = 'hostile-input-test-token-0123456789';

const RUNS = fuzzRuns(150);

let dir: string;
let sidecar: Sidecar;
let base: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'fencelock-hostile-'));
  ({ sidecar, url: base } = await startInProcess({
    store: `sqlite:${join(dir, 'locks.db')}`,
    token: TOKEN,
    maxWaitMs: 100,
  }));
});

afterAll(async () => {
  await sidecar?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Strings that trip parsers: separators, escapes, surrogates, NUL, URL-like parts, numbers. */
const hostileText = fc.oneof(
  fc
    .array(
      fc.constantFrom(
        'a',
        'é',
        '😀',
        '\ud800',
        '\u0000',
        '%',
        '%2F',
        '/',
        ':',
        '?',
        '#',
        '..',
        '"',
      ),
      { maxLength: 30 },
    )
    .map((pieces) => pieces.join('')),
  fc.string({ unit: 'binary', maxLength: 60 }),
);

/** Any JSON value, and values of the right name with the wrong shape. */
const hostileValue = fc.oneof(
  hostileText,
  fc.jsonValue(),
  fc.constantFrom(0, -1, 1e308, 99, 100, 2 ** 53, '42', '-1', '0x10', '1e3', null, true, [], {}),
);

const FIELDS = [
  'resourceId',
  'lockOwner',
  'expiryInSeconds',
  'owner',
  'ttlMs',
  'waitMs',
  'fencingToken',
];

/** A body made of the routes' field names (some of them) with hostile values, or any JSON. */
const hostileBody = fc.oneof(
  fc.dictionary(fc.constantFrom(...FIELDS), hostileValue, { maxKeys: 5 }),
  fc.jsonValue(),
);

/**
 * `key` percent-encoded for a path; a lone surrogate (which `encodeURIComponent` refuses) is sent
 * as the bytes of its CESU-8 form, which is not UTF-8: the server must refuse them too.
 */
function pathSegment(key: string): string {
  return key
    .split(/(\p{Surrogate})/u)
    .map((part, index) => (index % 2 === 1 ? '%ED%A0%80' : encodeURIComponent(part)))
    .join('');
}

const ROUTES = [
  () => '/v1.0-alpha1/lock/lockstore',
  () => '/v1.0-alpha1/unlock/lockstore',
  (key: string) => `/v1/locks/${pathSegment(key)}/acquire`,
  (key: string) => `/v1/locks/${pathSegment(key)}/renew`,
  (key: string) => `/v1/locks/${pathSegment(key)}/release`,
];

/** POST `body` (already serialized) to `path`; the status and the body as text. */
async function post(path: string, body: string, headers: Record<string, string> = {}) {
  const response = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${TOKEN}`,
      'content-type': 'application/json',
      ...headers,
    },
    body,
  });
  return { status: response.status, text: await response.text() };
}

/** A 2xx, or a 4xx whose JSON body names an error code. */
function expectHandled(answer: { status: number; text: string }): void {
  if (answer.status >= 200 && answer.status < 300) return;
  expect(answer.status, answer.text).toBeGreaterThanOrEqual(400);
  expect(answer.status, answer.text).toBeLessThan(500);
  expect(JSON.parse(answer.text).errorCode, answer.text).toMatch(/^ERR_/);
}

describe('sidecar, hostile input', () => {
  it('answers any body on any lock route with a 2xx or a 4xx naming the error', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ROUTES),
        hostileText,
        hostileBody,
        async (route, key, body) => {
          expectHandled(await post(route(key), JSON.stringify(body)));
        },
      ),
      { numRuns: RUNS },
    );
  }, 120_000);

  it('refuses bodies that are not JSON, whatever their bytes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...ROUTES), hostileText, async (route, raw) => {
        expectHandled(await post(route('k'), raw));
      }),
      { numRuns: RUNS },
    );
  }, 120_000);

  it('answers a hostile token or Authorization header with 401, never a 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ maxLength: 80 }).filter((value) => /^[\t\x20-\x7e]*$/.test(value)),
        async (value) => {
          const answer = await post(
            '/v1/locks/k/acquire',
            JSON.stringify({ owner: 'a', ttlMs: 1000 }),
            { authorization: value },
          );
          expect(answer.status).toBe(401);
        },
      ),
      { numRuns: RUNS },
    );
  }, 120_000);

  it.each([
    ['a 1 MB key in the path', () => post(`/v1/locks/${'a'.repeat(MB)}/acquire`, '{}')],
    [
      'a 1 MB resourceId',
      () =>
        post(
          '/v1.0-alpha1/lock/lockstore',
          JSON.stringify({ resourceId: 'a'.repeat(MB), lockOwner: 'o', expiryInSeconds: 5 }),
        ),
    ],
    [
      'a 1 MB owner',
      () => post('/v1/locks/k/acquire', JSON.stringify({ owner: 'é'.repeat(MB / 2), ttlMs: 1000 })),
    ],
  ])('refuses %s at once', async (_name, send) => {
    const started = performance.now();
    const answer = await send().catch((error: unknown) => ({ status: 0, text: String(error) }));
    // Measured in milliseconds; the bound is generous for a loaded machine.
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(answer.status, answer.text).toBeGreaterThanOrEqual(400);
    expect(answer.status, answer.text).toBeLessThan(500);
  });
});
