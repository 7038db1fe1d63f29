/**
 * Store URLs may carry a password (`redis://user:pass@host`, `postgres://u:pw@host/db`,
 * `postgres://host/db?password=pw`). Whatever echoes a store URL — an `InvalidArgumentError`,
 * the CLI's and the sidecar's messages, a metrics label — goes through `redactStoreUrl` first, as
 * `psql` and libpq hide a connection string's password: the user name, hosts, path and the
 * other parameters stay, so the message still tells which store was meant.
 */

/** What a password is replaced with. */
export const REDACTED = '***';

/**
 * `scheme://` at the start of a store URL; a store scheme without `//` too (`redis:user:pw@host`
 * parses). Only fencelock's own schemes count without `//`: a lock key such as
 * `order:pay:joe@x` is not a URL.
 */
const SCHEME =
  /^(?:[a-z][a-z0-9+.-]*:\/\/|(?:redis|rediss|redis\+sentinel|redis\+cluster|redlock|etcd|zk|postgres|postgresql|sqlite):)/i;

/** Whether `value` starts like a store URL (a `scheme://`, or a store scheme without `//`). */
export function isStoreUrl(value: string): boolean {
  return SCHEME.test(value);
}

/** A `password=` parameter (also `sslpassword=` and the like) and its value. */
const PASSWORD_PARAM = /([?&;][^=&#?;]*password=)[^&#;]*/gi;

/**
 * `store` with its password replaced by `***`: the password of the user-info part
 * (`scheme://user:***@host…`, also without `//`), the value of any `…password=` query parameter,
 * and the password of a store URL percent-encoded in a parameter (`listenUrl`). A string that is
 * not a URL (no scheme) only has its parameters redacted.
 *
 * It errs on the side of hiding: the user-info part runs up to the last `@` of the string (a
 * password may hold an unencoded `@`, `/`, `?` or `#`), so a URL with an `@` in a later part and
 * a `:` before it loses a little more than its password.
 */
export function redactStoreUrl(store: string): string {
  let out = store;
  const scheme = SCHEME.exec(store)?.[0];
  if (scheme !== undefined) {
    const rest = store.slice(scheme.length);
    // `[…]` first, with no URL in it and no `@` after it: an IPv6 host (user info would come
    // before it), or a shape such as `redis://[user:pass@]host` in an error's wording. Any other
    // `@` may end a password (`sqlite://[]postgres://u:pw@h`): hidden as usual.
    const closing = rest.startsWith('[') ? rest.indexOf(']') : -1;
    const bracketed =
      closing !== -1 && !rest.slice(0, closing).includes('//') && rest.indexOf('@', closing) === -1;
    const at = bracketed ? -1 : rest.lastIndexOf('@');
    const colon = at === -1 ? -1 : rest.slice(0, at).indexOf(':');
    if (colon !== -1) {
      out = `${scheme}${rest.slice(0, colon)}:${REDACTED}${rest.slice(at)}`;
    }
  }
  return out.replace(PASSWORD_PARAM, `$1${REDACTED}`).replace(PARAM_VALUE, redactNestedUrl);
}

/** A query parameter's name and value (`?listenUrl=postgres%3A%2F%2F…`). */
const PARAM_VALUE = /([?&;][^=&#?;]*=)([^&#;]+)/g;

/**
 * A parameter whose value is itself a store URL, percent-encoded (PostgreSQL's `listenUrl`),
 * with that URL's password redacted; any other parameter as it was.
 */
function redactNestedUrl(param: string, name: string, value: string): string {
  let decoded: string;
  try {
    decoded = decodeURIComponent(value);
  } catch {
    return param; // not valid percent-encoding: not a URL we could have parsed either
  }
  if (!SCHEME.test(decoded)) return param;
  const redacted = redactStoreUrl(decoded);
  return redacted === decoded ? param : `${name}${encodeURIComponent(redacted)}`;
}

/** A run of text between the characters that end a URL (whitespace, quotes, angle brackets). */
const WORD = /[^\s"'`<>]+/g;

/** A character of a URL scheme after its first letter (RFC 3986: letters, digits, `+`, `.`, `-`). */
const SCHEME_CHAR = /[a-z0-9+.-]/i;

/** A letter, the first character of a URL scheme. */
const LETTER = /[a-z]/i;

/** One of fencelock's store schemes written without `//` (`redis:user:pw@host`), at a word start. */
const BARE_STORE_SCHEME =
  /\b(?:redis\+sentinel|redis\+cluster|rediss|redis|redlock|etcd|zk|postgresql|postgres):/gi;

/**
 * `text` with every store URL in it redacted (see `redactStoreUrl`), e.g. an error message. A URL
 * runs from its scheme (`scheme://`, or one of fencelock's schemes without `//` followed by user
 * info: `redis:user:pw@host`) to the next space, quote or angle bracket.
 *
 * Linear in the length of `text`: it is cut into words once, and each word is scanned a bounded
 * number of times (text from a caller, such as a 1 MB lock key, reaches this through
 * `InvalidArgumentError`; a backtracking pattern took seconds on 20,000 letters).
 */
export function redactStoreUrlsIn(text: string): string {
  return text.replace(WORD, redactUrlInWord);
}

/** `word` (no space, quote or angle bracket) with the URL that starts first in it redacted. */
function redactUrlInWord(word: string): string {
  const start = Math.min(schemeUrlStart(word), bareStoreUrlStart(word));
  if (start === Number.POSITIVE_INFINITY) return word;
  return `${word.slice(0, start)}${redactStoreUrl(word.slice(start))}`;
}

/**
 * Where the first `scheme://` in `word` starts, or Infinity. For each `://`, the scheme is the
 * run of scheme characters before it, from its first letter; the runs before two `://` never
 * overlap (a `:` ends a run), so every character is looked at a bounded number of times.
 */
function schemeUrlStart(word: string): number {
  for (
    let slashes = word.indexOf('://');
    slashes !== -1;
    slashes = word.indexOf('://', slashes + 1)
  ) {
    let runStart = slashes;
    while (runStart > 0 && SCHEME_CHAR.test(word.charAt(runStart - 1))) runStart -= 1;
    for (let letter = runStart; letter < slashes; letter += 1) {
      if (LETTER.test(word.charAt(letter))) return letter;
    }
  }
  return Number.POSITIVE_INFINITY;
}

/**
 * Where the first store scheme without `//` that is followed by user info (an `@` before any
 * `/`) starts in `word`, or Infinity. The search for that `@` or `/` only moves forward.
 */
function bareStoreUrlStart(word: string): number {
  let stop = -1; // the first `/` or `@` at or after the last scheme's end, once looked for
  for (const match of word.matchAll(BARE_STORE_SCHEME)) {
    const schemeEnd = match.index + match[0].length;
    if (stop < schemeEnd) {
      stop = schemeEnd;
      while (stop < word.length && word[stop] !== '/' && word[stop] !== '@') stop += 1;
    }
    if (word[stop] === '@') return match.index;
  }
  return Number.POSITIVE_INFINITY;
}
