/**
 * The deadlines of the commands in flight on one Redis connection, behind one timer. ioredis'
 * `commandTimeout` arms and clears a timer per command (and deletes a property of the command,
 * which sends its objects to dictionary mode); measured on the bench's uncontended pairs that
 * cost about a quarter of the client's CPU. Every command of a connection has the same timeout,
 * so deadlines come due in the order the commands were sent: they wait in a FIFO list whose
 * head expires first, and the one timer, armed for the head, is re-armed only when it fires.
 * A command that timed out fails with ioredis' own message (`Command timed out`), which
 * `unreachable.ts` recognises; its late answer is dropped.
 */
import { monotonicNow } from '../../core/clock.js';

/** One command in flight: its deadline (monotonic ms) and how to fail it. */
interface InFlight {
  readonly deadline: number;
  readonly fail: (error: Error) => void;
  next: InFlight | undefined;
  prev: InFlight | undefined;
  /** Still in the list (neither answered nor timed out). */
  linked: boolean;
}

/** The deadlines of one connection. Its timer is unref'd: it keeps no process alive. */
export class CommandDeadlines {
  readonly #timeoutMs: number;
  #head: InFlight | undefined;
  #tail: InFlight | undefined;
  #timer: NodeJS.Timeout | undefined;

  /** @param timeoutMs how long a command may take, ms. */
  constructor(timeoutMs: number) {
    this.#timeoutMs = timeoutMs;
  }

  /**
   * `pending`'s outcome, or a rejection with `Error('Command timed out')` once `timeoutMs` has
   * passed; an error of `pending` goes through `mapError` first.
   */
  bound<T>(pending: Promise<T>, mapError: (error: unknown) => unknown): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const entry: InFlight = {
        deadline: monotonicNow() + this.#timeoutMs,
        fail: (error) => reject(mapError(error)),
        next: undefined,
        prev: this.#tail,
        linked: true,
      };
      if (this.#tail === undefined) this.#head = entry;
      else this.#tail.next = entry;
      this.#tail = entry;
      if (this.#timer === undefined) this.#arm(this.#timeoutMs);
      pending.then(
        (value) => {
          this.#unlink(entry);
          resolve(value);
        },
        (error: unknown) => {
          this.#unlink(entry);
          reject(mapError(error));
        },
      );
    });
  }

  /**
   * Clear the timer and forget the deadlines (the connection closed: closing its client fails the
   * commands still in flight).
   */
  clear(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    while (this.#head !== undefined) this.#unlink(this.#head);
  }

  #arm(delayMs: number): void {
    this.#timer = setTimeout(this.#fire, Math.max(0, delayMs));
    this.#timer.unref();
  }

  #fire = (): void => {
    this.#timer = undefined;
    const now = monotonicNow();
    while (this.#head !== undefined && this.#head.deadline <= now) {
      const expired = this.#head;
      this.#unlink(expired);
      expired.fail(new Error('Command timed out'));
    }
    if (this.#head !== undefined) this.#arm(this.#head.deadline - now);
  };

  #unlink(entry: InFlight): void {
    if (!entry.linked) return;
    entry.linked = false;
    if (entry.prev === undefined) this.#head = entry.next;
    else entry.prev.next = entry.next;
    if (entry.next === undefined) this.#tail = entry.prev;
    else entry.next.prev = entry.prev;
  }
}
