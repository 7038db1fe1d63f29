/**
 * The resource-side half of fencing (Kleppmann, "How to do distributed locking", 2016) for data
 * kept in PostgreSQL: every write carries the writer's fencing token, and the database refuses it
 * when it has already accepted a newer token for the same resource. Works with a lease from any
 * backend (the token is a bigint).
 *
 * The guard keeps one row per resource in a fence table (created if missing):
 *
 * ```sql
 * CREATE TABLE "<schema>"."<table>" (
 *   resource    text        PRIMARY KEY,
 *   fence_token bigint      NOT NULL CHECK (fence_token >= 0),  -- newest accepted token
 *   value       text,                                          -- set by write(), kept by transaction()
 *   updated_at  timestamptz NOT NULL DEFAULT now()
 * );
 * ```
 *
 * The check is a single conditional upsert (`… ON CONFLICT (resource) DO UPDATE … WHERE
 * fence_token <= $token`), so it is atomic without any session state: it works through a pool
 * and behind a transaction-mode pooler.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { ClientBase, Pool, PoolClient, QueryResult } from 'pg';
import { BackendError, InvalidArgumentError, StaleTokenError } from '../errors.js';
import { validateKey } from '../options.js';
import { checkToken } from './shared.js';

/** Options of a `PgFence`. */
export interface PgFenceOptions {
  /**
   * Schema of the fence table, created if missing: a lower-case SQL identifier (`a`–`z`, `0`–`9`,
   * `_`, not starting with a digit) of 1 to 63 bytes, so the name reads the same quoted and
   * unquoted (as the PostgreSQL store's `schema`). @default 'public'
   */
  readonly schema?: string;
  /** Name of the fence table, created if missing; same rules as `schema`. @default 'fencelock_fences' */
  readonly table?: string;
}

/** Defaults of `PgFenceOptions`. */
export const PG_FENCE_DEFAULTS = Object.freeze({ schema: 'public', table: 'fencelock_fences' });

/** A resource's row in the fence table. */
export interface PgFenceRecord {
  /** Newest fencing token accepted for the resource. */
  readonly token: bigint;
  /** Value of the last `write()`; null when only `transaction()` has fenced the resource. */
  readonly value: string | null;
}

/** Largest token a PostgreSQL `bigint` holds: 2^63 − 1. */
export const PG_MAX_TOKEN = (1n << 63n) - 1n;

/** A lower-case identifier PostgreSQL keeps whole (at most NAMEDATALEN − 1 = 63 bytes). */
const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * SQLSTATEs a CREATE … IF NOT EXISTS answers when a concurrent identical CREATE got there first:
 * unique_violation (on a catalog index), duplicate_object (the table's row type),
 * duplicate_schema, duplicate_table.
 */
const CREATE_RACE_CODES = new Set(['23505', '42710', '42P06', '42P07']);

/** Either kind of connection the user may pass. */
type Db = Pool | ClientBase;

/** A `transaction()` whose `work` runs: its connection (pool or client), table and resource. */
interface WorkScope {
  readonly db: Db;
  readonly table: string;
  readonly resource: string;
  /** False once `work` has returned: a task it left running may use the fence normally. */
  active: boolean;
}

/**
 * The `transaction()` calls whose `work` the current async context runs in, outermost first.
 * A fence call made from inside `work` finds its own transaction here (see `#checkReentry`).
 */
const runningWork = new AsyncLocalStorage<readonly WorkScope[]>();

/**
 * Savepoint taken right before `work` and released right after it: the release fails when `work`
 * ended the transaction (COMMIT / ROLLBACK on `tx`) or left it aborted.
 */
const WORK_SAVEPOINT = 'fencelock_fence_work';

/** SQLSTATE of a statement sent in a transaction that an earlier error aborted. */
const IN_FAILED_TRANSACTION = '25P02';

/**
 * Fenced writes to PostgreSQL through node-postgres (`pg`).
 *
 * Two forms: a fenced register (`write` / `read`), and `transaction`, which runs your own SQL in
 * the same transaction as the token check, so your changes commit only while your token is the
 * newest the resource has seen.
 *
 * The rule (both forms): a write with a token older than the stored one is refused with
 * `StaleTokenError`; an equal token is accepted (the same holder writing again, or a reentrant
 * hold); a newer one is accepted and recorded. Tokens are compared exactly as `bigint` (sent as
 * decimal strings), so tokens beyond 2^53 work; they must fit PostgreSQL's `bigint`
 * (0 … 2^63 − 1).
 *
 * @example
 * const fence = new PgFence(pool);
 * await locker.withLock('stock:42', (lease) =>
 *   fence.transaction('stock:42', lease.fencingToken, (tx) =>
 *     tx.query('UPDATE stock SET units = units - 1 WHERE sku = $1', [42])));
 */
export class PgFence {
  readonly #db: Db;
  /** True for a `pg.Pool` (one connection per transaction), false for one client. */
  readonly #isPool: boolean;
  readonly #schemaName: string;
  readonly #sql: ReturnType<typeof statements>;
  /** The table check / creation, shared by every call once it has succeeded. */
  #ready: Promise<void> | undefined;
  /** On a single client, fence operations run one at a time (a client is one session). */
  #queue: Promise<unknown> = Promise.resolve();

  /**
   * @param db a `pg.Pool` or a connected `pg.Client` / `pg.PoolClient` (yours: the fence never
   *   ends or releases it). With a single client, the fence runs its operations on it one at a
   *   time; do not send other queries on that client while a `transaction()` runs, since they
   *   would land inside its transaction, and do not call the fence from inside `transaction()`'s
   *   `work` (that call is refused: it would wait for the transaction it runs in).
   * @param options schema and table of the fence table.
   * @throws InvalidArgumentError for something that is not a node-postgres pool or client, or a
   *   schema / table name outside the rules above.
   */
  constructor(db: Pool | ClientBase, options: PgFenceOptions = {}) {
    const d = db as unknown as Record<string, unknown> | null;
    if (typeof d !== 'object' || d === null || typeof d.query !== 'function') {
      throw new InvalidArgumentError('db', 'a node-postgres Pool or Client', db);
    }
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'an object { schema?, table? }', options);
    }
    for (const name of Object.keys(options)) {
      if (name !== 'schema' && name !== 'table') {
        throw new InvalidArgumentError(`options.${name}`, 'one of schema, table', name);
      }
    }
    const schema = checkIdentifier(options.schema ?? PG_FENCE_DEFAULTS.schema, 'options.schema');
    const table = checkIdentifier(options.table ?? PG_FENCE_DEFAULTS.table, 'options.table');
    this.#db = db;
    this.#isPool = typeof d.totalCount === 'number' && typeof d.connect === 'function';
    this.#schemaName = schema;
    this.#sql = statements(`"${schema}"`, `"${schema}"."${table}"`);
  }

  /**
   * Write `value` to `resource` unless a newer fencing token has already written it (one
   * statement, atomic). Creates the fence table on first use if it is missing.
   * @param resource name of the guarded resource (1 to 1024 UTF-8 bytes, no NUL).
   * @param token the writer's fencing token (`lease.fencingToken`), 0 … 2^63 − 1.
   * @param value the value to store (a string without NUL).
   * @throws StaleTokenError with `attemptedToken` and `currentToken` when a newer token already
   *   wrote the resource; nothing is written then.
   * @throws InvalidArgumentError for bad arguments, before any query; also when called from the
   *   `work` of this fence's `transaction()` on a single client, or on the same resource.
   * @throws BackendError when PostgreSQL fails (its error is `cause`).
   */
  async write(resource: string, token: bigint, value: string): Promise<void> {
    checkResource(resource);
    checkToken(token, PG_MAX_TOKEN);
    if (typeof value !== 'string' || value.includes('\0')) {
      throw new InvalidArgumentError('value', 'a string without NUL characters', value);
    }
    this.#checkReentry('write', resource);
    await this.#use(async (db) => {
      await this.#ensureTable(db);
      // A refusal is followed by a read of the newer token. Tokens only grow, so that read finds
      // a newer one, unless someone deleted or lowered the row meanwhile: then write again.
      for (let attempt = 1; ; attempt++) {
        const written = await query(db, 'fenced write', this.#sql.write, [
          resource,
          token.toString(),
          value,
        ]);
        if (written.rowCount === 1) return;
        const current = await this.#currentToken(db, resource);
        if (current !== null && current > token) {
          throw new StaleTokenError(resource, token, current);
        }
        if (attempt === 3) {
          throw new BackendError(
            'postgres',
            'fenced write',
            new Error(`the fence row of "${resource}" keeps changing under the write`),
          );
        }
      }
    });
  }

  /**
   * The fence row of `resource`: its newest accepted token and last written value, or null if
   * it was never written. Creates the fence table on first use if it is missing.
   * @throws InvalidArgumentError for a bad resource, before any query; also when called from the
   *   `work` of this fence's `transaction()` on a single client.
   * @throws BackendError when PostgreSQL fails.
   */
  async read(resource: string): Promise<PgFenceRecord | null> {
    checkResource(resource);
    this.#checkReentry('read', resource);
    return this.#use(async (db) => {
      await this.#ensureTable(db);
      const result = await query<{ token: string; value: string | null }>(
        db,
        'fenced read',
        this.#sql.read,
        [resource],
      );
      const row = result.rows[0];
      return row === undefined ? null : { token: BigInt(row.token), value: row.value };
    });
  }

  /**
   * Run `work` in a transaction that first checks and records `token` for `resource`, so that
   * `work`'s own changes commit only if no newer token has fenced the resource.
   *
   * In order: BEGIN (READ COMMITTED); record `token` on the resource's fence row unless it holds
   * a newer one (the row stays locked until the end, so writers of the same resource go one at a
   * time); SAVEPOINT; run `work(tx)`; RELEASE SAVEPOINT; COMMIT. A stale token rolls back before
   * `work` is called. An error thrown by `work` rolls back and is rethrown as it is. The row's
   * `value` is left unchanged. The savepoint is how the fence notices a `work` that ended the
   * transaction itself (its release then fails).
   *
   * `work` must not call this fence again when the fence runs on a single client (the client is
   * busy with this very transaction, so the call would wait for itself forever), nor write the
   * same resource through it on a pool (the new connection would wait forever for the row lock
   * this transaction holds): such calls are refused with `InvalidArgumentError`. Reading through
   * a pool, or other resources, is fine.
   *
   * @param resource name of the guarded resource (1 to 1024 UTF-8 bytes, no NUL).
   * @param token the writer's fencing token (`lease.fencingToken`), 0 … 2^63 − 1.
   * @param work your queries, sent on `tx` (a connection taken from the pool for this
   *   transaction, or your client). Do not COMMIT, ROLLBACK or release it yourself.
   * @returns what `work` returned, once committed.
   * @throws StaleTokenError with both tokens when a newer token already fenced the resource.
   * @throws InvalidArgumentError for bad arguments, before any query, and for a call from inside
   *   the `work` of a `transaction()` as described above.
   * @throws BackendError when the fence's own statements fail; when COMMIT did not commit (e.g.
   *   `work` caught an SQL error, which aborts the transaction), your changes being rolled back
   *   then; or when `work` ended the transaction itself (COMMIT or ROLLBACK on `tx`): what it did
   *   before that was committed or rolled back by its own statement, what it sent after ran
   *   outside the fence (a transaction it began again is rolled back).
   */
  async transaction<T>(
    resource: string,
    token: bigint,
    work: (tx: ClientBase) => Promise<T>,
  ): Promise<T> {
    checkResource(resource);
    checkToken(token, PG_MAX_TOKEN);
    if (typeof work !== 'function') {
      throw new InvalidArgumentError('work', 'a function (tx) => Promise', work);
    }
    this.#checkReentry('transaction', resource);
    return this.#use(async (db) => {
      // Outside the transaction, so a first CREATE TABLE is not tied to the caller's work.
      await this.#ensureTable(db);
      const tx = this.#isPool ? await connect(db as Pool) : (db as ClientBase);
      /** Set when the connection may be left in a transaction: a pool must discard it. */
      let unusable: Error | undefined;
      try {
        await query(tx, 'begin', 'BEGIN').catch((error: unknown) => {
          unusable = asError(error);
          throw error;
        });
        let result: T;
        try {
          const fenced = await query(tx, 'fence check', this.#sql.fence, [
            resource,
            token.toString(),
          ]);
          if (fenced.rowCount !== 1) {
            // The upsert locked the row even though it did not change it: this read is current.
            const current = await this.#currentToken(tx, resource);
            if (current === null || current <= token) {
              throw new BackendError(
                'postgres',
                'fence check',
                new Error(`the fence row of "${resource}" changed under the check`),
              );
            }
            throw new StaleTokenError(resource, token, current);
          }
          await query(tx, 'savepoint', `SAVEPOINT ${WORK_SAVEPOINT}`);
          const scope: WorkScope = {
            db: this.#db,
            table: this.#sql.qualified,
            resource,
            active: true,
          };
          try {
            result = await runningWork.run([...(runningWork.getStore() ?? []), scope], () =>
              work(tx),
            );
          } finally {
            scope.active = false;
          }
          await releaseWorkSavepoint(tx);
        } catch (error) {
          try {
            await tx.query('ROLLBACK');
          } catch (rollbackError) {
            unusable = asError(rollbackError);
          }
          throw error;
        }
        let commit: QueryResult;
        try {
          commit = await tx.query('COMMIT');
        } catch (error) {
          // A failed COMMIT ends the transaction; the connection is fine unless it broke.
          if (!isSqlError(error)) unusable = asError(error);
          throw new BackendError('postgres', 'commit', error);
        }
        if (commit.command !== 'COMMIT') {
          throw new BackendError(
            'postgres',
            'commit',
            new Error(
              `the transaction was rolled back (COMMIT answered ${commit.command}): a statement in it had failed`,
            ),
          );
        }
        return result;
      } finally {
        if (this.#isPool) (tx as PoolClient).release(unusable);
      }
    });
  }

  /**
   * Refuse a call made from inside the `work` of a `transaction()` of this fence that could only
   * wait for that transaction: any call on a single client (it is busy with the transaction), a
   * write of the same resource on a pool (the row lock).
   * @throws InvalidArgumentError
   */
  #checkReentry(operation: 'read' | 'write' | 'transaction', resource: string): void {
    for (const scope of runningWork.getStore() ?? []) {
      if (!scope.active || scope.db !== this.#db) continue;
      if (!this.#isPool) {
        throw new InvalidArgumentError(
          'work',
          'a callback that sends its queries on tx and does not call the fence again: on a single client that call would wait for the transaction it runs in',
          `${operation}() called inside transaction()`,
        );
      }
      if (
        operation !== 'read' &&
        scope.table === this.#sql.qualified &&
        scope.resource === resource
      ) {
        throw new InvalidArgumentError(
          'work',
          'a callback that does not fence the same resource again: another connection would wait for the row lock of the transaction it runs in',
          `${operation}() of "${resource}" called inside transaction()`,
        );
      }
    }
  }

  /** Run `fn` now on a pool; one at a time on a single client. */
  #use<T>(fn: (db: Db) => Promise<T>): Promise<T> {
    if (this.#isPool) return fn(this.#db);
    const run = this.#queue.then(() => fn(this.#db));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #currentToken(db: Db, resource: string): Promise<bigint | null> {
    const result = await query<{ token: string }>(db, 'fenced read', this.#sql.read, [resource]);
    const row = result.rows[0];
    return row === undefined ? null : BigInt(row.token);
  }

  /** Create the schema and table unless they exist; once per fence (again after a failure). */
  #ensureTable(db: Db): Promise<void> {
    this.#ready ??= this.#createTable(db).catch((error: unknown) => {
      this.#ready = undefined;
      throw error;
    });
    return this.#ready;
  }

  async #createTable(db: Db): Promise<void> {
    // Look first: CREATE … IF NOT EXISTS needs the CREATE privilege even when nothing is made.
    const present = await this.#lookUp(db);
    if (present.table) return;
    if (!present.schema) {
      await this.#createRacing(db, 'create fence schema', this.#sql.schema, 'schema');
    }
    await this.#createRacing(db, 'create fence table', this.#sql.table, 'table');
  }

  async #lookUp(db: Db): Promise<{ table: boolean; schema: boolean }> {
    const found = await query<{ table: boolean; schema: boolean }>(
      db,
      'fence table check',
      this.#sql.exists,
      [this.#sql.qualified, this.#schemaName],
    );
    return { table: found.rows[0]?.table === true, schema: found.rows[0]?.schema === true };
  }

  /**
   * Run a CREATE … IF NOT EXISTS. Losing the race to a concurrent identical CREATE is success,
   * once the object is seen to exist (the same error from a clashing object of another kind is
   * not).
   */
  async #createRacing(
    db: Db,
    operation: string,
    sql: string,
    object: 'table' | 'schema',
  ): Promise<void> {
    try {
      await db.query(sql);
    } catch (error) {
      if (CREATE_RACE_CODES.has(sqlState(error) ?? '') && (await this.#lookUp(db))[object]) return;
      throw new BackendError('postgres', operation, error);
    }
  }
}

/** The SQL of a fence on `table` (quoted and schema-qualified). */
function statements(schema: string, table: string) {
  return {
    qualified: table,
    exists: `SELECT to_regclass($1) IS NOT NULL AS "table",
       EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $2) AS "schema"`,
    schema: `CREATE SCHEMA IF NOT EXISTS ${schema}`,
    table: `CREATE TABLE IF NOT EXISTS ${table} (
  resource    text        PRIMARY KEY,
  fence_token bigint      NOT NULL CHECK (fence_token >= 0),
  value       text,
  updated_at  timestamptz NOT NULL DEFAULT now()
)`,
    // ON CONFLICT … WHERE locks the existing row even when the condition is false.
    write: `INSERT INTO ${table} AS f (resource, fence_token, value) VALUES ($1, $2::bigint, $3)
ON CONFLICT (resource) DO UPDATE
  SET fence_token = EXCLUDED.fence_token, value = EXCLUDED.value, updated_at = now()
  WHERE f.fence_token <= EXCLUDED.fence_token
RETURNING 1`,
    fence: `INSERT INTO ${table} AS f (resource, fence_token) VALUES ($1, $2::bigint)
ON CONFLICT (resource) DO UPDATE
  SET fence_token = EXCLUDED.fence_token, updated_at = now()
  WHERE f.fence_token <= EXCLUDED.fence_token
RETURNING 1`,
    // As text: a pool with an int8 → number type parser would lose digits beyond 2^53.
    read: `SELECT fence_token::text AS token, value FROM ${table} WHERE resource = $1`,
  };
}

/**
 * Release the savepoint taken before `work`. Its failure tells what `work` did to the
 * transaction: left it aborted by a failed statement (the transaction will not commit), or ended
 * it (COMMIT / ROLLBACK on `tx`, perhaps followed by a new BEGIN).
 * @throws BackendError naming the case; the caller rolls back whatever is open.
 */
async function releaseWorkSavepoint(tx: ClientBase): Promise<void> {
  try {
    await tx.query(`RELEASE SAVEPOINT ${WORK_SAVEPOINT}`);
  } catch (error) {
    if (!isSqlError(error)) throw new BackendError('postgres', 'release savepoint', error);
    if (sqlState(error) === IN_FAILED_TRANSACTION) {
      throw new BackendError(
        'postgres',
        'commit',
        new Error(
          'the transaction was rolled back: a statement in it had failed (work caught the error)',
          { cause: error },
        ),
      );
    }
    throw new BackendError(
      'postgres',
      'transaction',
      new Error(
        'the work callback ended the transaction itself (COMMIT or ROLLBACK on tx): its statements up to then were committed or rolled back by it, any it sent afterwards ran outside the fence (an open transaction of its own is rolled back); leave COMMIT and ROLLBACK to transaction()',
        { cause: error },
      ),
    );
  }
}

/** A query whose failure becomes a `BackendError` naming `operation`. */
async function query<R extends object = object>(
  db: Db,
  operation: string,
  text: string,
  values?: unknown[],
): Promise<QueryResult<R>> {
  try {
    return await db.query<R>(text, values);
  } catch (error) {
    throw new BackendError('postgres', operation, error);
  }
}

async function connect(pool: Pool): Promise<PoolClient> {
  try {
    return await pool.connect();
  } catch (error) {
    throw new BackendError('postgres', 'connect', error);
  }
}

function sqlState(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** An error PostgreSQL answered (a SQLSTATE and a severity), as opposed to a broken connection. */
function isSqlError(error: unknown): boolean {
  const severity = (error as { severity?: unknown } | null)?.severity;
  return typeof severity === 'string' && /^[0-9A-Z]{5}$/.test(sqlState(error) ?? '');
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

function checkResource(resource: unknown): void {
  validateKey(resource, 'resource');
  if ((resource as string).includes('\0')) {
    throw new InvalidArgumentError('resource', 'a string without NUL characters', resource);
  }
}

function checkIdentifier(name: unknown, argument: string): string {
  if (typeof name !== 'string' || !IDENTIFIER.test(name)) {
    throw new InvalidArgumentError(argument, 'a lower-case SQL identifier of 1 to 63 bytes', name);
  }
  return name;
}
