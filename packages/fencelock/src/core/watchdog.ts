/**
 * One scheduler for all leases of a locker: a binary min-heap of due times behind a single
 * timer, so 10,000 renewing leases cost one pending timer, not 10,000. Entries are cancelled
 * lazily (a stale heap item is skipped when it comes up).
 *
 * A task may carry slack: it may run up to `slackMs` before it is due. When the timer fires,
 * every task whose window has opened runs in the same turn, so renewals of leases granted at
 * different moments fall together and reach the engine as one pipelined or batched round trip.
 */
import { monotonicNow } from './clock.js';

/** Something the watchdog runs when it is due. `run` must never throw or reject. */
export interface WatchdogTask {
  run(): void;
}

interface HeapItem {
  readonly dueAt: number;
  /** The task may run from `dueAt - slackMs` on. */
  readonly slackMs: number;
  readonly task: WatchdogTask;
  readonly generation: number;
}

/** The scheduler. Its timer is unref'd: a held lease alone does not keep a process alive. */
export class Watchdog {
  #heap: HeapItem[] = [];
  #generation = new Map<WatchdogTask, number>();
  #timer: NodeJS.Timeout | undefined;
  #timerDueAt = Number.POSITIVE_INFINITY;
  readonly #now: () => number;

  constructor(now: () => number = monotonicNow) {
    this.#now = now;
  }

  /** Number of tasks currently scheduled. */
  get size(): number {
    return this.#generation.size;
  }

  /**
   * Run `task` at `dueAt` (monotonic ms), or up to `slackMs` earlier together with another task
   * that is due then; replaces any earlier schedule of the same task.
   */
  schedule(task: WatchdogTask, dueAt: number, slackMs = 0): void {
    const generation = (this.#generation.get(task) ?? 0) + 1;
    this.#generation.set(task, generation);
    this.#push({ dueAt, slackMs: Math.max(0, slackMs), task, generation });
    this.#arm();
  }

  /** Forget `task`; it will not run unless scheduled again. */
  cancel(task: WatchdogTask): void {
    this.#generation.delete(task);
    if (this.#generation.size === 0) {
      // The timer stays armed (it is unref'd, and finds nothing to run): one lease after another
      // then costs no timer of its own. `stop()` clears it. Emptied in place: no new array.
      this.#heap.length = 0;
    } else if (this.#heap.length > 64 && this.#heap.length > 4 * this.#generation.size) {
      // Cancelled items leave the heap only when they reach its top (a lease's renewal is due
      // ttl/3 later): without this, a steady flow of short leases grows it by thousands a second.
      this.#compact();
    }
  }

  /** Cancel everything and clear the timer. */
  stop(): void {
    this.#heap = [];
    this.#generation.clear();
    this.#disarm();
  }

  #fire = (): void => {
    this.#timer = undefined;
    this.#timerDueAt = Number.POSITIVE_INFINITY;
    const now = this.#now();
    const due: WatchdogTask[] = [];
    while (this.#heap.length > 0 && this.#heap[0]!.dueAt - this.#heap[0]!.slackMs <= now) {
      const item = this.#pop();
      if (this.#generation.get(item.task) === item.generation) {
        this.#generation.delete(item.task);
        due.push(item.task);
      }
    }
    for (const task of due) task.run();
    this.#arm();
  };

  #arm(): void {
    while (this.#heap.length > 0) {
      const top = this.#heap[0]!;
      if (this.#generation.get(top.task) === top.generation) break;
      this.#pop();
    }
    const next = this.#heap[0];
    if (next === undefined) {
      this.#disarm();
      return;
    }
    if (this.#timer !== undefined && this.#timerDueAt <= next.dueAt) return;
    this.#disarm();
    this.#timerDueAt = next.dueAt;
    this.#timer = setTimeout(this.#fire, Math.max(0, next.dueAt - this.#now()));
    this.#timer.unref();
  }

  #disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerDueAt = Number.POSITIVE_INFINITY;
  }

  /** Drop cancelled and replaced items and rebuild the heap from the live ones (O(n)). */
  #compact(): void {
    const live = this.#heap.filter((item) => this.#generation.get(item.task) === item.generation);
    // Items sorted by due time form a valid min-heap.
    live.sort((a, b) => a.dueAt - b.dueAt);
    this.#heap = live;
  }

  #push(item: HeapItem): void {
    const heap = this.#heap;
    heap.push(item);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]!.dueAt <= item.dueAt) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = item;
  }

  #pop(): HeapItem {
    const heap = this.#heap;
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const left = 2 * i + 1;
        if (left >= heap.length) break;
        const right = left + 1;
        const child = right < heap.length && heap[right]!.dueAt < heap[left]!.dueAt ? right : left;
        if (heap[child]!.dueAt >= last.dueAt) break;
        heap[i] = heap[child]!;
        i = child;
      }
      heap[i] = last;
    }
    return top;
  }
}
