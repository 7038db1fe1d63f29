/**
 * The clean-up of rows that no release deleted (holders that crashed or lost their connection):
 * PostgreSQL expires nothing by itself, so every open backend runs its sweep statement with its
 * first attempt and then every `intervalMs`, in the background (an unref'd timer: it never keeps
 * the process alive). One sweep runs at a time per backend; a sweep repeats its statement while
 * each run reports a full batch, so a backlog goes in bounded statements without waiting for the
 * next interval. Errors are dropped: the next interval tries again.
 */
export class Sweeper {
  readonly #sweepBatch: () => Promise<boolean>;
  readonly #intervalMs: number;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #stopped = false;

  /**
   * @param sweepBatch runs one bounded statement; resolves true when it may have left more to do.
   * @param intervalMs time between sweeps, ms.
   */
  constructor(sweepBatch: () => Promise<boolean>, intervalMs: number) {
    this.#sweepBatch = sweepBatch;
    this.#intervalMs = intervalMs;
  }

  /** Sweep now and every `intervalMs` from now on, until `stop()`. Later calls do nothing. */
  start(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.#sweep(), this.#intervalMs);
    this.#timer.unref();
    this.#sweep();
  }

  /** Stop the timer and wait for a sweep under way (it ends after its current statement). */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    await this.#running;
  }

  #sweep(): void {
    if (this.#running !== undefined || this.#stopped) return;
    this.#running = (async () => {
      while (!this.#stopped && (await this.#sweepBatch())) {
        // Another full batch: go on.
      }
    })()
      .catch(() => undefined)
      .finally(() => {
        this.#running = undefined;
      });
  }
}
