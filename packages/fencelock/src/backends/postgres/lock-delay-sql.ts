/**
 * The SQL of the PostgreSQL lease mode's lock-delay (`AttemptRequest.lockDelayMs`, Chubby's
 * lock-delay: Burrows, OSDI 2006, section 2.4; Consul's session `LockDelay`), built once per
 * schema and included last in sql.ts's set-up.
 *
 * - The delay is a column of the grant's row: `lock_delay_ms` (integer ms, 1 to 60,000; NULL for
 *   none) in `fencelock_leases` (write locks) and `fencelock_elections` (leaderships). The grant
 *   writes it; renewals move only `expires_at`, and the holder's own repeated attempt keeps it.
 * - The end of a grant that was not released is its `expires_at`, on the server's clock (the
 *   same clock every grant reads): exact. A row is occupied until `fencelock_delay_end`
 *   (`expires_at` + `lock_delay_ms`): past its expiry and inside its delay, no grant of the key
 *   is made, to any owner (the former holder too, and the head of the line), and the row stays.
 * - A release or withdrawal that deletes the live row deletes its delay with it; one that finds
 *   the row expired and still in its delay leaves it (answered `not-held`), so a paused holder
 *   that comes back does not cut the delay short.
 * - Nothing is left behind: the sweep (sweeper.ts) deletes a row once its delay end has passed.
 *
 * Advisory mode (advisory.ts) keeps its delays in `fencelock_advisory_holders`: `lock_delay_ms`
 * with the holder's row, and `delayed_until` (NULL while the row stands for a holder), set when
 * the grant ends without a release. The server's lock has no expiry to read, so the end is
 * timestamped in one of two ways:
 * - The backend's own TTL ran out (`advisoryExpire`): the statement that lets the lock go sets
 *   `delayed_until` = its `clock_timestamp()` + the delay, before the unlock. Exact.
 * - The holder's session ended (process killed, connection terminated or lost): nobody can say
 *   when. Its row stays, unbacked. The end is no later than the row's `expires_at` (the
 *   holder's last grant or renewal + its TTL: its backend would have let the lock go then, and
 *   its lease is invalid past it on its own clock) and no later than the first attempt that
 *   finds the lock free (`fencelock_advisory_attempt`), which sets `delayed_until` to the
 *   earlier of the two + the delay. So the delay ends at most the time between that end and the
 *   earlier bound late (at most the holder's TTL), never early.
 * - A live release or withdrawal deletes the row before it lets the lock go: no delay.
 *
 * Upgrade: an existing schema gains the columns by `ALTER TABLE … ADD COLUMN` (nullable, no
 * default: a catalog change only), run once by the set-up (which runs because
 * `fencelock_delay_end`, the newest object, is missing). It needs the ownership of the two
 * tables, unlike earlier upgrades, which only created objects. A process of an earlier version
 * sharing the upgraded schema ignores delays (it takes an expired row over at once).
 */

/** The lock-delay objects of one schema; `s` is the quoted schema name. */
export function lockDelaySqlFor(s: string) {
  const leases = `${s}.fencelock_leases`;
  const elections = `${s}.fencelock_elections`;
  const holders = `${s}.fencelock_advisory_holders`;
  const delayEnd = `${s}.fencelock_delay_end`;
  const advisoryAttempt = `${s}.fencelock_advisory_attempt`;
  const addColumn = (
    table: string,
    column: string,
    type: string,
  ) => `IF NOT EXISTS (SELECT 1 FROM pg_attribute
                 WHERE attrelid = '${table}'::regclass AND attname = '${column}' AND NOT attisdropped) THEN
    ALTER TABLE ${table} ADD COLUMN ${column} ${type};
  END IF;`;

  /**
   * Created after the tables they change; the marker comment opens them (the upgrade test cuts
   * the set-up there to build the previous version's schema).
   */
  const objects = `-- Lock-delay (lock-delay-sql.ts).
DO $do$ BEGIN
  -- Tables of an earlier version (and fresh ones, made just before in this transaction) gain the
  -- column once; no ALTER (its ACCESS EXCLUSIVE lock) is taken when it exists.
  ${addColumn(leases, 'lock_delay_ms', 'integer')}
  ${addColumn(elections, 'lock_delay_ms', 'integer')}
  ${addColumn(holders, 'lock_delay_ms', 'integer')}
  ${addColumn(holders, 'delayed_until', 'timestamptz')}
END $do$;

-- Until when a grant's row keeps its key from everyone else: its expiry, plus its lock-delay
-- (ms) when it has one. Inlined by the planner (one expression of its arguments).
CREATE OR REPLACE FUNCTION ${delayEnd}(p_expires_at timestamptz, p_lock_delay_ms integer)
RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS
$fn$ SELECT p_expires_at + coalesce(p_lock_delay_ms, 0) * interval '1 millisecond' $fn$;

-- Advisory mode, on the backend's lock connection: try the session lock of every p_ids[i]; when
-- all were got, look at each key's holder row under its row lock (a fresh snapshot, taken after
-- the locks: every change a holder committed before letting its lock go is seen) and refuse the
-- lot if a row is in its lock-delay (an unbacked row's end is discovered: set to the earlier of
-- its TTL end and now); else record each grant (token drawn now). Locks got but not granted are
-- let go before the answer. One row per key, in order: o_ok (its lock was free), o_token (every
-- key's or none), o_remaining_ms (the delay left of a key refused by its delay, else NULL).
CREATE OR REPLACE FUNCTION ${advisoryAttempt}(
  p_keys text[], p_owners text[], p_ids bigint[], p_ttl_ms bigint[], p_lock_delay_ms integer[]
) RETURNS TABLE (o_n integer, o_ok boolean, o_token bigint, o_remaining_ms bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_n integer := cardinality(p_keys);
  v_got boolean[] := '{}';
  v_until timestamptz[] := '{}';
  v_tokens bigint[] := '{}';
  v_all boolean := true;
  v_end timestamptz;
  v_found boolean;
  v_token bigint;
BEGIN
  FOR i IN 1 .. v_n LOOP
    v_got[i] := pg_try_advisory_lock(p_ids[i]);
    v_all := v_all AND v_got[i];
  END LOOP;
  IF v_all THEN
    FOR i IN 1 .. v_n LOOP
      SELECT coalesce(h.delayed_until,
                      least(h.expires_at, clock_timestamp()) + h.lock_delay_ms * interval '1 millisecond'),
             h.delayed_until IS NULL
      INTO v_end, v_found
      FROM ${holders} h WHERE h.key = p_keys[i] FOR UPDATE;
      IF v_end > clock_timestamp() THEN
        IF v_found THEN
          UPDATE ${holders} SET delayed_until = v_end WHERE key = p_keys[i];
        END IF;
        v_until[i] := v_end;
        v_all := false;
      END IF;
    END LOOP;
  END IF;
  IF v_all THEN
    FOR i IN 1 .. v_n LOOP
      INSERT INTO ${holders} AS h (key, owner, token, pid, expires_at, lock_delay_ms, delayed_until)
      VALUES (p_keys[i], p_owners[i], nextval('${s}.fencelock_token_seq'), pg_backend_pid(),
              clock_timestamp() + p_ttl_ms[i] * interval '1 millisecond', p_lock_delay_ms[i], NULL)
      ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token,
        pid = excluded.pid, expires_at = excluded.expires_at,
        lock_delay_ms = excluded.lock_delay_ms, delayed_until = NULL
      RETURNING h.token INTO v_token;
      v_tokens[i] := v_token;
    END LOOP;
  ELSE
    FOR i IN 1 .. v_n LOOP
      IF v_got[i] THEN PERFORM pg_advisory_unlock(p_ids[i]); END IF;
    END LOOP;
  END IF;
  FOR i IN 1 .. v_n LOOP
    o_n := i;
    o_ok := v_got[i];
    o_token := CASE WHEN v_all THEN v_tokens[i] END;
    o_remaining_ms := ceil(extract(epoch FROM v_until[i] - clock_timestamp()) * 1000)::bigint;
    RETURN NEXT;
  END LOOP;
END $fn$;`;

  return {
    objects,
    /** The function's signature, for `to_regprocedure` (sql.ts `ready`: the newest object). */
    signature: `${delayEnd}(timestamp with time zone, integer)`,
    /**
     * Advisory mode's attempt at one key or several (`fencelock_advisory_attempt` above).
     * $1 keys, $2 owners, $3 lock ids (`lockIdOf`, decimal), $4 ttlMs values, $5 lock-delays ms or
     * null (arrays of one length). One row per key, in order: `ok`, `token` (text), `remaining_ms`.
     */
    advisoryAttempt: `SELECT o_ok AS ok, o_token::text AS token, o_remaining_ms::text AS remaining_ms
FROM ${advisoryAttempt}($1::text[], $2::text[], $3::int8[], $4::int8[], $5::int4[]) ORDER BY o_n`,
    /**
     * Advisory mode, the backend's TTL ran out (on the lock connection): the row of this owner
     * and token becomes its delay's record (`delayed_until` = now + its delay) or, without a
     * delay, goes; then the lock is let go (after the row's change: the subquery is not pulled
     * up), and the key's waiters are told. $1 key, $2 owner, $3 token, $4 lock id, $5 channel.
     */
    advisoryExpire: `WITH kept AS (
  UPDATE ${holders} SET delayed_until = clock_timestamp() + lock_delay_ms * interval '1 millisecond'
  WHERE key = $1 AND owner = $2 AND token = $3::int8 AND lock_delay_ms IS NOT NULL AND delayed_until IS NULL
  RETURNING 1
),
gone AS (
  DELETE FROM ${holders} WHERE key = $1 AND owner = $2 AND token = $3::int8 AND lock_delay_ms IS NULL
  RETURNING 1
)
SELECT pg_advisory_unlock($4::int8) AS unlocked, c.changed, pg_notify($5, '0:' || $1)
FROM (SELECT (SELECT count(*) FROM kept) + (SELECT count(*) FROM gone) AS changed OFFSET 0) c`,
    /**
     * The end of the delay of the row `alias` (a table alias, or '' for an unqualified row) as
     * a SQL expression: its `expires_at` when it carries no delay.
     */
    DELAY_END: (alias = '') => {
      const a = alias === '' ? '' : `${alias}.`;
      return `${delayEnd}(${a}expires_at, ${a}lock_delay_ms)`;
    },
  };
}

/** The lock-delay SQL of one schema. */
export type LockDelaySql = ReturnType<typeof lockDelaySqlFor>;
