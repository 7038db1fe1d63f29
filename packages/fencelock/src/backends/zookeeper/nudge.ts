/**
 * Wakes a ZooKeeper server that sits on a request: when a session has requests out and a whole
 * `NUDGE_AFTER_MS` interval of its timer passed without an answer (so 100 to 200 ms after the
 * last answer), one cheap read is sent on the same connection.
 *
 * ZooKeeper servers 3.6.0 to 3.8.0 (Debian 12 ships 3.8.0) can miss a wakeup between the thread
 * that logs a transaction and the one that commits it: the committed request, and every later
 * request of its session, then waits until some other request reaches that server
 * (ZOOKEEPER-4537, fixed in 3.7.1 and 3.8.1). The Java client's pings are such requests, sent
 * every third of the session timeout whatever is outstanding. The C client under the `zookeeper`
 * package sends no ping while a request is outstanding, so without this the request would wait
 * for the session's heartbeat (a third of the timeout, 10 s for a 30 s TTL) and fail first at its
 * own bound. Measured here against Debian's 3.8.0: about one grant in 5,000 of a sequential
 * acquire/release loop stalled; with the nudge, each such stall lasts one or two intervals.
 *
 * A session whose answers keep coming is never nudged, and at most one nudge is sent per
 * `NUDGE_AFTER_MS` while it is silent.
 */

/** How long a session with requests out may go without any answer before it is nudged, ms. */
export const NUDGE_AFTER_MS = 100;

/** Call once the request is answered (`true`), or abandoned without an answer (`false`). */
export type RequestDone = (answered: boolean) => void;

/** Watches one session's outstanding requests and calls `send` when they all go unanswered. */
export class StallNudge {
  readonly #send: () => void;
  #outstanding = 0;
  #answers = 0;
  /** `#answers` when the timer was armed: unchanged when it fires means no progress. */
  #answersAtArm = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  /** `send` issues the nudge (one cheap read); it must not throw. */
  constructor(send: () => void) {
    this.#send = send;
  }

  /** A request went out. @returns its `RequestDone` (idempotent). */
  begin(): RequestDone {
    this.#outstanding += 1;
    this.#arm();
    let done = false;
    return (answered) => {
      if (done) return;
      done = true;
      this.#outstanding -= 1;
      if (answered) this.#answers += 1;
    };
  }

  /** No more nudges (the session ended). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  #arm(): void {
    if (this.#timer !== undefined || this.#stopped) return;
    this.#answersAtArm = this.#answers;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (this.#outstanding === 0) return;
      if (this.#answers === this.#answersAtArm) this.#send();
      this.#arm();
    }, NUDGE_AFTER_MS);
    this.#timer.unref();
  }
}
