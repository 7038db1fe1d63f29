/**
 * The statements of `list` in the PostgreSQL lease mode: a page walks at most `pageSize` rows of
 * a table's primary-key index, in the key column's own order (the database's collation), from
 * where the previous page stopped, and keeps the live ones whose key starts with the prefix. A
 * collation other than `C` need not keep the keys of one prefix together, so the walk does not
 * stop at the prefix's end: it starts at the prefix (no key sorts before its own prefix in a
 * deterministic collation) and goes on to the last key, a bounded step per page, as Redis's
 * SCAN does; a page can then hold fewer entries than `pageSize`, or none. No new index is needed,
 * so a schema of an earlier version lists as it is, whoever owns its tables.
 *
 * One statement per part and page, so each key's holders and waiters are one snapshot. Every
 * row carries the walk's count and last key; a page row's holder columns are null for a key
 * whose only row is a read placeholder with no live reader.
 */

/** What a page statement answers, one row per holder (or one row when the page is empty). */
export interface ListRow {
  /** Rows the walk read, and the last key it read (null when it read none). */
  readonly walked: string;
  readonly last_key: string | null;
  readonly key: string | null;
  readonly mode: 'write' | 'read' | 'permits' | null;
  readonly permits: number | null;
  readonly owner: string | null;
  readonly token: string | null;
  readonly remaining_ms: string | null;
  readonly waiters: number | null;
}

/**
 * The page statements of one schema (`s` quoted). `$1`: the key to start from, `$2`: the most
 * rows to walk, `$3`: the prefix. `first` starts at `$1` (the prefix) included, the others after
 * `$1` (the previous page's last key).
 */
export function listSqlFor(s: string) {
  const leases = `${s}.fencelock_leases`;
  const readers = `${s}.fencelock_readers`;
  const waiters = `${s}.fencelock_waiters`;
  const permits = `${s}.fencelock_permits`;
  const permitWaiters = `${s}.fencelock_permit_waiters`;
  const LIVE = (alias: string) => `${alias}.expires_at > clock_timestamp()`;
  const LEFT_MS = (expiry: string) =>
    `ceil(extract(epoch FROM ${expiry} - clock_timestamp()) * 1000)::text`;
  const FROM = (first: boolean) => (first ? 'key >= $1' : 'key > $1');

  const locks = (first: boolean) => `WITH walked AS (
  SELECT key, owner, token, expires_at FROM ${leases}
  WHERE ${FROM(first)} ORDER BY key LIMIT $2
), summary AS (
  SELECT count(*)::text AS walked, (SELECT key FROM walked ORDER BY key DESC LIMIT 1) AS last_key
  FROM walked
), page AS (
  SELECT * FROM walked l WHERE starts_with(l.key, $3) AND ${LIVE('l')}
)
SELECT m.walked, m.last_key, p.key,
  CASE WHEN p.owner = '' THEN 'read' ELSE 'write' END AS mode, NULL::integer AS permits,
  h.owner, h.token::text AS token, ${LEFT_MS('h.expires_at')} AS remaining_ms,
  (SELECT count(*) FROM ${waiters} w WHERE w.key = p.key AND ${LIVE('w')})::integer AS waiters
FROM summary m
LEFT JOIN page p ON true
LEFT JOIN LATERAL (
  SELECT p.owner, p.token, p.expires_at WHERE p.owner <> ''
  UNION ALL
  SELECT r.owner, r.token, r.expires_at FROM ${readers} r
  WHERE p.owner = '' AND r.key = p.key AND ${LIVE('r')}
) h ON true
ORDER BY p.key, h.token`;

  const semaphores = (first: boolean) => `WITH walked AS (
  SELECT DISTINCT key FROM ${permits} WHERE ${FROM(first)} ORDER BY key LIMIT $2
), summary AS (
  SELECT count(*)::text AS walked, (SELECT key FROM walked ORDER BY key DESC LIMIT 1) AS last_key
  FROM walked
)
SELECT m.walked, m.last_key, h.key, 'permits' AS mode, h.permits, h.owner, h.token::text AS token,
  ${LEFT_MS('h.expires_at')} AS remaining_ms,
  (SELECT count(*) FROM ${permitWaiters} w WHERE w.key = h.key AND ${LIVE('w')})::integer AS waiters
FROM summary m
LEFT JOIN (
  SELECT x.* FROM walked k JOIN ${permits} x ON x.key = k.key
  WHERE starts_with(x.key, $3) AND ${LIVE('x')}
) h ON true
ORDER BY h.key, h.token`;

  return {
    /** Held locks (writers, and each read-held key's readers), first page or after a key. */
    locks: { first: locks(true), next: locks(false) },
    /** Semaphores with a live permit, each with its permits. */
    semaphores: { first: semaphores(true), next: semaphores(false) },
  };
}
