/**
 * The dashboard's sign-in: the API token is entered once (`POST /ui/session`), then the browser
 * carries a session cookie. A session id is 32 random bytes; the sidecar keeps only their
 * SHA-256 digests, in memory (a restart signs everyone out), at most `MAX_SESSIONS` (the oldest
 * go first), each for `SESSION_TTL_MS`. The cookie is `HttpOnly` and `SameSite=Strict`, scoped
 * to `/ui`, and it opens the dashboard's own read-only routes only, never the `/v1` API: a page
 * on another site cannot make the browser act with it.
 */
import { createHash, randomBytes } from 'node:crypto';
import { parse, serialize } from 'cookie';

/** Name of the session cookie. */
export const SESSION_COOKIE = 'fencelock_ui';
/** How long a sign-in lasts, ms (12 hours). */
export const SESSION_TTL_MS = 12 * 3_600_000;
/** Sessions kept at once. */
export const MAX_SESSIONS = 1_000;

/** The sign-in sessions of one sidecar, in memory; `now` injected for tests. */
export class UiSessions {
  /** Expiry (ms since the epoch) by digest of the session id, oldest first. */
  readonly #expiries = new Map<string, number>();
  readonly #now: () => number;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /**
   * Open a session. `secure`: the request came over HTTPS (a proxy's `x-forwarded-proto`), so the
   * cookie is marked `Secure`.
   * @returns the `Set-Cookie` header value.
   */
  open(secure: boolean): string {
    const id = randomBytes(32).toString('base64url');
    this.#expiries.set(digest(id), this.#now() + SESSION_TTL_MS);
    if (this.#expiries.size > MAX_SESSIONS) {
      this.#expiries.delete(this.#expiries.keys().next().value as string);
    }
    return serialize(SESSION_COOKIE, id, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/ui',
      maxAge: SESSION_TTL_MS / 1000,
      secure,
    });
  }

  /** End the session of `cookieHeader`, if any. @returns the `Set-Cookie` value that clears it. */
  close(cookieHeader: string | undefined): string {
    const id = idOf(cookieHeader);
    if (id !== undefined) this.#expiries.delete(digest(id));
    return serialize(SESSION_COOKIE, '', {
      httpOnly: true,
      sameSite: 'strict',
      path: '/ui',
      maxAge: 0,
    });
  }

  /** Whether the `Cookie` header carries a live session. */
  valid(cookieHeader: string | undefined): boolean {
    const id = idOf(cookieHeader);
    if (id === undefined) return false;
    const key = digest(id);
    const expiry = this.#expiries.get(key);
    if (expiry === undefined) return false;
    if (expiry > this.#now()) return true;
    this.#expiries.delete(key);
    return false;
  }
}

function idOf(cookieHeader: string | undefined): string | undefined {
  if (cookieHeader === undefined) return undefined;
  const id = parse(cookieHeader)[SESSION_COOKIE];
  return id === undefined || id === '' ? undefined : id;
}

function digest(id: string): string {
  return createHash('sha256').update(id).digest('hex');
}
