/**
 * API-token authentication of sidecar requests (a bearer token, or Dapr's `dapr-api-token`),
 * the paths left open, and the loopback rule for a sidecar without a token.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { isIP } from 'node:net';

/** Shortest accepted token, characters. */
export const MIN_TOKEN_CHARS = 16;

/** Header in which Dapr's clients send the API token (`DAPR_API_TOKEN`), HTTP and gRPC alike. */
export const DAPR_API_TOKEN_HEADER = 'dapr-api-token';

/**
 * Paths answered without a token, matched exactly (no prefix or query match): fencelock's
 * `GET /healthz` and Dapr's two health probes, which Dapr also leaves open so that
 * orchestrators can probe the sidecar.
 */
export const OPEN_PATHS: ReadonlySet<string> = new Set([
  '/healthz',
  '/v1.0/healthz',
  '/v1.0/healthz/outbound',
]);

/** The credentials a request carries, as header values (an array when the header repeats). */
export interface CarriedToken {
  /** `Authorization` header: `Bearer <token>`. */
  readonly authorization?: string | readonly string[] | undefined;
  /** `dapr-api-token` header (HTTP) or metadata entry (gRPC): the token itself. */
  readonly daprApiToken?: string | readonly string[] | undefined;
}

/**
 * A checker of the API token a request carries, either as `Authorization: Bearer <token>` or
 * as Dapr's `dapr-api-token: <token>`. Both sides are hashed with SHA-256 and compared with
 * `crypto.timingSafeEqual`, so the time taken says nothing about the token, its length
 * included. A value that is not one string (a gRPC metadata entry given twice) is refused.
 * @returns `check(carried)`: true when one of the headers carries exactly `token`.
 */
export function apiTokenChecker(token: string): (carried: CarriedToken) => boolean {
  const expected = digest(token);
  const matches = (candidate: string) => timingSafeEqual(digest(candidate), expected);
  return ({ authorization, daprApiToken }) => {
    if (typeof daprApiToken === 'string' && matches(daprApiToken)) return true;
    if (typeof authorization !== 'string') return false;
    const m = /^Bearer +(\S+) *$/i.exec(authorization);
    return m !== null && matches(m[1]!);
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
