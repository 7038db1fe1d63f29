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
 * A store URL inside a longer text: a scheme, `://`, and everything up to a space or quote; or a
 * scheme without `//` directly followed by user info (`redis:user:pw@host`).
 */
const URL_IN_TEXT =
  /[a-z][a-z0-9+.-]*:\/\/[^\s"'`<>]*|\b(?:redis|rediss|redis\+sentinel|redis\+cluster|redlock|etcd|zk|postgres|postgresql):[^\s"'`<>/@]*@[^\s"'`<>]*/gi;

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
    // `[` first: an IPv6 host (user info would come before it), or a shape such as
    // `redis://[user:pass@]host` in an error's wording.
    const at = rest.startsWith('[') ? -1 : rest.lastIndexOf('@');
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

/** `text` with every store URL in it redacted (see `redactStoreUrl`), e.g. an error message. */
export function redactStoreUrlsIn(text: string): string {
  return text.replace(URL_IN_TEXT, (url) => redactStoreUrl(url));
}
