/**
 * The fenced register of the torture harness (the checker's oracle 1, see checker.ts): the
 * protected resource, kept in a PostgreSQL server that no fault touches. Every write is one
 * statement that accepts it only when its token is among the `permits` highest tokens written so
 * far, i.e. fewer than `permits` higher tokens have written before it, and logs it, accepted or
 * not, with the writer. For a lock (`permits` 1) that is "not older than the highest accepted"
 * (`>=`, so a holder may write several times with its own token). For a semaphore of N permits
 * it lets at most N holders in at once, since at most N permits are valid at once and every
 * later grant has a higher token; it keeps N holders inside, not necessarily the N valid ones (a
 * valid holder outrun by N later writers is refused, a lapsed one still among the N highest is
 * not).
 *
 * This SQL is the harness's own and deliberately independent of fencelock's guards
 * (`fencelock/fencing`): a bug there must not hide a bug here. `fenced: false` is the broken
 * variant of the self-test: every write is accepted, and only the offline check of the log can
 * tell the stale ones.
 */
import pg from 'pg';

/** One logged write. */
export interface WriteRecord {
  /** Its place in the order the register applied the writes: 1, 2, 3, … */
  readonly seq: number;
  readonly writer: string;
  readonly token: bigint;
  readonly accepted: boolean;
}

export class FencedRegister {
  readonly #pool: pg.Pool;
  readonly #schema: string;
  readonly #name: string;
  readonly #permits: number;

  /**
   * @param url `postgres://` URL of the register server.
   * @param schema a lower-case identifier of this run's own schema.
   * @param permits how many holders may write at once: 1 for a lock, N for a semaphore of N
   *   permits (stored with the resource row by `create`; writers need not pass it).
   * @param name the resource's name (one per run).
   */
  constructor(url: string, schema: string, permits = 1, name = 'resource') {
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) throw new Error(`bad schema name ${schema}`);
    if (!Number.isInteger(permits) || permits < 1) throw new Error(`bad permits ${permits}`);
    this.#pool = new pg.Pool({ connectionString: url, max: 2 });
    this.#pool.on('error', () => undefined);
    this.#schema = schema;
    this.#permits = permits;
    this.#name = name;
  }

  /**
   * Create this run's tables and the resource row: value 0, no token written yet (`top_tokens`,
   * the `permits` highest tokens written, highest first), the permit count, no write applied yet
   * (`writes`, which numbers the log).
   */
  async create(): Promise<void> {
    const s = `"${this.#schema}"`;
    await this.#pool.query(`CREATE SCHEMA IF NOT EXISTS ${s};
CREATE TABLE IF NOT EXISTS ${s}.fenced_resource (
  name text PRIMARY KEY, max_token bigint NOT NULL, value bigint NOT NULL,
  permits integer NOT NULL, top_tokens bigint[] NOT NULL, writes bigint NOT NULL,
  last_accepted boolean);
CREATE TABLE IF NOT EXISTS ${s}.write_log (
  seq bigint PRIMARY KEY, name text NOT NULL, token bigint NOT NULL, writer text NOT NULL,
  accepted boolean NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
INSERT INTO ${s}.fenced_resource VALUES ('${this.#name}', 0, 0, ${this.#permits}, '{}', 0, NULL)
  ON CONFLICT DO NOTHING;`);
  }

  /**
   * Write with `token`. Fenced: accepted only when fewer than `permits` of the highest tokens
   * written so far are higher than `token`. Unfenced: always accepted. Either way `top_tokens`
   * keeps the `permits` highest tokens accepted. The UPDATE's row lock serialises writers, and
   * the write's place in the log (`seq`) is counted under it, so the log's order is the order of
   * the decisions (a sequence's `nextval` is not: it is taken before the lock, and a writer that
   * loses the race for the row after taking it is logged before one that won). Resolves to
   * whether it was accepted.
   */
  async write(token: bigint, writer: string, fenced: boolean): Promise<boolean> {
    const s = `"${this.#schema}"`;
    // Evaluated on the row as the lock found it (SET expressions see the old values).
    const accept = fenced
      ? '((SELECT count(*) FROM unnest(top_tokens) AS t(token) WHERE t.token > $2::bigint) < permits)'
      : 'true';
    const { rows } = await this.#pool.query<{ accepted: boolean }>(
      `WITH upd AS (
  UPDATE ${s}.fenced_resource
  SET writes = writes + 1,
    last_accepted = ${accept},
    max_token = CASE WHEN ${accept} THEN greatest(max_token, $2::bigint) ELSE max_token END,
    top_tokens = CASE WHEN ${accept} THEN (ARRAY(
      SELECT DISTINCT t.token FROM unnest(top_tokens || $2::bigint) AS t(token)
      ORDER BY t.token DESC
    ))[1:permits] ELSE top_tokens END,
    value = value + CASE WHEN ${accept} THEN 1 ELSE 0 END
  WHERE name = $1 RETURNING writes, last_accepted
)
INSERT INTO ${s}.write_log (seq, name, token, writer, accepted)
SELECT writes, $1, $2::bigint, $3, last_accepted FROM upd RETURNING accepted`,
      [this.#name, token.toString(), writer],
    );
    return rows[0]!.accepted;
  }

  /** The write log in apply order, and the resource's value (for lost-increment checks). */
  async read(): Promise<{ writes: WriteRecord[]; value: bigint }> {
    const s = `"${this.#schema}"`;
    const log = await this.#pool.query<{
      seq: string;
      writer: string;
      token: string;
      accepted: boolean;
    }>(`SELECT seq, writer, token::text AS token, accepted FROM ${s}.write_log ORDER BY seq`);
    const value = await this.#pool.query<{ value: string }>(
      `SELECT value::text AS value FROM ${s}.fenced_resource WHERE name = $1`,
      [this.#name],
    );
    return {
      writes: log.rows.map((r) => ({
        seq: Number(r.seq),
        writer: r.writer,
        token: BigInt(r.token),
        accepted: r.accepted,
      })),
      value: BigInt(value.rows[0]?.value ?? '0'),
    };
  }

  /** Drop this run's schema. */
  async drop(): Promise<void> {
    await this.#pool.query(`DROP SCHEMA IF EXISTS "${this.#schema}" CASCADE`);
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
