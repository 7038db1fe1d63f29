/**
 * The dashboard's sign-in: the API token is entered once (`POST /ui/session`), then the browser
 * carries a session cookie. A session id is 32 random bytes; the sidecar keeps only their
 * SHA-256 digests, in memory (a restart signs everyone out), at most `MAX_SESSIONS` (the oldest
 * go first), each for `SESSION_TTL_MS`. The cookie is `HttpOnly` and `SameSite=Strict`, scoped
 * to `/ui`, and it opens the dashboard's own read-only routes only, never the `/v1` API: a page
 * on another site cannot make the browser act with it. The event streams a session opened end
 * with it (`whenEnded`): a sign-out, an expiry or an eviction cuts them off, not only the
 * requests made after it.
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
  /** What to call when a session ends, by digest of its id (`whenEnded`). */
  readonly #onEnd = new Map<string, Set<() => void>>();
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
    if (this.#expiries.size > MAX_SESSIONS) this.#end(this.#expiries.keys().next().value!);
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
    if (id !== undefined) this.#end(digest(id));
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
    this.#end(key);
    return false;
  }

  /**
   * Call `onEnd` once when the live session of `cookieHeader` ends: signed out, pushed out by
   * `MAX_SESSIONS` newer ones, or at its expiry (a timer, unref'd).
   * @returns a function that stops watching (idempotent); nothing is watched, and `onEnd` never
   *   called, when the header carries no live session (a request signed by the API token).
   */
  whenEnded(cookieHeader: string | undefined, onEnd: () => void): () => void {
    const id = idOf(cookieHeader);
    const key = id === undefined ? undefined : digest(id);
    const expiry = key === undefined ? undefined : this.#expiries.get(key);
    if (key === undefined || expiry === undefined) return () => {};
    const watchers = this.#onEnd.get(key) ?? new Set();
    this.#onEnd.set(key, watchers);
    const stop = () => {
      clearTimeout(timer);
      watchers.delete(fire);
      if (watchers.size === 0 && this.#onEnd.get(key) === watchers) this.#onEnd.delete(key);
    };
    const fire = () => {
      stop();
      onEnd();
    };
    const timer = setTimeout(() => this.#end(key), Math.max(0, expiry - this.#now()));
    timer.unref();
    watchers.add(fire);
    return stop;
  }

  /** End the session of digest `key`: forget it, and tell whoever watches it. */
  #end(key: string): void {
    this.#expiries.delete(key);
    const watchers = this.#onEnd.get(key);
    this.#onEnd.delete(key);
    for (const fire of watchers ?? []) fire();
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
