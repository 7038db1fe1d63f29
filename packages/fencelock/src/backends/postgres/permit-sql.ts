/**
 * The SQL of the PostgreSQL lease mode's semaphores (`locker.semaphore`), built once per schema
 * and included in sql.ts's set-up: two tables and three PL/pgSQL functions.
 *
 * - `fencelock_permits`: one row per held permit (key, owner, fencing token, the semaphore's
 *   permit count as its holder asked, expiry on the server's clock).
 * - `fencelock_permit_waiters`: the semaphore's line (key, owner, place `seq`, permit count,
 *   the entry's expiry), apart from the locks' `fencelock_waiters`: a lock and a semaphore of one
 *   key are different objects.
 * - The permit count in use is the `permits` of the live rows of either table, so an idle
 *   semaphore leaves nothing behind (released rows are deleted, lapsed ones swept).
 *
 * Why functions: a grant must count the key's live permits after it took the key's
 * transaction-level lock. In one statement, under READ COMMITTED, every part reads the snapshot
 * taken when the statement began, before it waited for that lock, and could miss a permit
 * granted meanwhile (N + 1 holders); a lock's single row is protected by its primary key instead,
 * which N rows have no equivalent of. In a PL/pgSQL function each statement takes a new snapshot
 * (PostgreSQL manual, "Function Volatility Categories"), so the statements after
 * `pg_advisory_xact_lock` see every grant, release and withdrawal of the key committed before
 * them. Grants, releases and withdrawals of a key run one at a time under that lock (one round
 * trip each: `SELECT … FROM fn(…)`), so each knows exactly how many permits are free and who
 * stands where in the line. Renewals need no lock (one UPDATE, see sql.ts's `renewMany`).
 *
 * Waking (no herd): the permits a change frees are given to the line's live entries in `seq`
 * order, ranks 0 to free - 1; the waiters at those ranks were told when they came into that range.
 * So a release (free grows by one) notifies the one entry at rank `free - 1` after it, and a
 * waiter leaving from inside that range notifies the entry that moves into it
 * (`fencelock_permit_wake`). The notice payload is `p<owner length>:<owner><key>` (listener.ts).
 *
 * A later version that changes a function's arguments or meaning gives it a new name (and
 * `ready` asks for the newest object), so that two versions sharing a schema keep their own.
 */

/** The semaphore objects and statements of one schema; `s` is the quoted schema name. */
export function permitSqlFor(s: string) {
  const permits = `${s}.fencelock_permits`;
  const waiters = `${s}.fencelock_permit_waiters`;
  const tokenSequence = `${s}.fencelock_token_seq`;
  const waiterSequence = `${s}.fencelock_waiter_seq`;
  /** `expires_at` is still ahead of the server's clock. */
  const LIVE = `expires_at > clock_timestamp()`;
  /** `ms` from the server's clock on, for `expires_at`. */
  const UNTIL = (ms: string) => `clock_timestamp() + ${ms} * interval '1 millisecond'`;
  /** Whole ms from now to an expiry, rounded up. */
  const LEFT_MS = (expiry: string) =>
    `ceil(extract(epoch FROM ${expiry} - clock_timestamp()) * 1000)`;

  /**
   * The tables and functions, each created if missing (or replaced): run by sql.ts's set-up in
   * its transaction, after the objects they use (the token and waiter sequences).
   */
  const objects = `CREATE TABLE IF NOT EXISTS ${permits} (
  key        text NOT NULL,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  permits    integer NOT NULL,      -- the semaphore's permit count, as its holder asked
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (key, owner)
) WITH (fillfactor = 70);
CREATE TABLE IF NOT EXISTS ${waiters} (
  key        text NOT NULL,
  owner      text NOT NULL,
  seq        bigint NOT NULL,       -- place in the semaphore's line, head first
  permits    integer NOT NULL,      -- the permit count the waiter asks with
  expires_at timestamptz NOT NULL,  -- the entry's end unless its owner attempts again
  PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS fencelock_permit_waiters_line ON ${waiters} (key, seq);

-- Notify the live entries of p_key's line at ranks p_from to p_to - 1 (0: the head), one notice
-- each, addressed by owner. Returns how many were notified.
CREATE OR REPLACE FUNCTION ${s}.fencelock_permit_wake(
  p_key text, p_channel text, p_from integer, p_to integer
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_entry record;
  v_woken integer := 0;
BEGIN
  IF p_to <= greatest(p_from, 0) THEN RETURN 0; END IF;
  FOR v_entry IN
    SELECT w.owner FROM ${waiters} w WHERE w.key = p_key AND w.${LIVE}
    ORDER BY w.seq OFFSET greatest(p_from, 0) LIMIT p_to - greatest(p_from, 0)
  LOOP
    PERFORM pg_notify(p_channel, 'p' || length(v_entry.owner) || ':' || v_entry.owner || p_key);
    v_woken := v_woken + 1;
  END LOOP;
  RETURN v_woken;
END $fn$;

-- Grant one of p_permits permits of p_key to p_owner, or report. Exactly one row comes back:
-- granted_token set (granted, or this owner's live permit refreshed: same token); else
-- permits_in_use set (holders or waiters use another count: nothing was written); else
-- remaining_ms, how long nothing may change (the first permit's or the first entry ahead's
-- time left; null when unknown). p_queued: a contender that is not granted stands in the line.
CREATE OR REPLACE FUNCTION ${s}.fencelock_permit_attempt(
  p_key text, p_owner text, p_ttl_ms bigint, p_lock_hi integer, p_lock_lo integer,
  p_permits integer, p_queued boolean, p_entry_ttl_ms bigint,
  OUT granted_token bigint, OUT permits_in_use integer, OUT remaining_ms bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_held integer;
  v_seq bigint;
  v_ahead integer;
BEGIN
  -- A waiter's recheck while others hold every permit: refresh its entry, take no lock (under
  -- contention most attempts are these; a grant does not wait behind them).
  IF (SELECT count(*) FROM ${permits} WHERE key = p_key AND ${LIVE}) >= p_permits
     AND NOT EXISTS (SELECT 1 FROM ${permits} WHERE key = p_key AND owner = p_owner AND ${LIVE})
     AND EXISTS (SELECT 1 FROM ${waiters}
                 WHERE key = p_key AND owner = p_owner AND permits = p_permits AND ${LIVE}) THEN
    IF p_queued THEN
      UPDATE ${waiters} SET expires_at = ${UNTIL('p_entry_ttl_ms')}
      WHERE key = p_key AND owner = p_owner;
    END IF;
    SELECT ${LEFT_MS('min(expires_at)')} INTO remaining_ms
    FROM ${permits} WHERE key = p_key AND ${LIVE};
    RETURN;
  END IF;

  -- One grant, release or withdrawal of the key at a time; every statement below sees those
  -- committed before this lock was granted. Taken before nextval, so the key's tokens are
  -- drawn in the order their grants commit.
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  -- Lapsed permits (holders that stopped renewing) go. The DELETE waits for a renewal under way
  -- and checks the row again, so a permit renewed in time stays and counts.
  DELETE FROM ${permits} WHERE key = p_key AND expires_at <= clock_timestamp();

  SELECT u.permits INTO permits_in_use FROM (
    SELECT permits FROM ${permits} WHERE key = p_key
    UNION ALL
    SELECT permits FROM ${waiters} WHERE key = p_key AND ${LIVE}
  ) u WHERE u.permits <> p_permits LIMIT 1;
  IF permits_in_use IS NOT NULL THEN RETURN; END IF;

  -- This owner's own permit (a retried attempt): refreshed, same token.
  UPDATE ${permits} SET expires_at = ${UNTIL('p_ttl_ms')}
  WHERE key = p_key AND owner = p_owner
  RETURNING token INTO granted_token;
  IF granted_token IS NOT NULL THEN
    DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
    RETURN;
  END IF;

  -- Granted when a permit is free and fewer live entries stand ahead (all of them, for a
  -- contender without one) than permits are free.
  SELECT count(*) INTO v_held FROM ${permits} WHERE key = p_key;
  SELECT seq INTO v_seq FROM ${waiters} WHERE key = p_key AND owner = p_owner AND ${LIVE};
  SELECT count(*) INTO v_ahead FROM (
    SELECT 1 FROM ${waiters} w
    WHERE w.key = p_key AND w.owner <> p_owner AND w.${LIVE} AND (v_seq IS NULL OR w.seq < v_seq)
    LIMIT greatest(p_permits - v_held, 0)
  ) ahead;
  IF v_held < p_permits AND v_ahead < p_permits - v_held THEN
    INSERT INTO ${permits} (key, owner, token, permits, expires_at)
    VALUES (p_key, p_owner, nextval('${tokenSequence}'), p_permits, ${UNTIL('p_ttl_ms')})
    RETURNING token INTO granted_token;
    DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
    RETURN;
  END IF;

  -- Not granted: stand in the line, or keep its place (an entry that had run out goes to the
  -- tail: others have passed it meanwhile).
  IF p_queued THEN
    IF v_seq IS NOT NULL THEN
      UPDATE ${waiters} SET expires_at = ${UNTIL('p_entry_ttl_ms')}
      WHERE key = p_key AND owner = p_owner;
    ELSE
      INSERT INTO ${waiters} AS w (key, owner, seq, permits, expires_at)
      VALUES (p_key, p_owner, nextval('${waiterSequence}'), p_permits, ${UNTIL('p_entry_ttl_ms')})
      ON CONFLICT (key, owner) DO UPDATE
        SET seq = excluded.seq, permits = excluded.permits, expires_at = excluded.expires_at;
    END IF;
  END IF;
  IF v_held >= p_permits THEN
    SELECT ${LEFT_MS('min(expires_at)')} INTO remaining_ms FROM ${permits} WHERE key = p_key;
  ELSE
    SELECT ${LEFT_MS('min(w.expires_at)')} INTO remaining_ms FROM ${waiters} w
    WHERE w.key = p_key AND w.owner <> p_owner AND w.${LIVE} AND (v_seq IS NULL OR w.seq < v_seq);
  END IF;
END $fn$;

-- Compare-and-delete p_owner's permit of p_key by token, then notify the entry the freed permit
-- lets in. Returns 'released'; 'not-owner' (no live permit of this owner and token, but live
-- permits of others: nothing was deleted); 'not-held' (no live permit at all). A lapsed row of
-- this owner is deleted too (cleanup: not released).
CREATE OR REPLACE FUNCTION ${s}.fencelock_permit_release(
  p_key text, p_owner text, p_token bigint, p_lock_hi integer, p_lock_lo integer, p_channel text
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  v_permits integer;
  v_before integer;
  v_after integer;
BEGIN
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  SELECT count(*) INTO v_before FROM ${permits} WHERE key = p_key AND ${LIVE};
  DELETE FROM ${permits} WHERE key = p_key AND owner = p_owner AND token = p_token AND ${LIVE}
  RETURNING permits INTO v_permits;
  IF v_permits IS NULL THEN
    DELETE FROM ${permits} WHERE key = p_key AND owner = p_owner AND expires_at <= clock_timestamp();
    IF EXISTS (SELECT 1 FROM ${permits} WHERE key = p_key AND ${LIVE}) THEN
      RETURN 'not-owner';
    END IF;
    RETURN 'not-held';
  END IF;
  SELECT count(*) INTO v_after FROM ${permits} WHERE key = p_key AND ${LIVE};
  PERFORM ${s}.fencelock_permit_wake(p_key, p_channel, v_permits - v_before, v_permits - v_after);
  RETURN 'released';
END $fn$;

-- Withdraw p_owner from p_key: its line entry, and unless p_keep_grant its permit whatever the
-- token (a grant whose reply was lost). Then notify whom this lets in: the entry at the rank a
-- dropped permit frees, and, when the leaving entry stood among the ranks free permits reach
-- (it may have been told to go), the entry that moves into that range. Returns how many were
-- notified.
CREATE OR REPLACE FUNCTION ${s}.fencelock_permit_withdraw(
  p_key text, p_owner text, p_keep_grant boolean, p_lock_hi integer, p_lock_lo integer,
  p_channel text
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_before integer;
  v_after integer;
  v_rank integer;
  v_line_permits integer;
  v_held_permits integer;
  v_permits integer;
  v_from integer;
BEGIN
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  SELECT count(*) INTO v_before FROM ${permits} WHERE key = p_key AND ${LIVE};
  -- The leaving entry's rank (null without a live entry).
  SELECT (SELECT count(*) FROM ${waiters} w
          WHERE w.key = p_key AND w.owner <> p_owner AND w.${LIVE} AND w.seq < me.seq)
  INTO v_rank FROM ${waiters} me WHERE me.key = p_key AND me.owner = p_owner AND me.${LIVE};
  DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner RETURNING permits INTO v_line_permits;
  IF NOT p_keep_grant THEN
    DELETE FROM ${permits} WHERE key = p_key AND owner = p_owner RETURNING permits INTO v_held_permits;
  END IF;
  v_permits := coalesce(v_held_permits, v_line_permits);
  IF v_permits IS NULL THEN RETURN 0; END IF;
  SELECT count(*) INTO v_after FROM ${permits} WHERE key = p_key AND ${LIVE};
  v_from := v_permits - v_before;
  IF v_rank IS NOT NULL AND v_rank < v_from THEN v_from := v_from - 1; END IF;
  RETURN ${s}.fencelock_permit_wake(p_key, p_channel, v_from, v_permits - v_after);
END $fn$;`;

  return {
    objects,
    permitsTable: permits,
    permitWaitersTable: waiters,

    /**
     * $1 key, $2 owner, $3 ttlMs, $4/$5 the semaphore's xact-lock pair (`permitLockPairOf`),
     * $6 permit count, $7 whether a contender that is not granted stands in the line, $8 the
     * entry's lifetime in ms. One row: `token`, or `in_use`, or `remaining_ms` (see the function).
     */
    attempt: `SELECT granted_token::text AS token, permits_in_use AS in_use,
       remaining_ms::text AS remaining_ms
FROM ${s}.fencelock_permit_attempt($1, $2, $3::int8, $4::int4, $5::int4, $6::int4, $7::boolean, $8::int8)`,

    /**
     * Renew one permit while owner and token hold it unexpired (never re-creates a lapsed one).
     * $1 key, $2 owner, $3 token, $4 ttlMs. `live` tells `not-owner` (someone holds a permit)
     * from `not-held`.
     */
    renew: `WITH renewed AS (
  UPDATE ${permits} SET expires_at = ${UNTIL('$4::int8')}
  WHERE key = $1 AND owner = $2 AND token = $3::int8 AND ${LIVE}
  RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM renewed) AS ok,
       EXISTS (SELECT 1 FROM ${permits} WHERE key = $1 AND ${LIVE}) AS live`,

    /** $1 key, $2 owner, $3 token, $4/$5 xact-lock pair, $6 channel. One row: `outcome`. */
    release: `SELECT ${s}.fencelock_permit_release($1, $2, $3::int8, $4::int4, $5::int4, $6) AS outcome`,

    /**
     * $1 key, $2 owner, $3 keep the grant (true: leave the line only), $4/$5 xact-lock pair,
     * $6 channel. One row: `woken`, the waiters notified.
     */
    withdraw: `SELECT ${s}.fencelock_permit_withdraw($1, $2, $3::boolean, $4::int4, $5::int4, $6) AS woken`,

    /**
     * Delete up to $1 lapsed permits (holders that never released; a grant of their key deletes
     * them too). Rows a statement of their key has locked are skipped; the delete checks the
     * expiry again, under the row lock.
     */
    sweep: `WITH lapsed AS (
  SELECT key, owner FROM ${permits} WHERE expires_at <= clock_timestamp()
  LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${permits} p USING lapsed l
WHERE p.key = l.key AND p.owner = l.owner AND p.expires_at <= clock_timestamp()`,

    /** Delete up to $1 line entries whose owners stopped attempting. */
    sweepWaiters: `WITH expired AS (
  SELECT key, owner FROM ${waiters} WHERE expires_at <= clock_timestamp()
  LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${waiters} w USING expired e
WHERE w.key = e.key AND w.owner = e.owner AND w.expires_at <= clock_timestamp()`,
  };
}

/** The semaphore statements of one schema. */
export type PermitSql = ReturnType<typeof permitSqlFor>;
