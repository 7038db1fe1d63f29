/**
 * How a waiter of the SQLite store learns that its turn may have come. SQLite has no change
 * notification: the waiter watches the file's `PRAGMA data_version` (a counter that moves when
 * another connection commits) and its own connection's commits, reads its standing in the line
 * (of a lock's key, or of a semaphore) only when one of them moved, and resolves once fewer live
 * entries stand ahead of it than there are free grants: the key free and nobody ahead for a lock,
 * `ahead < permits - holders` for a semaphore (no herd: a release lets in the waiters its freed
 * grant is for, and the others keep watching). How often it reads depends on its place in the
 * line and on how long nothing changed (`watchIntervalMs`).
 */

/** What the watch reads, from the backend's connection. */
export interface LineView {
  /** False once the connection is closed. */
  isOpen(): boolean;
  /** The file's change counter (`PRAGMA data_version`): commits of other connections move it. */
  dataVersion(): bigint;
  /** Commits of this connection that can let a waiter in (they do not move `data_version`). */
  localChanges(): number;
}

/** A waiter's standing in its line, read from the backend's connection. */
export interface Standing {
  /** Grants that could be made now: 1 or 0 for a lock's key, permits not held for a semaphore. */
  readonly free: number;
  /** Live entries of the line ahead of the waiter (all of them when it has none). */
  readonly ahead: number;
}

/**
 * How long a waiter sleeps before it reads the file's `data_version` again, ms: 2 ms × (its
 * place in the line + 1) after a change (its place: how many more grants must go to those ahead
 * of it before its own), doubled for each of up to 3 unchanged reads, at most
 * 50 ms. The head sees a release within 2 ms while the key changes hands, and within 16 ms after
 * a long hold (about 60 reads a second); a waiter further back, which cannot go before those
 * ahead of it were granted, reads less often the further back it stands (64 waiters read about
 * 2,400 times a second in all, not 32,000).
 */
function watchIntervalMs(placeInLine: number, unchangedReads: number): number {
  return Math.min(50, 2 * (placeInLine + 1) * 2 ** Math.min(unchangedReads, 3));
}

/**
 * Resolve once the waiter may go (`standing()` says fewer live entries stand ahead of it than
 * grants are free), after `maxMs`, or when `signal` aborts. Never rejects: once the connection is
 * closed the wait ends at once, and after a read that fails it only runs out its time; the next
 * attempt reports the engine's error.
 */
export function watchLine(
  view: LineView,
  standing: () => Standing,
  signal: AbortSignal,
  maxMs: number,
): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const giveUpAt = performance.now() + maxMs;
    let seen: [bigint, number] | undefined;
    let placeInLine = 0;
    let unchangedReads = 0;
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const check = () => {
      if (!view.isOpen()) return done();
      const leftMs = giveUpAt - performance.now();
      try {
        const version = view.dataVersion();
        const localChanges = view.localChanges();
        if (seen === undefined || version !== seen[0] || localChanges !== seen[1]) {
          seen = [version, localChanges];
          unchangedReads = 0;
          const { free, ahead } = standing();
          if (ahead < free) return done();
          placeInLine = ahead - free;
        } else {
          unchangedReads += 1;
        }
      } catch {
        timer = setTimeout(done, Math.max(0, leftMs));
        return;
      }
      if (leftMs <= 0) return done();
      timer = setTimeout(check, Math.min(watchIntervalMs(placeInLine, unchangedReads), leftMs));
    };
    signal.addEventListener('abort', done, { once: true });
    check();
  });
}
