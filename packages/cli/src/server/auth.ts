/**
 * Bearer-token authentication of sidecar requests, and the loopback rule for a sidecar without
 * a token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';

/** Shortest accepted token, characters. */
export const MIN_TOKEN_CHARS = 16;

/**
 * A checker for `Authorization: Bearer <token>` headers. Both sides are hashed with SHA-256 and
 * compared with `crypto.timingSafeEqual`, so the time taken says nothing about the token, its
 * length included.
 * @returns `check(header)`: true when the header carries exactly `token`.
 */
export function bearerChecker(token: string): (header: string | undefined) => boolean {
  const expected = digest(token);
  return (header) => {
    if (typeof header !== 'string') return false;
    const m = /^Bearer +(\S+) *$/i.exec(header);
    if (m === null) return false;
    return timingSafeEqual(digest(m[1]!), expected);
  };
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value, 'utf8').digest();
}

/**
 * Whether `host` only accepts connections from this machine: `localhost`, an address in
 * 127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^::ffff:127\./.test(h) || h === '0:0:0:0:0:0:0:1';
  return false;
}
