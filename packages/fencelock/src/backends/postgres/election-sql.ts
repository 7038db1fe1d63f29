/**
 * The SQL of the PostgreSQL lease mode's leader elections (`locker.election`), built once per
 * schema and included last in sql.ts's set-up: two tables and one PL/pgSQL function.
 *
 * - `fencelock_elections`: one row per election that has a leader (key, owner, term, value,
 *   expiry on the server's clock). The term is the grant's fencing token, drawn from the
 *   schema's token sequence (`fencelock_token_seq`, shared with locks and semaphores) while the
 *   election's transaction-level lock is held. A sequence never goes back, and nothing per
 *   election is kept or reset, so a term is greater than every earlier term of the election
 *   however long it stood idle (and across server restarts: a sequence can skip values after a
 *   crash, never repeat one). The value lives in the leader's row: the grant inserts it, a
 *   proclaim replaces it by compare-and-set of owner and term, and it goes with the row (release,
 *   withdrawal, the sweep of a lapsed leader, or a takeover by the next candidate).
 * - `fencelock_election_waiters`: the election's FIFO line of candidates (key, owner, place
 *   `seq`, the entry's expiry), as `fencelock_waiters` is the locks'. A waiting candidate is no
 *   leader: `leader` reads the row only.
 * - Apart from the locks' and semaphores' tables, so the lock, the semaphore and the election
 *   of one key never meet (and `list`, which walks the other tables, does not see elections).
 *   New tables rather than a column of `fencelock_leases`: the upgrade of an existing schema
 *   needs CREATE on the schema (as every earlier upgrade did), never the lease table's ownership
 *   that an ALTER would.
 *
 * The grant is the lock's write attempt (sql.ts `attempt`) on these tables, with the value: one
 * statement whose mutual exclusion rests on the row's primary key, so no function is needed to
 * see committed grants (unlike permit-sql.ts's counts).
 *
 * Notices on the schema's channel (listener.ts): a release or a withdrawal sends
 * `e<owner length>:<owner><key>` (the head of the election's line, which the notice wakes) or
 * `e0:<key>`; a grant or a proclaim sends `c0:<key>`, which wakes no candidate. Every one of them
 * reaches the election's watchers. The lapse of a leader's TTL sends none.
 */

import { lockDelaySqlFor } from './lock-delay-sql.js';

/** The election objects and statements of one schema; `s` is the quoted schema name. */
export function electionSqlFor(s: string) {
  const elections = `${s}.fencelock_elections`;
  const waiters = `${s}.fencelock_election_waiters`;
  const tokenSequence = `${s}.fencelock_token_seq`;
  const waiterSequence = `${s}.fencelock_waiter_seq`;
  const wake = `${s}.fencelock_election_wake`;
  /** `expires_at` is still ahead of the server's clock. */
  const LIVE = `expires_at > clock_timestamp()`;
  /** Until when the row keeps the election from others (lock-delay-sql.ts). */
  const { DELAY_END } = lockDelaySqlFor(s);
  /** `ms` from the server's clock on, for `expires_at`. */
  const UNTIL = (ms: string) => `clock_timestamp() + ${ms}::int8 * interval '1 millisecond'`;
  /** Whole ms from now to an expiry, rounded up, as text. */
  const LEFT_MS = (expiry: string) =>
    `ceil(extract(epoch FROM ${expiry} - clock_timestamp()) * 1000)::text`;
  /** True when `$2`'s entry heads `$1`'s line, as the statement's snapshot sees it. */
  const HEADS_LINE = `EXISTS (SELECT 1 FROM ${waiters} me WHERE me.key = $1 AND me.owner = $2
     AND NOT EXISTS (SELECT 1 FROM ${waiters} w WHERE w.key = $1 AND w.owner <> $2
       AND w.${LIVE} AND w.seq < me.seq))`;
  /** True when `$1` has a live leader, as the statement's snapshot sees it. */
  const LEADS = `EXISTS (SELECT 1 FROM ${elections} WHERE key = $1 AND ${LIVE})`;

  /**
   * Created after the sequences they use; the marker comment opens them (an upgrade test cuts
   * the set-up there to build the previous version's schema).
   */
  const objects = `-- Leader elections (election-sql.ts).
CREATE TABLE IF NOT EXISTS ${elections} (
  key        text PRIMARY KEY,
  owner      text NOT NULL,
  token      bigint NOT NULL,       -- the leader's term, from fencelock_token_seq
  value      text NOT NULL,         -- what the leader campaigned with or last proclaimed
  expires_at timestamptz NOT NULL
) WITH (fillfactor = 70);
CREATE TABLE IF NOT EXISTS ${waiters} (
  key        text NOT NULL,
  owner      text NOT NULL,
  seq        bigint NOT NULL,       -- place in the election's line, head first
  expires_at timestamptz NOT NULL,  -- the entry's end unless its owner attempts again
  PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS fencelock_election_waiters_line ON ${waiters} (key, seq);

-- Notify p_key's election: 'e<length>:<owner><key>' naming the head of its line (p_leaving left
-- out), or 'e0:<key>' when nobody is lined up. With p_lock_head the head's entry is read FOR
-- UPDATE (a release: an entry a concurrent withdrawal deletes is then skipped once it commits,
-- as sql.ts's NOTICE does). Returns 1 when a head was named, else 0.
CREATE OR REPLACE FUNCTION ${wake}(
  p_key text, p_channel text, p_leaving text, p_lock_head boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_head text;
BEGIN
  IF p_lock_head THEN
    SELECT w.owner INTO v_head FROM ${waiters} w
    WHERE w.key = p_key AND w.owner IS DISTINCT FROM p_leaving AND w.${LIVE}
    ORDER BY w.seq LIMIT 1 FOR UPDATE;
  ELSE
    SELECT w.owner INTO v_head FROM ${waiters} w
    WHERE w.key = p_key AND w.owner IS DISTINCT FROM p_leaving AND w.${LIVE}
    ORDER BY w.seq LIMIT 1;
  END IF;
  PERFORM pg_notify(p_channel, 'e' || coalesce(length(v_head) || ':' || v_head, '0:') || p_key);
  RETURN CASE WHEN v_head IS NULL THEN 0 ELSE 1 END;
END $fn$;`;

  return {
    objects,
    electionsTable: elections,
    electionWaitersTable: waiters,
    /** The function's signature, for `to_regprocedure` (sql.ts `ready`: the newest object). */
    signature: `${wake}(text, text, text, boolean)`,

    /**
     * Grant or report, as sql.ts's lock `attempt` (its comment says why each part is there), on
     * the election's tables. $1 key, $2 owner, $3 ttlMs, $4/$5 the election's xact-lock pair
     * (`electionLockPairOf`), $6 whether a candidate that is not granted stands in the line,
     * $7 the entry's lifetime in ms, $8 the value, $9 channel, $10 the leadership's lock-delay
     * in ms or null (lock-delay-sql.ts: a lapsed leader's row keeps the election from every
     * candidate until its delay ends).
     *
     * A free election, or a lapsed leader's, goes to the head of the line (to anyone when the
     * line is empty) with a new term from the sequence, drawn after the election's lock was
     * taken (terms in the order grants commit) and the candidate's value; the row of a lapsed
     * leader is replaced, its value with it. The live leader's own attempt (a lost reply
     * retried) refreshes the expiry and keeps term and value. A grant notifies the watchers
     * (`c0:<key>`). One row: `token` (granted), or `remaining_ms` of the leader (none when the
     * election is free but another candidate is first).
     */
    attempt: `WITH serial AS (
  SELECT pg_advisory_xact_lock($4::int4, $5::int4)
  WHERE NOT EXISTS (SELECT 1 FROM ${elections} WHERE key = $1 AND ${DELAY_END()} > clock_timestamp()
                    AND (owner <> $2 OR expires_at <= clock_timestamp()))
),
first AS (
  SELECT w.owner FROM ${waiters} w, serial
  WHERE w.key = $1 AND w.${LIVE} ORDER BY w.seq LIMIT 1
),
granted AS (
  INSERT INTO ${elections} AS l (key, owner, token, value, expires_at, lock_delay_ms)
  SELECT $1, $2, nextval('${tokenSequence}'), $8, ${UNTIL('$3')}, $10::int4 FROM serial
  WHERE coalesce((SELECT owner FROM first), $2) = $2
     OR EXISTS (SELECT 1 FROM ${elections} WHERE key = $1 AND owner = $2 AND ${LIVE})
  ON CONFLICT (key) DO UPDATE SET
    owner = excluded.owner,
    token = CASE WHEN l.owner = excluded.owner AND l.${LIVE} THEN l.token ELSE excluded.token END,
    value = CASE WHEN l.owner = excluded.owner AND l.${LIVE} THEN l.value ELSE excluded.value END,
    lock_delay_ms = CASE WHEN l.owner = excluded.owner AND l.${LIVE}
                         THEN l.lock_delay_ms ELSE excluded.lock_delay_ms END,
    expires_at = excluded.expires_at
  WHERE (l.owner = excluded.owner AND l.${LIVE}) OR ${DELAY_END('l')} <= clock_timestamp()
  RETURNING token
),
left_line AS (
  DELETE FROM ${waiters} WHERE key = $1 AND owner = $2 AND EXISTS (SELECT 1 FROM granted)
),
in_line AS (
  INSERT INTO ${waiters} (key, owner, seq, expires_at)
  SELECT $1, $2, nextval('${waiterSequence}'), ${UNTIL('$7')}
  WHERE $6::boolean AND NOT EXISTS (SELECT 1 FROM granted)
  ON CONFLICT (key, owner) DO UPDATE SET expires_at = excluded.expires_at
),
notified AS (SELECT pg_notify($9, 'c0:' || $1) AS sent FROM granted)
SELECT token::text AS token, NULL::text AS remaining_ms, (SELECT count(*) FROM notified) AS notified
FROM granted
UNION ALL
SELECT NULL, ${LEFT_MS(`CASE WHEN h.${LIVE} THEN h.expires_at ELSE ${DELAY_END('h')} END`)}, 0
FROM ${elections} h WHERE h.key = $1 AND NOT EXISTS (SELECT 1 FROM granted)`,

    /**
     * Renew while owner and term hold the live leadership (never re-creates a lapsed one).
     * $1 key, $2 owner, $3 term, $4 ttlMs. `live` tells `not-owner` (someone leads) from
     * `not-held`.
     */
    renew: `WITH renewed AS (
  UPDATE ${elections} SET expires_at = ${UNTIL('$4')}
  WHERE key = $1 AND owner = $2 AND token = $3::int8 AND ${LIVE}
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM renewed) AS ok, ${LEADS} AS live`,

    /**
     * Compare-and-set of the value: store $4 only while owner $2 leads $1 with term $3, then
     * notify the watchers (`c0:<key>`). $5 channel. `ok`, and `live` as for `renew`.
     */
    proclaim: `WITH stored AS (
  UPDATE ${elections} SET value = $4
  WHERE key = $1 AND owner = $2 AND token = $3::int8 AND ${LIVE}
  RETURNING 1
),
notified AS (SELECT pg_notify($5, 'c0:' || $1) AS sent FROM stored)
SELECT EXISTS (SELECT 1 FROM stored) AS ok, ${LEADS} AS live,
       (SELECT count(*) FROM notified) AS notified`,

    /**
     * Compare-and-delete by owner and term; a lapsed row of this owner goes too once its
     * lock-delay is over (cleanup, answered `not-held`; inside the delay it stays). Any deletion
     * notifies the head of the line and the watchers. $1 key, $2 owner, $3 term, $4 channel.
     * One row: `outcome`.
     */
    release: `WITH target AS (
  SELECT owner, token, ${LIVE} AS live, ${DELAY_END()} <= clock_timestamp() AS spent
  FROM ${elections} WHERE key = $1 FOR UPDATE
),
gone AS (
  DELETE FROM ${elections} l USING target t
  WHERE l.key = $1 AND t.owner = $2 AND (t.spent OR (t.live AND t.token = $3::int8))
  RETURNING t.live
)
SELECT CASE
  WHEN EXISTS (SELECT 1 FROM gone WHERE live) THEN 'released'
  WHEN EXISTS (SELECT 1 FROM target WHERE live) THEN 'not-owner'
  ELSE 'not-held' END AS outcome,
  (SELECT ${wake}($1, $4, NULL, true) FROM gone) AS notified`,

    /**
     * Withdraw: delete this owner's leadership whatever the term (a grant whose reply was lost;
     * a lapsed one only once its lock-delay is over) and its entry in the line. $1 key, $2 owner, $3 channel. The head of the line (and the
     * watchers) are told when the leadership went, or when the entry went while nobody leads or
     * it was the head (as sql.ts's `abandon`, whose comment says why).
     */
    abandon: `WITH gone AS (
  DELETE FROM ${elections} WHERE key = $1 AND owner = $2
    AND (${LIVE} OR ${DELAY_END()} <= clock_timestamp())
  RETURNING key
),
left_line AS (DELETE FROM ${waiters} WHERE key = $1 AND owner = $2 RETURNING key)
SELECT ${wake}($1, $3, $2, false)
WHERE EXISTS (SELECT 1 FROM gone)
   OR (EXISTS (SELECT 1 FROM left_line) AND (${HEADS_LINE} OR NOT ${LEADS}))`,

    /**
     * Leave the line only (a leadership this owner holds stays). $1 key, $2 owner, $3 channel.
     * The new head is told when nobody leads or the entry was the head.
     */
    leaveQueue: `WITH left_line AS (
  DELETE FROM ${waiters} WHERE key = $1 AND owner = $2 RETURNING key
)
SELECT ${wake}($1, $3, $2, false) FROM left_line WHERE ${HEADS_LINE} OR NOT ${LEADS}`,

    /**
     * The live leader of $1: owner, term, value, time left and the candidates (the leader and
     * the live entries of the line), one statement (one snapshot). No row when nobody leads
     * (candidates in the line are not leaders).
     */
    leader: `SELECT e.owner, e.token::text AS token, e.value,
  ${LEFT_MS('e.expires_at')} AS remaining_ms,
  1 + (SELECT count(*) FROM ${waiters} w
       WHERE w.key = $1 AND w.owner <> e.owner AND w.${LIVE})::int AS candidates
FROM ${elections} e WHERE e.key = $1 AND e.${LIVE}`,

    /**
     * Delete up to $1 lapsed leaderships whose lock-delay is over (leaders that never released;
     * the next grant of the election replaces them too). Rows a statement has locked are skipped; the delete checks
     * the expiry again under the row lock. Not notified: a lapse may go unnotified (the
     * observers read again when the leader's TTL ends).
     */
    sweep: `WITH lapsed AS (
  SELECT key FROM ${elections} WHERE ${DELAY_END()} <= clock_timestamp() LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${elections} e USING lapsed l WHERE e.key = l.key AND ${DELAY_END('e')} <= clock_timestamp()`,

    /** Delete up to $1 line entries whose candidates stopped attempting. */
    sweepWaiters: `WITH expired AS (
  SELECT key, owner FROM ${waiters} WHERE expires_at <= clock_timestamp()
  LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${waiters} w USING expired e
WHERE w.key = e.key AND w.owner = e.owner AND w.expires_at <= clock_timestamp()`,
  };
}

/** The election statements of one schema. */
export type ElectionSql = ReturnType<typeof electionSqlFor>;
