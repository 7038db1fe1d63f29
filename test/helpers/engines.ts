/**
 * Where the engines started by `scripts/services.sh` listen. Keep ports in step with it.
 */
export const REDIS_PORT = Number(process.env.FENCELOCK_REDIS_PORT ?? 6390);
export const REDIS_URL = `redis://127.0.0.1:${REDIS_PORT}`;

/**
 * Member n (1..3) of the etcd cluster serves clients on CLIENT_PORT_BASE+n and peers on
 * PEER_PORT_BASE+n. `||`, like the script's `${VAR:-default}`: an empty variable means the default.
 */
export const ETCD_CLIENT_PORT_BASE = Number(process.env.FENCELOCK_ETCD_CLIENT_PORT_BASE || 23790);
export const ETCD_PEER_PORT_BASE = Number(process.env.FENCELOCK_ETCD_PEER_PORT_BASE || 23800);
/** Client URLs of etcd1..etcd3: `http://127.0.0.1:23791` … `:23793` by default. */
export const ETCD_ENDPOINTS: readonly string[] = [1, 2, 3].map(
  (n) => `http://127.0.0.1:${ETCD_CLIENT_PORT_BASE + n}`,
);

/**
 * Server n (1..3) of the ZooKeeper ensemble serves clients on ZK_CLIENT_PORT_BASE+n−1
 * (21811 … 21813 by default), as in `scripts/services.sh`.
 */
export const ZK_CLIENT_PORT_BASE = Number(process.env.FENCELOCK_ZK_CLIENT_PORT_BASE || 21811);
/** `127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813` (a `zk://` host list). */
export const ZK_HOSTS = [1, 2, 3].map((n) => `127.0.0.1:${ZK_CLIENT_PORT_BASE + n - 1}`).join(',');
/**
 * How often the ensemble's leader deletes empty container nodes (`znode.container.checkIntervalMs`,
 * 1000 ms in `scripts/services.sh`; ZooKeeper's default is 60000), ms.
 */
export const ZK_CONTAINER_CHECK_MS = Number(process.env.FENCELOCK_ZK_CONTAINER_CHECK_MS || 1000);

/** Redlock node n (1..5) of `scripts/services.sh` listens on REDLOCK_PORT_BASE+n (6401 … 6405). */
export const REDLOCK_PORT_BASE = Number(process.env.FENCELOCK_REDLOCK_PORT_BASE || 6400);
/** `redis://127.0.0.1:6401` … `:6405`. */
export const REDLOCK_NODE_URLS: readonly string[] = [1, 2, 3, 4, 5].map(
  (n) => `redis://127.0.0.1:${REDLOCK_PORT_BASE + n}`,
);

/** The Sentinel topology of `scripts/services.sh up sentinel`: primary, replica, 3 Sentinels. */
export const SENTINEL_DATA_PORT_BASE = Number(
  process.env.FENCELOCK_SENTINEL_DATA_PORT_BASE || 6410,
);
export const SENTINEL_PORT_BASE = Number(process.env.FENCELOCK_SENTINEL_PORT_BASE || 26410);
/** `redis+sentinel://127.0.0.1:26411,127.0.0.1:26412,127.0.0.1:26413/fencelock`. */
export const SENTINEL_URL = `redis+sentinel://${[1, 2, 3]
  .map((n) => `127.0.0.1:${SENTINEL_PORT_BASE + n}`)
  .join(',')}/fencelock`;

/** The Redis Cluster of `scripts/services.sh up cluster`: three primaries on CLUSTER_PORT_BASE+n. */
export const CLUSTER_PORT_BASE = Number(process.env.FENCELOCK_CLUSTER_PORT_BASE || 6420);
/** `redis+cluster://127.0.0.1:6421,127.0.0.1:6422,127.0.0.1:6423`. */
export const CLUSTER_URL = `redis+cluster://${[1, 2, 3]
  .map((n) => `127.0.0.1:${CLUSTER_PORT_BASE + n}`)
  .join(',')}`;

/** The PostgreSQL server of `scripts/services.sh up postgres` (user and database `fencelock`). */
export const PG_PORT = Number(process.env.FENCELOCK_PG_PORT || 25432);
/** `postgres://fencelock@127.0.0.1:25432/fencelock`. */
export const PG_URL = `postgres://fencelock@127.0.0.1:${PG_PORT}/fencelock`;

/**
 * The second PostgreSQL server of `scripts/services.sh up register`, which no fault touches: the
 * torture harness's fenced register lives there (database `register`).
 */
export const REGISTER_PORT = Number(process.env.FENCELOCK_REGISTER_PORT || 25433);
/** `postgres://fencelock@127.0.0.1:25433/register`. */
export const REGISTER_URL = `postgres://fencelock@127.0.0.1:${REGISTER_PORT}/register`;

/**
 * PgBouncer of `scripts/services.sh up pgbouncer`: transaction mode, database `fencelock`
 * forwarded to the PostgreSQL server above.
 */
export const PGBOUNCER_PORT = Number(process.env.FENCELOCK_PGBOUNCER_PORT || 25434);
/** `postgres://fencelock@127.0.0.1:25434/fencelock`. */
export const PGBOUNCER_URL = `postgres://fencelock@127.0.0.1:${PGBOUNCER_PORT}/fencelock`;

/**
 * The second PgBouncer of `scripts/services.sh up pgbouncer`: transaction mode too, with
 * `ignore_startup_parameters = extra_float_digits,statement_timeout`, so it lets in a client that
 * sends `statement_timeout` (and drops the setting) instead of refusing it. Its port defaults to
 * PGBOUNCER_PORT + 1, as in the script.
 */
export const PGBOUNCER_IGNORING_PORT = Number(
  process.env.FENCELOCK_PGBOUNCER_IGNORING_PORT || PGBOUNCER_PORT + 1,
);
/** `postgres://fencelock@127.0.0.1:25435/fencelock`. */
export const PGBOUNCER_IGNORING_URL = `postgres://fencelock@127.0.0.1:${PGBOUNCER_IGNORING_PORT}/fencelock`;
