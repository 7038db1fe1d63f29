/**
 * The redaction of store URLs the CLI and the sidecar print (no engine needed): the password of
 * the user-info part and of `password=` parameters becomes `***`; user, hosts, path and other
 * parameters stay; shapes in error wordings and IPv6 hosts are left alone.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { redactStoreUrl, redactStoreUrlsIn } from '../../packages/fencelock/src/redact.js';

describe('redactStoreUrl', () => {
  it.each([
    ['postgres://u:S3cretPw@db.example:5432/app', 'postgres://u:***@db.example:5432/app'],
    ['postgresql://u:S3cretPw@h/app?schema=locks', 'postgresql://u:***@h/app?schema=locks'],
    ['redis://:S3cretPw@127.0.0.1:6379/2', 'redis://:***@127.0.0.1:6379/2'],
    ['rediss://default:S3cretPw@cache:6380', 'rediss://default:***@cache:6380'],
    [
      'redis+sentinel://u:S3cretPw@s1:26379,s2:26379/mymaster',
      'redis+sentinel://u:***@s1:26379,s2:26379/mymaster',
    ],
    ['etcd://root:S3cretPw@e1:2379,e2:2379/ns', 'etcd://root:***@e1:2379,e2:2379/ns'],
    // An unencoded "@", "/" or "?" in the password: everything up to the last "@" is hidden.
    ['redis://u:pa@ss/wo?rd@h:6379', 'redis://u:***@h:6379'],
    // Query parameters, any case, also with a user-info password.
    [
      'postgres://u@h/db?password=S3cretPw&sslmode=require',
      'postgres://u@h/db?password=***&sslmode=require',
    ],
    [
      'postgres://u@h/db?sslmode=require&PASSWORD=S3cretPw',
      'postgres://u@h/db?sslmode=require&PASSWORD=***',
    ],
    ['postgres://u:a@h/db?sslpassword=S3cretPw', 'postgres://u:***@h/db?sslpassword=***'],
    // A store URL inside a parameter, percent-encoded (PostgreSQL's listenUrl): its password too.
    [
      `postgres://u:S3cretPw@pgbouncer:6432/app?pooler=transaction&listenUrl=${encodeURIComponent('postgres://u:S3cretPw@db:5432/app')}&schema=s`,
      `postgres://u:***@pgbouncer:6432/app?pooler=transaction&listenUrl=${encodeURIComponent('postgres://u:***@db:5432/app')}&schema=s`,
    ],
    [
      `postgres://u@h/app?listenUrl=${encodeURIComponent('postgres://u@db/app?password=S3cretPw')}`,
      `postgres://u@h/app?listenUrl=${encodeURIComponent('postgres://u@db/app?password=***')}`,
    ],
    // No "//" after the scheme: user info all the same.
    ['redis:default:S3cretPw@127.0.0.1:6390', 'redis:default:***@127.0.0.1:6390'],
    // A lock key is not a URL, even with a colon and an at sign.
    ['order:pay:joe@example.com', 'order:pay:joe@example.com'],
    ['etcd:root:S3cretPw@e1:2379', 'etcd:root:***@e1:2379'],
    // Nothing to hide.
    [
      `postgres://u@h/app?listenUrl=${encodeURIComponent('postgres://u@db/app')}`,
      `postgres://u@h/app?listenUrl=${encodeURIComponent('postgres://u@db/app')}`,
    ],
    ['postgres://u@h/app?listenUrl=%E0%A4%A', 'postgres://u@h/app?listenUrl=%E0%A4%A'],
    ['redis://127.0.0.1:6379', 'redis://127.0.0.1:6379'],
    ['postgres://u@h/db', 'postgres://u@h/db'],
    ['sqlite:./.fencelock/locks.db', 'sqlite:./.fencelock/locks.db'],
    ['redis://[::1]:6379/0', 'redis://[::1]:6379/0'],
    ['bogus://x', 'bogus://x'],
    ['', ''],
  ])('%s → %s', (url, redacted) => {
    expect(redactStoreUrl(url)).toBe(redacted);
    expect(redactStoreUrl(url)).not.toContain('S3cretPw');
  });
});

describe('redactStoreUrlsIn', () => {
  it('redacts every URL of a message and leaves the shapes of its wording alone', () => {
    const message =
      'invalid store: expected redis://[user:pass@]host:port[/db] or rediss://…, received "redis://u:S3cretPw@h:0", also postgres://x:Pw2@h/db?password=Pw3 here';
    expect(redactStoreUrlsIn(message)).toBe(
      'invalid store: expected redis://[user:pass@]host:port[/db] or rediss://…, received "redis://u:***@h:0", also postgres://x:***@h/db?password=*** here',
    );
  });
});

describe('redactStoreUrlsIn on hostile text', () => {
  /**
   * The pattern this module used before it scanned words itself: the reference for what counts
   * as a URL in a text. It backtracks (quadratic on a long run of letters), so it is only run
   * here, on short texts.
   */
  const REFERENCE =
    /[a-z][a-z0-9+.-]*:\/\/[^\s"'`<>]*|\b(?:redis|rediss|redis\+sentinel|redis\+cluster|redlock|etcd|zk|postgres|postgresql):[^\s"'`<>/@]*@[^\s"'`<>]*/gi;
  const reference = (text: string) => text.replace(REFERENCE, (url) => redactStoreUrl(url));

  /** Texts built from the pieces URLs and their look-alikes are made of. */
  const urlish = fc
    .array(
      fc.constantFrom(
        'redis',
        'rediss',
        'redis+sentinel',
        'postgres',
        'zk',
        'etcd',
        'x1.',
        'a',
        'Z',
        '9',
        '-',
        '+',
        ':',
        '//',
        '/',
        '@',
        'u:pw@',
        '?',
        'password=',
        '&',
        '=',
        '%3A%2F%2F',
        ' ',
        '"',
        '<',
        'é',
        '\u0000',
      ),
      { maxLength: 24 },
    )
    .map((pieces) => pieces.join(''));

  it('finds and redacts the same URLs as the reference pattern', () => {
    fc.assert(
      fc.property(fc.oneof(urlish, fc.string({ maxLength: 40 })), (text) => {
        expect(redactStoreUrlsIn(text)).toBe(reference(text));
      }),
      { numRuns: 5_000 },
    );
  });

  it.each([
    ['letters', 'a'],
    ['scheme characters', 'a+'],
    ['bare store schemes', 'redis:'],
    ['schemes without a host', 'a://'],
    ['parameters', '?password='],
  ])('takes linear time on 1 MB of repeated %s', (_name, unit) => {
    const text = unit.repeat(Math.ceil(1_048_576 / unit.length));
    const started = performance.now();
    redactStoreUrlsIn(text);
    // The backtracking pattern needed over a second for 20,000 letters; this is a generous bound.
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
