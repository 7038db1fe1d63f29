/**
 * The Redis keys of one lock, as the single-node and Redlock backends name them on every node.
 * They share the `{key}` hash tag, so on a Cluster they sit in one slot and a script may touch
 * them all.
 */
export interface LockKeys {
  /** The lease: `<owner>:<token>` with a PX expiry. */
  readonly lock: string;
  /** The key's last fencing token (its counter). */
  readonly fence: string;
  /** The release channel: a release names the head of the line here. */
  readonly channel: string;
  /** The line of waiters (a list on a single node, a sorted set on a Redlock node). */
  readonly queue: string;
  /** The waiters' entries: expiry (and requested TTL) by owner. */
  readonly waiters: string;
}

/** The keys of lock `key` under `prefix`. */
export function lockKeys(prefix: string, key: string): LockKeys {
  const base = `${prefix}:{${key}}`;
  return {
    lock: `${base}:lock`,
    fence: `${base}:fence`,
    channel: `${base}:released`,
    queue: `${base}:queue`,
    waiters: `${base}:waiters`,
  };
}

/**
 * The keys of a lock whose store also grants read locks: a lock's keys and its readers'
 * (`lock-line.lua` says what each holds on a single node; Redlock keeps the same keys on every
 * node, with its own scripts).
 */
export interface ReadWriteLockKeys extends LockKeys {
  /** Sorted set: reading owner -> its grant's expiry (ms, Redis `TIME`). */
  readonly readers: string;
  /** Hash: reading owner -> its grant's fencing token. */
  readonly readerTokens: string;
}

/** The keys of lock `key` under `prefix`, its readers' included. */
export function readWriteLockKeys(prefix: string, key: string): ReadWriteLockKeys {
  const keys = lockKeys(prefix, key);
  const base = `${prefix}:{${key}}`;
  return { ...keys, readers: `${base}:readers`, readerTokens: `${base}:reader-tokens` };
}

/**
 * The keys of a lock of the single-node backend (one node, Sentinel, Cluster): its read-write
 * lock's, and the writer's lock-delay.
 */
export interface RedisLockKeys extends ReadWriteLockKeys {
  /**
   * `<D>` (ms) of the writer's grant made with a lock-delay, with a PX expiry of the grant's
   * remaining TTL + D (set with the grant, moved by its renewals, deleted by its live release):
   * once the grant ends without a release it outlives it by D, and nobody is granted the lock
   * meanwhile (lock-line.lua).
   */
  readonly delay: string;
}

/** The keys of lock `key` under `prefix` on the single-node backend, its delay key included. */
export function redisLockKeys(prefix: string, key: string): RedisLockKeys {
  return { ...readWriteLockKeys(prefix, key), delay: `${prefix}:{${key}}:delay` };
}

/**
 * The Redis keys of one semaphore (`semaphore-line.lua` says what each holds). They share the
 * `{key}` hash tag of the lock of the same key, under names of their own: a semaphore and a lock
 * of one key are different objects.
 */
export interface SemaphoreKeys {
  readonly holders: string;
  readonly tokens: string;
  readonly permits: string;
  readonly queue: string;
  readonly waiters: string;
  readonly fence: string;
  readonly channel: string;
}

/** The keys of semaphore `key` under `prefix`. */
export function semaphoreKeys(prefix: string, key: string): SemaphoreKeys {
  const base = `${prefix}:{${key}}:semaphore`;
  return {
    holders: `${base}:holders`,
    tokens: `${base}:tokens`,
    permits: `${base}:permits`,
    queue: `${base}:queue`,
    waiters: `${base}:waiters`,
    fence: `${base}:fence`,
    channel: `${base}:released`,
  };
}

/**
 * The Redis keys of one leader election (`election-line.lua` says what each holds). They share
 * the `{key}` hash tag of the lock and the semaphore of the same key, under names of their own
 * (none ends with a name `list` takes for a lock or a semaphore): an election is a third object
 * of the key. Only `term` never expires.
 */
export interface ElectionKeys {
  /** `<owner>:<term>:<value>` of the leader, with a PX expiry. */
  readonly leader: string;
  /** The election's last term: its fencing counter, without expiry. */
  readonly term: string;
  /** List of waiting candidates, head first. */
  readonly queue: string;
  /** Hash of the candidates' entries: expiry, requested TTL and value by owner. */
  readonly waiters: string;
  /** Pub/sub channel of the election's changes and hand-overs. */
  readonly channel: string;
  /** The leadership's lock-delay: its D in ms, with a PX expiry of the grant's TTL + D. */
  readonly delay: string;
}

/** The keys of election `key` under `prefix`. */
export function electionKeys(prefix: string, key: string): ElectionKeys {
  const base = `${prefix}:{${key}}:election`;
  return {
    leader: `${base}:leader`,
    term: `${base}:term`,
    queue: `${base}:queue`,
    waiters: `${base}:waiters`,
    channel: `${base}:changed`,
    delay: `${base}:delay`,
  };
}
