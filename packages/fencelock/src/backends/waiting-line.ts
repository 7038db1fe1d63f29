/**
 * The timing of the waiting lines that backends keep in their engine (Redis, Redlock, PostgreSQL lease
 * mode, SQLite): one FIFO of waiters per key, each entry living a while past its owner's latest
 * attempt, so that a waiter that vanished without withdrawing blocks the line for a bounded time.
 * Backends whose line lives in a session (etcd, ZooKeeper) do not use these.
 */

/**
 * How long a waiter's entry in a key's line lives after its owner's latest attempt, ms: a waiter
 * that vanished without withdrawing (a crashed process) blocks the line this long at most.
 */
export const QUEUE_ENTRY_TTL_MS = 2_000;

/**
 * Longest wait before a waiter attempts again, ms (the `recheckAfterMs` of its not-granted
 * answers): refreshes its line entry well within `QUEUE_ENTRY_TTL_MS`, and bounds the delay a
 * lost or missed notification can cause.
 */
export const LINE_RECHECK_MS = 500;

/**
 * How long a waiter's entry in a key's line lives on a Redlock node after its owner's latest
 * attempt there, ms. A live waiter attempts at least every `LINE_RECHECK_MS` (plus one vote), and
 * an entry that lapsed takes its place again at its owner's next attempt (Redlock's line is
 * ordered by ticket), so a short life costs little. It bounds how long a waiter that cannot reach
 * a node any more (though it reaches the others, or it gave up and its withdrawal never got
 * there) stands at the head of that node's line: several such heads on different nodes would
 * leave nobody the head on a majority.
 */
export const REDLOCK_ENTRY_TTL_MS = 2 * LINE_RECHECK_MS;
