/**
 * The SQL of the PostgreSQL backend, one statement per operation, built once per schema.
 *
 * Every statement runs on its own (autocommit, or in a transaction of its own that first sets
 * `statement_timeout` with `pooler: 'transaction'`): no state lives in a database session, so the
 * lease mode works through any pool, and behind a transaction-mode pooler such as PgBouncer when
 * told so (`pooler: 'transaction'`, which keeps refused startup parameters off the connection;
 * LISTEN then needs `listenUrl`, a direct connection). Advisory mode needs a real session.
 * Parameters are positional; int8 values travel as decimal strings, so tokens beyond 2^53 stay
 * exact.
 */
import { createHash } from 'node:crypto';
import { attemptAllSqlFor, type WriteAttemptInputs } from './attempt-all-sql.js';
import { electionSqlFor } from './election-sql.js';
import { listSqlFor } from './list-sql.js';
import { lockDelaySqlFor } from './lock-delay-sql.js';
import { permitSqlFor } from './permit-sql.js';
import { readSqlFor } from './read-sql.js';

/**
 * The 64-bit lock id of a key: the first 8 bytes of SHA-256 over the key's UTF-8 bytes, read as
 * a big-endian signed integer. The same id in SQL:
 * `('x' || left(encode(sha256(convert_to(key, 'UTF8')), 'hex'), 16))::bit(64)::bigint`.
 *
 * Advisory-lock mode locks it with `pg_try_advisory_lock(id)`; a 64-bit hash makes two keys
 * sharing an id (which would only make them exclude each other) vanishingly rare, unlike the
 * 32-bit `hashtext`.
 */
export function lockIdOf(key: string): bigint {
  return createHash('sha256').update(key, 'utf8').digest().readBigInt64BE(0);
}

/**
 * The two int4 halves of a key's lock id, for `pg_advisory_xact_lock(int4, int4)`: the
 * two-argument lock space, separate from the bigint one that advisory-lock mode and most
 * applications use, so the lease mode's short per-statement lock never waits on those.
 */
export function xactLockPairOf(key: string): [number, number] {
  const id = lockIdOf(key);
  return [Number(BigInt.asIntN(32, id >> 32n)), Number(BigInt.asIntN(32, id))];
}

/**
 * The two int4 halves of a semaphore's transaction-level lock, in the same two-argument space as
 * `xactLockPairOf` but from another hash (SHA-256 over a zero byte, which no key holds, then the
 * key's UTF-8 bytes): a semaphore's grants never wait on the lock of the same key, nor the other
 * way round.
 */
export function permitLockPairOf(key: string): [number, number] {
  const id = createHash('sha256').update('\u0000').update(key, 'utf8').digest().readBigInt64BE(0);
  return [Number(BigInt.asIntN(32, id >> 32n)), Number(BigInt.asIntN(32, id))];
}

/**
 * The two int4 halves of an election's transaction-level lock, in the same two-argument space
 * but from a third hash (SHA-256 over two zero bytes, then the key's UTF-8 bytes; no key holds a
 * zero byte, so no lock's or semaphore's input is the same): an election's grants never wait on
 * the lock or the semaphore of the same key.
 */
export function electionLockPairOf(key: string): [number, number] {
  const id = createHash('sha256')
    .update('\u0000\u0000')
    .update(key, 'utf8')
    .digest()
    .readBigInt64BE(0);
  return [Number(BigInt.asIntN(32, id >> 32n)), Number(BigInt.asIntN(32, id))];
}

/** `(classid, objid)` of a bigint advisory lock as `pg_locks` shows it (unsigned 32-bit halves). */
export function pgLocksIdOf(key: string): [string, string] {
  const id = BigInt.asUintN(64, lockIdOf(key));
  return [String(id >> 32n), String(id & 0xffff_ffffn)];
}

/** The `lockIdOf` of a text column, in SQL. */
const LOCK_ID = (column: string) =>
  `('x' || left(encode(sha256(convert_to(${column}, 'UTF8')), 'hex'), 16))::bit(64)::bigint`;

/** Remaining time of an expiry as whole ms, rounded up (text: numeric is not a JS number). */
const REMAINING_MS = (column: string) =>
  `ceil(extract(epoch FROM ${column} - clock_timestamp()) * 1000)::text`;

/**
 * An advisory-mode page statement (see `advisoryList` in `sqlFor`), starting at `from`, in the
 * row shape of list-sql.ts's statements (`ListRow`).
 */
function advisoryList(holders: string, from: string): string {
  return `WITH walked AS (
  SELECT key, owner, token, pid, expires_at, delayed_until FROM ${holders} WHERE ${from} ORDER BY key LIMIT $2
), summary AS (
  SELECT count(*)::text AS walked, (SELECT key FROM walked ORDER BY key DESC LIMIT 1) AS last_key
  FROM walked
), page AS (
  SELECT * FROM walked h
  WHERE starts_with(h.key, $3) AND h.delayed_until IS NULL AND EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = h.pid
      AND (l.classid::int8 << 32) | l.objid::int8 = ${LOCK_ID('h.key')}
  )
)
SELECT m.walked, m.last_key, p.key, 'write' AS mode, NULL::integer AS permits, p.owner,
  p.token::text AS token, greatest(0, ${REMAINING_MS('p.expires_at')}::int8)::text AS remaining_ms,
  0 AS waiters
FROM summary m
LEFT JOIN page p ON true
ORDER BY p.key`;
}

/**
 * The payload of a release notification of `key` (a SQL expression): the owner of the head of
 * the key's line (its live entry with the lowest `seq`, other than `leaving`) and the key, as
 * `<owner length>:<owner><key>`, or `0:<key>` when nobody waits. `parseNotice` reads it.
 *
 * With `lockHead`, the head's entry is read `FOR UPDATE`: an entry that a concurrent withdrawal
 * deleted is then skipped once that withdrawal commits (under READ COMMITTED a locking read
 * rechecks a row changed since the statement's snapshot, and LIMIT takes the next one), so the
 * release does not address a waiter that already left while the next one is never told.
 */
const NOTICE = (waiters: string, key: string, leaving?: string, lockHead = false) => {
  const head = `(SELECT w.owner FROM ${waiters} w WHERE w.key = ${key}${
    leaving === undefined ? '' : ` AND w.owner <> ${leaving}`
  } AND w.expires_at > clock_timestamp() ORDER BY w.seq LIMIT 1${lockHead ? ' FOR UPDATE' : ''})`;
  return `coalesce(length(${head})::text || ':' || ${head}, '0:') || ${key}`;
};

/**
 * True when `owner`'s entry is the head of `key`'s line (no live entry of another owner comes
 * before it), as the statement's snapshot sees it (a SQL condition).
 */
const HEADS_LINE = (waiters: string, key: string, owner: string) =>
  `EXISTS (SELECT 1 FROM ${waiters} me WHERE me.key = ${key} AND me.owner = ${owner}
     AND NOT EXISTS (SELECT 1 FROM ${waiters} w WHERE w.key = ${key} AND w.owner <> ${owner}
       AND w.expires_at > clock_timestamp() AND w.seq < me.seq))`;

/**
 * `fencelock:<schema>`, or for a schema too long for PostgreSQL's 63-byte channel names, its
 * first 36 characters and 16 hex digits of its SHA-256.
 */
function channelOf(schema: string): string {
  const plain = `fencelock:${schema}`;
  if (plain.length <= 63) return plain;
  const digest = createHash('sha256').update(schema).digest('hex').slice(0, 16);
  return `fencelock:${schema.slice(0, 36)}:${digest}`;
}

/** The statements of one schema. `schema` is a checked lower-case identifier. */
export function sqlFor(schema: string) {
  const s = `"${schema}"`;
  const leases = `${s}.fencelock_leases`;
  const holders = `${s}.fencelock_advisory_holders`;
  const sequence = `${s}.fencelock_token_seq`;
  const waiters = `${s}.fencelock_waiters`;
  const waiterSequence = `${s}.fencelock_waiter_seq`;
  const nextToken = `nextval('${s}.fencelock_token_seq')`;
  const lockDelay = lockDelaySqlFor(s);
  const { DELAY_END } = lockDelay;
  /** An advisory holder row has no lock-delay, or its delay is over (lock-delay-sql.ts). */
  const ADVISORY_DELAY_OVER = (alias: string) =>
    `(${alias}.lock_delay_ms IS NULL OR coalesce(${alias}.delayed_until, ${DELAY_END(alias)}) <= clock_timestamp())`;
  /**
   * The write attempt (`attempt` below says what it does), its inputs given as SQL expressions:
   * the statement's parameters, or the variables of `fencelock_attempt_all` (attempt-all-sql.ts),
   * which runs the same statement for each of its keys. `into` is PL/pgSQL's `INTO <variables>`
   * there, receiving the one row; empty for the statement.
   */
  const writeAttempt = (p: WriteAttemptInputs, into = '') => `WITH serial AS (
  SELECT pg_advisory_xact_lock(${p.lockHi}::int4, ${p.lockLo}::int4)
  WHERE NOT EXISTS (
    SELECT 1 FROM ${leases} WHERE key = ${p.key} AND ${DELAY_END()} > clock_timestamp()
      AND (owner <> ${p.owner} OR expires_at <= clock_timestamp())
  )
),
first AS (
  SELECT w.owner FROM ${waiters} w, serial
  WHERE w.key = ${p.key} AND w.expires_at > clock_timestamp() ORDER BY w.seq LIMIT 1
),
granted AS (
  INSERT INTO ${leases} AS l (key, owner, token, expires_at, lock_delay_ms)
  SELECT ${p.key}, ${p.owner}, ${nextToken}, clock_timestamp() + ${p.ttlMs}::int8 * interval '1 millisecond',
         ${p.lockDelayMs}::int4 FROM serial
  WHERE coalesce((SELECT owner FROM first), ${p.owner}) = ${p.owner}
     OR EXISTS (SELECT 1 FROM ${leases} WHERE key = ${p.key} AND owner = ${p.owner} AND expires_at > clock_timestamp())
  ON CONFLICT (key) DO UPDATE SET
    owner = excluded.owner,
    token = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
                 THEN l.token ELSE excluded.token END,
    lock_delay_ms = CASE WHEN l.owner = excluded.owner AND l.expires_at > clock_timestamp()
                         THEN l.lock_delay_ms ELSE excluded.lock_delay_ms END,
    expires_at = excluded.expires_at
  WHERE (l.owner = excluded.owner AND l.expires_at > clock_timestamp())
     OR ${DELAY_END('l')} <= clock_timestamp()
  RETURNING token
),
left_line AS (
  DELETE FROM ${waiters} WHERE key = ${p.key} AND owner = ${p.owner} AND EXISTS (SELECT 1 FROM granted)
),
in_line AS (
  INSERT INTO ${waiters} (key, owner, seq, expires_at)
  SELECT ${p.key}, ${p.owner}, nextval('${waiterSequence}'), clock_timestamp() + ${p.entryTtlMs}::int8 * interval '1 millisecond'
  WHERE ${p.queued}::boolean AND NOT EXISTS (SELECT 1 FROM granted)
  ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at
)
SELECT token::text AS token, NULL::text AS remaining_ms${into} FROM granted
UNION ALL
SELECT NULL, ${REMAINING_MS(`CASE WHEN h.expires_at > clock_timestamp() THEN h.expires_at ELSE ${DELAY_END('h')} END`)}
FROM ${leases} h WHERE h.key = ${p.key} AND NOT EXISTS (SELECT 1 FROM granted)`;
  const permits = permitSqlFor(s);
  const reads = readSqlFor(s);
  const list = listSqlFor(s);
  const attemptAll = attemptAllSqlFor(s, writeAttempt);
  const elections = electionSqlFor(s);
  /**
   * The sequences, tables, indexes and functions of a schema, each created if missing (the
   * functions replaced), in the order versions added them: a schema of an earlier version gets
   * what it lacks.
   */
  const objects = `CREATE SEQUENCE IF NOT EXISTS ${sequence} AS bigint CACHE 1;
CREATE TABLE IF NOT EXISTS ${leases} (
  key        text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE TABLE IF NOT EXISTS ${holders} (
  key        text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  pid        integer NOT NULL,
  expires_at timestamptz NOT NULL  -- the backend's own TTL; the server holds the lock regardless
);
CREATE SEQUENCE IF NOT EXISTS ${waiterSequence} AS bigint;
CREATE TABLE IF NOT EXISTS ${waiters} (
  key        text NOT NULL,
  owner      text NOT NULL,
  seq        bigint NOT NULL,       -- place in the key's line, head first
  expires_at timestamptz NOT NULL,  -- the entry's end unless its owner attempts again
  reader     boolean NOT NULL DEFAULT false,  -- a read lock's entry (read-sql.ts)
  PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS fencelock_waiters_line ON ${waiters} (key, seq);
${permits.objects}
${reads.objects}
${attemptAll.objects}
${elections.objects}
${lockDelay.objects}`;
  return {
    /** The NOTIFY channel of releases in this schema; the payload is the key. */
    channel: channelOf(schema),

    /**
     * $1: the newest object's signature. True when the schema's objects exist (asked of the
     * object the latest version added, `newestObject`, created last and in one transaction with
     * everything else, so that a schema of an earlier version gets what it lacks).
     */
    ready: `SELECT to_regprocedure($1) IS NOT NULL AS ready`,
    newestObject: lockDelay.signature,
    /** The leader elections' statements (election-sql.ts). */
    elections,
    /** The multi-key attempt (attempt-all-sql.ts). */
    attemptAll: attemptAll.attempt,
    /** The semaphores' statements (permit-sql.ts). */
    permits,
    /** The read locks' statements (read-sql.ts). */
    reads,
    /** `list`'s page statements (list-sql.ts). */
    list,
    /** True when the schema exists: the set-up then creates only what is missing inside it. */
    schemaExists: `SELECT to_regnamespace($1) IS NOT NULL AS exists`,
    schemaName: s,
    leasesTable: `${s}.fencelock_leases`,
    waitersTable: waiters,

    /**
     * Create what is missing, serialised by a transaction-level advisory lock so that two
     * processes starting at once do not race on the catalog. One round trip, no parameters: the
     * statements of one simple query run as one implicit transaction, rolled back whole on error
     * (no explicit BEGIN, which would leave a pooled connection in an aborted transaction).
     * The token sequence is shared by every key of the schema: a key's tokens strictly increase
     * but are not consecutive. `CACHE 1` (the default) keeps the order of `nextval` calls.
     */
    setup: `SELECT pg_advisory_xact_lock(1717920355, 0);
CREATE SCHEMA IF NOT EXISTS ${s};
${objects}`,
    /**
     * The set-up of a schema that exists (one of an earlier version, or made ahead by an
     * administrator): `CREATE SCHEMA IF NOT EXISTS` would need CREATE on the database even then;
     * the objects need CREATE on the schema only.
     */
    setupInSchema: `SELECT pg_advisory_xact_lock(1717920355, 0);
${objects}`,

    /**
     * Lease mode, grant or report. $1 key, $2 owner, $3 ttlMs, $4/$5 the key's xact-lock pair,
     * $6 whether a contender that is not granted stands in the key's line, $7 the entry's
     * lifetime in ms, $8 the grant's lock-delay in ms or null (lock-delay-sql.ts: an expired
     * row is taken over only once its delay is over, by anyone; the holder's own refresh keeps
     * the delay it was granted with; the time reported is then the delay left).
     *
     * The transaction-level lock on the key is taken before `nextval`, so grants of one key draw
     * their tokens in the order they commit: without it, a statement could draw a token, stall,
     * and insert it after a newer grant of the same key was made and released.
     *
     * A free key or an expired lease goes to the head of the key's line (the live entry with the
     * lowest `seq`), or to anyone when the line is empty; it is taken in the same statement (no
     * sweeper), and the grant takes its owner out of the line. A live lease of the same owner is
     * refreshed and keeps its token (a retried attempt). Otherwise the contender joins the tail
     * of the line or refreshes its entry (when $6), and one row with the holder's remaining time
     * comes back (none when the key is free but someone else is first, or the row changed since
     * the statement's snapshot; the caller then knows nothing about the holder). The line only
     * orders the grants: mutual exclusion rests on the lease row's ON CONFLICT alone, so a
     * snapshot taken before the key's lock was granted can at worst let one contender go out of
     * turn, never two at once.
     *
     * A contender that finds another owner's live lease takes no lock (`serial` is then empty, so
     * nothing is inserted): it only refreshes its line entry and reads the holder's time. Under
     * contention most attempts are such rechecks of waiters, and the head's grant no longer waits
     * behind them for the key's lock. A lease released meanwhile is no loss: its release
     * notifies the head after it commits.
     */
    attempt: writeAttempt({
      key: '$1',
      owner: '$2',
      ttlMs: '$3',
      lockHi: '$4',
      lockLo: '$5',
      queued: '$6',
      entryTtlMs: '$7',
      lockDelayMs: '$8',
    }),

    /**
     * Lease mode, renew while owner and token hold an unexpired lease. $1 key, $2 owner, $3 token,
     * $4 ttlMs. `live` tells `not-owner` (someone holds it) from `not-held`; `reader`, looked
     * up only when nothing was renewed, says the owner and token are a read grant's (read-sql.ts).
     */
    renew: `WITH renewed AS (
  UPDATE ${leases} SET expires_at = clock_timestamp() + $4::int8 * interval '1 millisecond'
  WHERE key = $1 AND owner = $2 AND token = $3::int8 AND expires_at > clock_timestamp()
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM renewed) AS ok,
       EXISTS (SELECT 1 FROM ${leases} WHERE key = $1 AND expires_at > clock_timestamp()) AS live,
       CASE WHEN EXISTS (SELECT 1 FROM renewed) THEN false
            ELSE EXISTS (SELECT 1 FROM ${reads.readersTable} WHERE key = $1 AND owner = $2 AND token = $3::int8)
       END AS reader`,

    /**
     * Lease mode, renew many leases and semaphore permits in one statement (renewals that fall
     * due together). $1 keys, $2 owners, $3 tokens, $4 ttlMs values, $5 whether each is a
     * permit (arrays of one length); one row per input, in input order.
     */
    renewMany: `WITH input AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::int8[], $5::boolean[])
    WITH ORDINALITY AS r(key, owner, token, ttl_ms, permit, n)
),
renewed AS (
  UPDATE ${leases} l SET expires_at = clock_timestamp() + i.ttl_ms * interval '1 millisecond'
  FROM input i
  WHERE NOT i.permit AND l.key = i.key AND l.owner = i.owner AND l.token = i.token
    AND l.expires_at > clock_timestamp()
  RETURNING l.key, l.owner, l.token
),
renewed_permits AS (
  UPDATE ${permits.permitsTable} p SET expires_at = clock_timestamp() + i.ttl_ms * interval '1 millisecond'
  FROM input i
  WHERE i.permit AND p.key = i.key AND p.owner = i.owner AND p.token = i.token
    AND p.expires_at > clock_timestamp()
  RETURNING p.key, p.owner, p.token
)
SELECT CASE WHEN i.permit
         THEN EXISTS (SELECT 1 FROM renewed_permits r
                      WHERE r.key = i.key AND r.owner = i.owner AND r.token = i.token)
         ELSE EXISTS (SELECT 1 FROM renewed r
                      WHERE r.key = i.key AND r.owner = i.owner AND r.token = i.token)
       END AS ok,
       CASE WHEN i.permit
         THEN EXISTS (SELECT 1 FROM ${permits.permitsTable} h
                      WHERE h.key = i.key AND h.expires_at > clock_timestamp())
         ELSE EXISTS (SELECT 1 FROM ${leases} h
                      WHERE h.key = i.key AND h.expires_at > clock_timestamp())
       END AS live,
       CASE WHEN i.permit OR EXISTS (SELECT 1 FROM renewed r
                                     WHERE r.key = i.key AND r.owner = i.owner AND r.token = i.token)
         THEN false
         ELSE EXISTS (SELECT 1 FROM ${reads.readersTable} g
                      WHERE g.key = i.key AND g.owner = i.owner AND g.token = i.token)
       END AS reader
FROM input i ORDER BY i.n`,

    /**
     * Lease mode, compare-and-delete. $1 key, $2 owner, $3 token, $4 channel. Deletes this lease,
     * or an expired row of this owner (cleanup, answered `not-held`); a live lease of another
     * owner or token stays. Waiters are notified of any deletion, addressed to the head of the
     * key's line (`notice`). While read grants of the caller's downgrade live (read-sql.ts), the
     * released row becomes the readers' placeholder (owner `''`) instead of going: one index
     * probe of `fencelock_readers`, the write path's only extra cost (a write lock's release, then,
     * when read grants live, one function call). A reader's release finds the placeholder (or
     * its downgrade's writer) and is answered `not-owner`; backend.ts then asks read-sql.ts's.
     */
    release: `WITH target AS (
  SELECT owner, token, expires_at > clock_timestamp() AS live,
         ${DELAY_END()} <= clock_timestamp() AS spent
  FROM ${leases} WHERE key = $1 FOR UPDATE
),
readers AS (
  SELECT EXISTS (SELECT 1 FROM ${reads.readersTable}
                 WHERE key = $1 AND expires_at > clock_timestamp()) AS live
),
gone AS (
  DELETE FROM ${leases} l USING target t, readers r
  WHERE l.key = $1 AND t.owner = $2 AND (t.spent OR (t.live AND t.token = $3::int8)) AND NOT r.live
  RETURNING t.live
),
handed AS (
  SELECT ${s}.fencelock_write_to_readers($1, $2, $3::int8, $4) AS live FROM target t, readers r
  WHERE r.live AND t.owner = $2 AND t.live AND t.token = $3::int8
),
notified AS (SELECT pg_notify($4, ${NOTICE(waiters, '$1', undefined, true)}) FROM gone)
SELECT CASE
  WHEN EXISTS (SELECT 1 FROM gone WHERE live) OR EXISTS (SELECT 1 FROM handed WHERE live) THEN 'released'
  WHEN EXISTS (SELECT 1 FROM target WHERE live) THEN 'not-owner'
  ELSE 'not-held' END AS outcome,
  (SELECT count(*) FROM notified) AS notified`,

    /**
     * Lease mode, withdraw: delete the row if this owner has it, and its entry in the key's line.
     * $1 key, $2 owner, $3 channel. The new head of the line is told when the row went, when the
     * entry went while the key is free, or when the entry was the head. The last covers a release
     * running at the same moment: its notification, addressed from a snapshot that still had
     * this owner at the head, would wake nobody, and the key, free once it commits, would wait
     * for the next head's recheck. Told, the next head attempts again (and waits on if the key
     * is still held; the release, locking the head's entry, then addresses it).
     */
    abandon: `WITH gone AS (
  DELETE FROM ${leases} WHERE key = $1 AND owner = $2
    AND (expires_at > clock_timestamp() OR ${DELAY_END()} <= clock_timestamp())
  RETURNING key
),
left_line AS (DELETE FROM ${waiters} WHERE key = $1 AND owner = $2 RETURNING key)
SELECT ${s}.fencelock_rw_wake($1, $3, $2, false)
WHERE EXISTS (SELECT 1 FROM gone)
   OR (EXISTS (SELECT 1 FROM left_line)
       AND (${HEADS_LINE(waiters, '$1', '$2')}
            OR NOT EXISTS (SELECT 1 FROM ${leases} WHERE key = $1 AND expires_at > clock_timestamp())))`,

    /**
     * Lease mode, leave the line only (a grant this owner holds stays). $1 key, $2 owner,
     * $3 channel. When the key is free or the entry was the head, the new head is told (as by
     * `abandon`).
     */
    leaveQueue: `WITH left_line AS (
  DELETE FROM ${waiters} WHERE key = $1 AND owner = $2 RETURNING key
)
SELECT ${s}.fencelock_rw_wake($1, $3, $2, false) FROM left_line
WHERE ${HEADS_LINE(waiters, '$1', '$2')}
   OR NOT EXISTS (SELECT 1 FROM ${leases} WHERE key = $1 AND expires_at > clock_timestamp())`,

    /** Lease mode, the unexpired holder of $1. */
    inspect: `SELECT owner, token::text AS token, ${REMAINING_MS('expires_at')} AS remaining_ms
FROM ${leases} WHERE key = $1 AND expires_at > clock_timestamp()`,

    /**
     * Lease mode: delete up to $1 expired rows (holders that never released; an expired row is
     * worth nothing: the next grant of its key replaces it and takes a new token from the
     * sequence). Rows a grant or release has locked are skipped; the delete checks the expiry
     * again, under the row lock. No index on `expires_at`: renewals move it, and an index on it
     * would turn every renewal's heap-only update into an index write; the table holds only live
     * and newly expired leases, so the scan is short.
     */
    sweep: `WITH expired AS (
  SELECT key FROM ${leases} WHERE ${DELAY_END()} <= clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${leases} l USING expired e WHERE l.key = e.key AND ${DELAY_END('l')} <= clock_timestamp()`,

    /**
     * Lease mode: delete up to $1 entries of the lines whose owners stopped attempting (waiters
     * that vanished without leaving). Entries the statements of their keys have locked are
     * skipped.
     */
    sweepWaiters: `WITH expired AS (
  SELECT key, owner FROM ${waiters} WHERE expires_at <= clock_timestamp()
  LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${waiters} w USING expired e
WHERE w.key = e.key AND w.owner = e.owner AND w.expires_at <= clock_timestamp()`,

    /**
     * Advisory mode, on the dedicated connection: try the session lock of each key, and if every
     * one is ours and no key is in a lock-delay, record owner, a token drawn after the locks were
     * taken, this backend's pid, the TTL's end and the lock-delay; else let go of the locks got.
     * One call of `fencelock_advisory_attempt` (lock-delay-sql.ts) for one key or several: $1
     * keys, $2 owners, $3 lock ids, $4 ttlMs values, $5 lock-delays or null (arrays of one
     * length). One row per key, in order: `ok` (its lock was free), `token` (text; set for every
     * key or none), `remaining_ms` (a refused key's delay left). A try never waits, so no order of
     * keys can deadlock.
     */
    advisoryAttempt: lockDelay.advisoryAttempt,

    /**
     * Advisory mode, the backend's TTL ran out: keep the row as the delay's record (or delete
     * it), then unlock and notify (lock-delay-sql.ts). $1 key, $2 owner, $3 token, $4 lock id,
     * $5 channel.
     */
    advisoryExpire: lockDelay.advisoryExpire,

    /**
     * Advisory mode, renew on the dedicated connection: does it still hold the session lock
     * ($5/$6: pg_locks halves)? If so, move the recorded TTL end of this owner's row.
     * $1 key, $2 owner, $3 token, $4 ttlMs.
     */
    advisoryRenew: `WITH lock AS (
  SELECT EXISTS (
    SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
      AND classid = $5::oid AND objid = $6::oid AND objsubid = 1
  ) AS held
),
renewed AS (
  UPDATE ${holders} SET expires_at = clock_timestamp() + $4::int8 * interval '1 millisecond'
  FROM lock WHERE lock.held AND key = $1 AND owner = $2 AND token = $3::int8
  RETURNING 1
)
SELECT (SELECT held FROM lock) AS held, (SELECT count(*) FROM renewed) AS renewed`,

    /**
     * Advisory mode, release on the dedicated connection: delete the holder row of this owner and
     * token (its lock-delay with it), unlock, notify. $1 key, $2 owner, $3 token, $4 lock id,
     * $5 channel. The delete runs before the unlock (the subquery is not pulled up): an attempt
     * that gets the lock then waits for the row's delete to commit, and never takes the released
     * row for a holder that vanished without a release (whose delay would apply).
     */
    advisoryRelease: `WITH gone AS (
  DELETE FROM ${holders} WHERE key = $1 AND owner = $2 AND token = $3::int8 RETURNING 1
)
SELECT pg_advisory_unlock($4::int8) AS unlocked, g.deleted, pg_notify($5, '0:' || $1)
FROM (SELECT (SELECT count(*) FROM gone) AS deleted OFFSET 0) g`,

    /**
     * Advisory mode: delete up to $1 holder rows that no session backs any more, left by
     * connections that were terminated or crashed (or an unlock whose row delete did not match):
     * rows whose pid does not hold the key's lock now. `pg_locks` is read once (an anti-join).
     *
     * Safe beside grants and releases: a row is committed only after its pid took the lock, so a
     * row the statement sees unbacked is one whose lock was let go, by a release that deletes it
     * too (this statement then finds it gone) or by the session's end. The delete matches pid
     * and token as well: a row re-granted meanwhile (the upsert sets a new pid and token) is
     * left alone. A row with a lock-delay stays until the delay's end (lock-delay-sql.ts): its
     * `delayed_until`, or its TTL's end + the delay while nobody has timestamped the end (which
     * can only come earlier); the delete checks it again under the row lock.
     */
    advisorySweep: `WITH stale AS (
  SELECT h.key, h.pid, h.token FROM ${holders} h
  WHERE NOT EXISTS (
    SELECT 1 FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.pid = h.pid
      AND (l.classid::int8 << 32) | l.objid::int8 = ${LOCK_ID('h.key')}
  ) AND ${ADVISORY_DELAY_OVER('h')}
  LIMIT $1
)
DELETE FROM ${holders} d USING stale s
WHERE d.key = s.key AND d.pid = s.pid AND d.token = s.token AND ${ADVISORY_DELAY_OVER('d')}`,

    /**
     * Advisory mode, one page of `list` (listing.ts): the walk of list-sql.ts over the holders
     * table's key index (at most $2 rows from $1, the prefix or after the previous page's last
     * key), keeping the rows under the prefix $3 whose session holds the key's lock now (one read
     * of `pg_locks` per row, as `advisoryInspect`); a row left by a killed backend is not listed.
     * `ttlMs` is the backend's own TTL left (the server holds the lock regardless), at least 0.
     */
    advisoryList: {
      first: advisoryList(holders, 'key >= $1'),
      next: advisoryList(holders, 'key > $1'),
    },

    /**
     * Advisory mode, the holder of $1 whose session really holds the lock ($2/$3: pg_locks
     * halves); a row left by a killed backend does not count.
     */
    advisoryInspect: `SELECT h.owner, h.token::text AS token, ${REMAINING_MS('h.expires_at')} AS remaining_ms
FROM ${holders} h
WHERE h.key = $1 AND h.delayed_until IS NULL AND EXISTS (
  SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.pid = h.pid
    AND l.classid = $2::oid AND l.objid = $3::oid AND l.objsubid = 1
)`,
  };
}

/** The statements of one schema. */
export type PostgresSql = ReturnType<typeof sqlFor>;
