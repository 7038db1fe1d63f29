/**
 * The SQL of the PostgreSQL lease mode's read locks (`mode: 'read'`), built once per schema and
 * included in sql.ts's set-up: one table, a column of the locks' line, and PL/pgSQL functions.
 *
 * - `fencelock_readers`: one row per read grant (key, owner, fencing token from the schema's
 *   sequence, expiry on the server's clock).
 * - While readers hold a key, the key's row in `fencelock_leases` is a placeholder of owner `''`
 *   (no owner is empty) whose expiry is at least every live reader's. A writer's grant is the
 *   same statement as before: it finds a live row of another owner and waits, and it can take the
 *   key only once the placeholder has lapsed or been deleted (by the last reader's release). So
 *   writers and readers exclude each other through the lease row's primary key, as writers do,
 *   and a version without read locks sharing the schema respects readers too.
 * - The line is the locks' `fencelock_waiters`, with a `reader` column (false for the entries of
 *   earlier versions): one FIFO line for both modes. A reader is granted when no writer holds and
 *   no write entry stands ahead of it (for a reader without an entry: no write entry at all); a
 *   writer waits for every entry ahead, as before.
 * - A read lock asked for inside the caller's write lock (`heldWriter`, a downgrade) is granted
 *   past that writer, and the writer's row is kept alive at least as long as the reader's; the
 *   writer's release then turns its row into the placeholder (sql.ts `release`). When another
 *   writer waits, the attempt is refused (nothing is written).
 *
 * Why functions: as for semaphores (permit-sql.ts), a grant must see every read grant, release
 * and renewal of the key committed before it took the key's transaction-level lock (the same
 * `xactLockPairOf` lock that the writers' grants take), which a single statement's snapshot does
 * not.
 *
 * Waking (no herd): a writer's release notifies the head of the line (sql.ts `NOTICE`). A reader
 * granted while no other reader held then notifies the consecutive read entries now at the head
 * of the line (the readers the release lets in; nobody behind the next write entry). The last
 * reader's release, a withdrawal from the head and a writer's withdrawal notify the head run
 * (`fencelock_rw_wake`): the head writer alone, or the readers before the first write entry.
 */

import { lockDelaySqlFor } from './lock-delay-sql.js';

/** The read-lock objects and statements of one schema; `s` is the quoted schema name. */
export function readSqlFor(s: string) {
  const readers = `${s}.fencelock_readers`;
  const leases = `${s}.fencelock_leases`;
  const waiters = `${s}.fencelock_waiters`;
  const tokenSequence = `${s}.fencelock_token_seq`;
  const waiterSequence = `${s}.fencelock_waiter_seq`;
  const LIVE = `expires_at > clock_timestamp()`;
  const { DELAY_END } = lockDelaySqlFor(s);
  const UNTIL = (ms: string) => `clock_timestamp() + ${ms} * interval '1 millisecond'`;
  const LEFT_MS = (expiry: string) =>
    `ceil(extract(epoch FROM ${expiry} - clock_timestamp()) * 1000)`;

  /** Created after the locks' tables and sequences (sql.ts); the readers table comes last. */
  const objects = `DO $do$ BEGIN
  -- A line made by an earlier version gains the column (its entries are writers'); a fresh one
  -- has it (sql.ts), and no ALTER (its ACCESS EXCLUSIVE lock) is taken then.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute
                 WHERE attrelid = '${waiters}'::regclass AND attname = 'reader' AND NOT attisdropped) THEN
    ALTER TABLE ${waiters} ADD COLUMN reader boolean NOT NULL DEFAULT false;
  END IF;
END $do$;

-- Notify the head run of p_key's line, p_leaving left out: the head writer alone, or the
-- readers before the first write entry (with p_readers_only, never a writer). Sends '0:<key>'
-- when nobody is lined up (and not p_readers_only). Returns how many were notified.
CREATE OR REPLACE FUNCTION ${s}.fencelock_rw_wake(
  p_key text, p_channel text, p_leaving text, p_readers_only boolean
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_entry record;
  v_woken integer := 0;
BEGIN
  FOR v_entry IN
    SELECT w.owner, w.reader FROM ${waiters} w
    WHERE w.key = p_key AND w.owner IS DISTINCT FROM p_leaving AND w.${LIVE}
    ORDER BY w.seq
  LOOP
    EXIT WHEN NOT v_entry.reader AND (v_woken > 0 OR p_readers_only);
    PERFORM pg_notify(p_channel, length(v_entry.owner) || ':' || v_entry.owner || p_key);
    v_woken := v_woken + 1;
    EXIT WHEN NOT v_entry.reader;
  END LOOP;
  IF v_woken = 0 AND NOT p_readers_only THEN PERFORM pg_notify(p_channel, '0:' || p_key); END IF;
  RETURN v_woken;
END $fn$;

-- Grant a read lock of p_key to p_owner, or report. One row: granted_token set (granted, or this
-- owner's live read grant refreshed: same token); else refused (a downgrade while another writer
-- waits: nothing written, this owner's entry gone); else remaining_ms, how long the holder or the
-- first write entry ahead may keep it, or the lock-delay of a lapsed writer lasts (null when
-- unknown). p_queued: a contender that is not granted stands in the line. p_held_writer: the
-- caller's own write lock (a downgrade) or null.
CREATE OR REPLACE FUNCTION ${s}.fencelock_read_attempt(
  p_key text, p_owner text, p_ttl_ms bigint, p_lock_hi integer, p_lock_lo integer,
  p_queued boolean, p_entry_ttl_ms bigint, p_held_writer text, p_channel text,
  OUT granted_token bigint, OUT refused boolean, OUT remaining_ms bigint
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_holder text;
  v_holder_expiry timestamptz;
  v_seq bigint;
  v_before integer;
  v_until timestamptz;
  v_delay_end timestamptz;
  v_blocked boolean := false;
BEGIN
  refused := false;
  -- One grant, release or withdrawal of the key at a time, writers' grants included.
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  DELETE FROM ${readers} WHERE key = p_key AND expires_at <= clock_timestamp();
  v_until := ${UNTIL('p_ttl_ms')};

  -- This owner's own live read grant (a retried attempt): refreshed, same token.
  UPDATE ${readers} SET expires_at = v_until WHERE key = p_key AND owner = p_owner
  RETURNING token INTO granted_token;
  IF granted_token IS NOT NULL THEN
    UPDATE ${leases} SET expires_at = greatest(expires_at, v_until) WHERE key = p_key AND ${LIVE};
    DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
    RETURN;
  END IF;

  SELECT owner, expires_at INTO v_holder, v_holder_expiry FROM ${leases}
  WHERE key = p_key AND ${LIVE};
  -- A writer's lapsed grant in its lock-delay (lock-delay-sql.ts) keeps readers out too.
  SELECT ${DELAY_END()} INTO v_delay_end FROM ${leases}
  WHERE key = p_key AND NOT ${LIVE} AND ${DELAY_END()} > clock_timestamp();
  SELECT seq INTO v_seq FROM ${waiters} WHERE key = p_key AND owner = p_owner AND ${LIVE};
  IF v_delay_end IS NOT NULL THEN
    v_blocked := true;
  ELSIF p_held_writer IS NOT NULL AND v_holder = p_held_writer THEN
    -- A downgrade: granted past the caller's own writer, unless another writer waits for it.
    IF EXISTS (SELECT 1 FROM ${waiters} w WHERE w.key = p_key AND NOT w.reader AND w.${LIVE}
               AND w.owner <> p_owner AND w.owner <> p_held_writer) THEN
      DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
      refused := true;
      RETURN;
    END IF;
  ELSIF v_holder IS NOT NULL AND v_holder <> '' THEN
    v_blocked := true;
  ELSIF EXISTS (SELECT 1 FROM ${waiters} w WHERE w.key = p_key AND NOT w.reader AND w.${LIVE}
                AND w.owner <> p_owner AND (v_seq IS NULL OR w.seq < v_seq)) THEN
    v_blocked := true;
  END IF;

  IF NOT v_blocked THEN
    SELECT count(*) INTO v_before FROM ${readers} WHERE key = p_key;
    INSERT INTO ${readers} (key, owner, token, expires_at)
    VALUES (p_key, p_owner, nextval('${tokenSequence}'), v_until)
    RETURNING token INTO granted_token;
    IF v_holder IS NOT NULL AND v_holder <> '' THEN
      -- The caller's write lock lives at least as long as its reader (its release hands the
      -- key to the readers, sql.ts).
      UPDATE ${leases} SET expires_at = greatest(expires_at, v_until)
      WHERE key = p_key AND owner = v_holder;
    ELSE
      INSERT INTO ${leases} AS l (key, owner, token, expires_at)
      VALUES (p_key, '', granted_token, v_until)
      ON CONFLICT (key) DO UPDATE SET
        owner = '',
        token = excluded.token,
        expires_at = CASE WHEN l.owner = '' AND l.expires_at > clock_timestamp()
                          THEN greatest(l.expires_at, excluded.expires_at)
                          ELSE excluded.expires_at END,
        lock_delay_ms = NULL
      WHERE l.owner = '' OR ${DELAY_END('l')} <= clock_timestamp();
      IF NOT FOUND THEN
        -- A writer's grant got in (it cannot under the key's lock; kept for safety).
        DELETE FROM ${readers} WHERE key = p_key AND owner = p_owner;
        granted_token := NULL;
        v_blocked := true;
      END IF;
    END IF;
    IF NOT v_blocked THEN
      DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
      IF v_before = 0 THEN
        PERFORM ${s}.fencelock_rw_wake(p_key, p_channel, p_owner, true);
      END IF;
      RETURN;
    END IF;
  END IF;

  -- Not granted: stand in the line, or keep its place.
  IF p_queued THEN
    IF v_seq IS NOT NULL THEN
      UPDATE ${waiters} SET expires_at = ${UNTIL('p_entry_ttl_ms')}
      WHERE key = p_key AND owner = p_owner;
    ELSE
      INSERT INTO ${waiters} (key, owner, seq, expires_at, reader)
      VALUES (p_key, p_owner, nextval('${waiterSequence}'), ${UNTIL('p_entry_ttl_ms')}, true)
      ON CONFLICT (key, owner) DO UPDATE
        SET seq = excluded.seq, expires_at = excluded.expires_at, reader = true;
    END IF;
  END IF;
  SELECT ${LEFT_MS('expires_at')} INTO remaining_ms FROM ${leases} WHERE key = p_key AND ${LIVE};
  IF remaining_ms IS NULL AND v_delay_end IS NOT NULL THEN
    remaining_ms := ${LEFT_MS('v_delay_end')};
  END IF;
  IF remaining_ms IS NULL THEN
    SELECT ${LEFT_MS('min(w.expires_at)')} INTO remaining_ms FROM ${waiters} w
    WHERE w.key = p_key AND NOT w.reader AND w.owner <> p_owner AND w.${LIVE}
      AND (v_seq IS NULL OR w.seq < v_seq);
  END IF;
END $fn$;

-- After a read grant went: shrink the placeholder to the live readers left, or delete it and
-- notify the head run when none is left. Returns how many were notified.
CREATE OR REPLACE FUNCTION ${s}.fencelock_read_gone(p_key text, p_channel text)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_max timestamptz;
BEGIN
  SELECT max(expires_at) INTO v_max FROM ${readers} WHERE key = p_key AND ${LIVE};
  IF v_max IS NULL THEN
    DELETE FROM ${leases} WHERE key = p_key AND owner = '';
    IF FOUND THEN RETURN ${s}.fencelock_rw_wake(p_key, p_channel, NULL, false); END IF;
  ELSE
    UPDATE ${leases} SET expires_at = v_max WHERE key = p_key AND owner = '';
  END IF;
  RETURN 0;
END $fn$;

-- Compare-and-delete p_owner's read grant of p_key by token. 'released'; 'not-owner' (no live
-- read grant of this owner and token, but the key is held); 'not-held'. A lapsed row of this
-- owner is deleted too (cleanup: not released).
CREATE OR REPLACE FUNCTION ${s}.fencelock_read_release(
  p_key text, p_owner text, p_token bigint, p_lock_hi integer, p_lock_lo integer, p_channel text
) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  DELETE FROM ${readers} WHERE key = p_key AND owner = p_owner AND token = p_token AND ${LIVE};
  IF NOT FOUND THEN
    DELETE FROM ${readers}
    WHERE key = p_key AND owner = p_owner AND expires_at <= clock_timestamp();
    IF EXISTS (SELECT 1 FROM ${leases} WHERE key = p_key AND ${LIVE})
       OR EXISTS (SELECT 1 FROM ${readers} WHERE key = p_key AND ${LIVE}) THEN
      RETURN 'not-owner';
    END IF;
    RETURN 'not-held';
  END IF;
  PERFORM ${s}.fencelock_read_gone(p_key, p_channel);
  RETURN 'released';
END $fn$;

-- Renew p_owner's live read grant of p_key by token; the key's row (placeholder, or the
-- caller's write lock of a downgrade) is kept at least as long.
CREATE OR REPLACE FUNCTION ${s}.fencelock_read_renew(
  p_key text, p_owner text, p_token bigint, p_ttl_ms bigint, p_lock_hi integer, p_lock_lo integer,
  OUT ok boolean, OUT live boolean
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_until timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  UPDATE ${readers} SET expires_at = ${UNTIL('p_ttl_ms')}
  WHERE key = p_key AND owner = p_owner AND token = p_token AND ${LIVE}
  RETURNING expires_at INTO v_until;
  ok := v_until IS NOT NULL;
  IF ok THEN
    UPDATE ${leases} SET expires_at = greatest(expires_at, v_until) WHERE key = p_key AND ${LIVE};
  END IF;
  live := EXISTS (SELECT 1 FROM ${leases} WHERE key = p_key AND ${LIVE})
       OR EXISTS (SELECT 1 FROM ${readers} WHERE key = p_key AND ${LIVE});
END $fn$;

-- Withdraw p_owner from p_key's line and, unless p_keep_grant, drop its read grant whatever the
-- token; notify whom this lets in. Returns how many were notified.
CREATE OR REPLACE FUNCTION ${s}.fencelock_read_withdraw(
  p_key text, p_owner text, p_keep_grant boolean, p_lock_hi integer, p_lock_lo integer,
  p_channel text
) RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  v_head boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(p_lock_hi, p_lock_lo);
  SELECT NOT EXISTS (SELECT 1 FROM ${waiters} w WHERE w.key = p_key AND w.owner <> p_owner
                     AND w.${LIVE} AND w.seq < me.seq)
  INTO v_head FROM ${waiters} me WHERE me.key = p_key AND me.owner = p_owner;
  DELETE FROM ${waiters} WHERE key = p_key AND owner = p_owner;
  IF NOT p_keep_grant THEN
    DELETE FROM ${readers} WHERE key = p_key AND owner = p_owner;
    IF FOUND THEN RETURN ${s}.fencelock_read_gone(p_key, p_channel); END IF;
  END IF;
  IF v_head THEN RETURN ${s}.fencelock_rw_wake(p_key, p_channel, p_owner, false); END IF;
  RETURN 0;
END $fn$;

-- A writer's release while read grants of its downgrade live (sql.ts release): its row becomes
-- the readers' placeholder (at least as long as they live); when they went meanwhile, it goes,
-- and the head of the line is told. Returns true when the write lock was let go.
CREATE OR REPLACE FUNCTION ${s}.fencelock_write_to_readers(
  p_key text, p_owner text, p_token bigint, p_channel text
) RETURNS boolean LANGUAGE plpgsql AS $fn$
DECLARE
  v_token bigint;
  v_until timestamptz;
BEGIN
  SELECT max(token), max(expires_at) INTO v_token, v_until FROM ${readers}
  WHERE key = p_key AND ${LIVE};
  IF v_until IS NULL THEN
    DELETE FROM ${leases} WHERE key = p_key AND owner = p_owner AND token = p_token;
    IF FOUND THEN PERFORM ${s}.fencelock_rw_wake(p_key, p_channel, NULL, false); END IF;
  ELSE
    UPDATE ${leases} SET owner = '', token = v_token, expires_at = greatest(expires_at, v_until),
                         lock_delay_ms = NULL
    WHERE key = p_key AND owner = p_owner AND token = p_token;
  END IF;
  RETURN FOUND;
END $fn$;

CREATE TABLE IF NOT EXISTS ${readers} (
  key        text NOT NULL,
  owner      text NOT NULL,
  token      bigint NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (key, owner)
) WITH (fillfactor = 70);`;

  return {
    objects,
    readersTable: readers,

    /**
     * $1 key, $2 owner, $3 ttlMs, $4/$5 the key's xact-lock pair, $6 queued, $7 entry lifetime
     * ms, $8 heldWriter or null, $9 channel. One row: `token`, `refused` or `remaining_ms`.
     */
    attempt: `SELECT granted_token::text AS token, refused, remaining_ms::text AS remaining_ms
FROM ${s}.fencelock_read_attempt($1, $2, $3::int8, $4::int4, $5::int4, $6::boolean, $7::int8, $8::text, $9)`,

    /** $1 key, $2 owner, $3 token, $4/$5 xact-lock pair, $6 channel. One row: `outcome`. */
    release: `SELECT ${s}.fencelock_read_release($1, $2, $3::int8, $4::int4, $5::int4, $6) AS outcome`,

    /** $1 key, $2 owner, $3 token, $4 ttlMs, $5/$6 xact-lock pair. One row: `ok`, `live`. */
    renew: `SELECT ok, live FROM ${s}.fencelock_read_renew($1, $2, $3::int8, $4::int8, $5::int4, $6::int4)`,

    /** $1 key, $2 owner, $3 keep the grant, $4/$5 xact-lock pair, $6 channel. */
    withdraw: `SELECT ${s}.fencelock_read_withdraw($1, $2, $3::boolean, $4::int4, $5::int4, $6) AS woken`,

    /** The holder of $1 (the writer, else the earliest live reader) and the highest reader token. */
    inspect: `SELECT h.owner, h.token::text AS token, ${LEFT_MS('h.expires_at')}::text AS remaining_ms,
       (SELECT max(token) FROM ${readers} WHERE key = $1 AND ${LIVE})::text AS highest
FROM (
  SELECT owner, token, expires_at, 0 AS rank FROM ${leases} WHERE key = $1 AND owner <> '' AND ${LIVE}
  UNION ALL
  SELECT owner, token, expires_at, 1 FROM ${readers} WHERE key = $1 AND ${LIVE}
) h ORDER BY h.rank, h.token LIMIT 1`,

    /** Delete up to $1 lapsed read grants. */
    sweep: `WITH lapsed AS (
  SELECT key, owner FROM ${readers} WHERE expires_at <= clock_timestamp()
  LIMIT $1 FOR UPDATE SKIP LOCKED
)
DELETE FROM ${readers} r USING lapsed l
WHERE r.key = l.key AND r.owner = l.owner AND r.expires_at <= clock_timestamp()`,
  };
}

/** The read-lock statements of one schema. */
export type ReadSql = ReturnType<typeof readSqlFor>;
