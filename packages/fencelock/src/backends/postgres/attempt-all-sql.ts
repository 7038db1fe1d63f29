/**
 * The SQL of the lease mode's multi-key attempt (`Backend.attemptAll`, `acquireAll`'s first
 * round), built once per schema and included last in sql.ts's set-up: one PL/pgSQL function,
 * `fencelock_attempt_all`, called by one statement.
 *
 * 1. It takes the transaction-level lock of every key (`xactLockPairOf`, the lock each single
 *    grant of the key takes), in the order of the lock pairs, the same for every caller whatever
 *    the order of its keys: two calls sharing keys never wait for each other in a cycle. A single
 *    attempt takes one key's lock only, so it closes no cycle either.
 * 2. Inside a block with an exception handler (a subtransaction), it makes each key's single
 *    attempt, unchanged: sql.ts's write attempt (`writeAttempt`, the very statement `attempt`
 *    sends, with PL/pgSQL variables for its parameters) or read-sql.ts's
 *    `fencelock_read_attempt`, never standing in the line (`queued` false). So a key is granted
 *    exactly when a `tryAcquire` of it would be: the fair line (a key with a waiter is not free
 *    for a newcomer), readers sharing and a writer alone, the downgrade rule, an expired lease
 *    taken over, a retried call of the same owners refreshing their grants with the same tokens.
 *    Tokens come from the schema's sequence while the key's lock is held, as for a single grant.
 * 3. At the first key refused, it raises `FL001`, which rolls the block back: no grant, line
 *    entry or notification of the call remains (sequence values drawn for the keys before it are
 *    lost; tokens skip, never go back). The keys' locks stay until the statement's transaction
 *    ends.
 *
 * One row per key, in the order given: `o_token` (every key's, or none), `o_blocked` (the key at
 * which the call stopped), with its single attempt's `o_refused` (a downgrade refused) and
 * `o_remaining_ms` (the holder's time left). Keys after that one are not looked at.
 */

/**
 * The inputs of the write attempt as SQL expressions (parameters such as `$1`, or PL/pgSQL
 * variables): key, owner, ttlMs (int8), the key's xact-lock pair (int4 each), whether a refused
 * contender stands in the line (boolean), its entry's lifetime in ms (int8) and the grant's
 * lock-delay in ms (int4, NULL for none; lock-delay-sql.ts).
 */
export interface WriteAttemptInputs {
  readonly key: string;
  readonly owner: string;
  readonly ttlMs: string;
  readonly lockHi: string;
  readonly lockLo: string;
  readonly queued: string;
  readonly entryTtlMs: string;
  readonly lockDelayMs: string;
}

/** The multi-key attempt's function and statement of one schema; `s` is the quoted schema name. */
export function attemptAllSqlFor(
  s: string,
  writeAttempt: (inputs: WriteAttemptInputs, into: string) => string,
) {
  const fn = `${s}.fencelock_attempt_all`;
  const write = writeAttempt(
    {
      key: 'v_key',
      owner: 'v_owner',
      ttlMs: 'v_ttl_ms',
      lockHi: 'v_lock_hi',
      lockLo: 'v_lock_lo',
      queued: 'false',
      entryTtlMs: '0',
      lockDelayMs: 'v_lock_delay_ms',
    },
    '\nINTO v_token_text, v_remaining_text',
  );
  const objects = `-- Single attempts at p_keys[i] by p_owners[i] (a read lock where p_read[i]; a write lock with
-- the lock-delay p_lock_delay_ms[i], NULL for none), all granted or none (attempt-all-sql.ts).
-- One row per key, in order. (The overload of earlier versions, without p_lock_delay_ms, stays
-- for their processes.)
CREATE OR REPLACE FUNCTION ${fn}(
  p_keys text[], p_owners text[], p_ttl_ms bigint[], p_lock_hi integer[], p_lock_lo integer[],
  p_read boolean[], p_held_writers text[], p_channel text, p_lock_delay_ms integer[]
) RETURNS TABLE (o_n integer, o_token bigint, o_blocked boolean, o_refused boolean, o_remaining_ms bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_hi integer;
  v_lo integer;
  v_key text;
  v_owner text;
  v_ttl_ms bigint;
  v_lock_hi integer;
  v_lock_lo integer;
  v_lock_delay_ms integer;
  v_token bigint;
  v_token_text text;
  v_remaining_text text;
  v_refused boolean;
  v_remaining bigint;
  v_tokens bigint[] := '{}';
  v_blocked integer;
BEGIN
  -- Every key's lock, in one order for all callers.
  FOR v_hi, v_lo IN
    SELECT DISTINCT u.hi, u.lo FROM unnest(p_lock_hi, p_lock_lo) AS u(hi, lo) ORDER BY u.hi, u.lo
  LOOP
    PERFORM pg_advisory_xact_lock(v_hi, v_lo);
  END LOOP;
  BEGIN
    FOR i IN 1 .. cardinality(p_keys) LOOP
      v_key := p_keys[i];
      v_owner := p_owners[i];
      v_ttl_ms := p_ttl_ms[i];
      v_lock_hi := p_lock_hi[i];
      v_lock_lo := p_lock_lo[i];
      v_lock_delay_ms := p_lock_delay_ms[i];
      IF p_read[i] THEN
        SELECT a.granted_token, a.refused, a.remaining_ms INTO v_token, v_refused, v_remaining
        FROM ${s}.fencelock_read_attempt(v_key, v_owner, v_ttl_ms, v_lock_hi, v_lock_lo, false, 0,
                                          p_held_writers[i], p_channel) a;
      ELSE
        ${write.replaceAll('\n', '\n        ')};
        v_token := v_token_text::bigint;
        v_refused := false;
        v_remaining := v_remaining_text::bigint;
      END IF;
      IF v_token IS NULL THEN
        v_blocked := i;
        RAISE SQLSTATE 'FL001';
      END IF;
      v_tokens[i] := v_token;
    END LOOP;
  EXCEPTION WHEN SQLSTATE 'FL001' THEN
    -- Every grant of the block is undone; v_blocked says where it stopped.
    NULL;
  END;
  FOR i IN 1 .. cardinality(p_keys) LOOP
    o_n := i;
    o_token := CASE WHEN v_blocked IS NULL THEN v_tokens[i] END;
    o_blocked := i IS NOT DISTINCT FROM v_blocked;
    o_refused := o_blocked AND v_refused;
    o_remaining_ms := CASE WHEN i = v_blocked THEN v_remaining END;
    RETURN NEXT;
  END LOOP;
END $fn$;`;
  return {
    objects,
    /** The function's signature, for `to_regprocedure` (sql.ts `ready`). */
    signature: `${fn}(text[], text[], bigint[], integer[], integer[], boolean[], text[], text, integer[])`,
    /**
     * $1 keys, $2 owners, $3 ttlMs values, $4/$5 the keys' xact-lock pairs, $6 whether each is a
     * read lock, $7 each one's held writer (a downgrade) or null, $8 channel, $9 each one's
     * lock-delay ms or null (arrays of one length). One row per key, in order: `token` (text), `blocked`, `refused`, `remaining_ms`
     * (text).
     */
    attempt: `SELECT o_token::text AS token, o_blocked AS blocked, o_refused AS refused,
       o_remaining_ms::text AS remaining_ms
FROM ${fn}($1::text[], $2::text[], $3::int8[], $4::int4[], $5::int4[], $6::boolean[], $7::text[], $8::text, $9::int4[])
ORDER BY o_n`,
  };
}

/** The multi-key attempt's SQL of one schema. */
export type AttemptAllSql = ReturnType<typeof attemptAllSqlFor>;
