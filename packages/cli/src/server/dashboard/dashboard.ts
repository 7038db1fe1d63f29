/**
 * What the dashboard keeps while the sidecar runs: sign-in sessions, each lock's recent history,
 * the live listings pages watch, and the health buckets. Made by the sidecar with its locker;
 * closed with it (no timer or subscription outlives `close()`).
 */
import type { Locker } from 'fencelock';
import { HealthTimeline } from './health-timeline.js';
import { LockHistory } from './lock-history.js';
import { LockWatch } from './lock-watch.js';
import { UiSessions } from './ui-sessions.js';

/** Event streams the dashboard serves at once (its pages' streams and followed elections). */
export const MAX_DASHBOARD_STREAMS = 64;
/** Prefixes it lists at once (each one every `WATCH_INTERVAL_MS`, whatever the pages on it). */
export const MAX_WATCHED_PREFIXES = 16;

/** What `createDashboard` keeps for the routes of routes/dashboard.ts. */
export interface Dashboard {
  readonly sessions: UiSessions;
  readonly history: LockHistory;
  readonly watch: LockWatch;
  readonly timeline: HealthTimeline;
  /**
   * Count a new event stream, watching `prefix` when given.
   * @returns the function that ends its count (idempotent), or why the stream is refused: too
   *   many streams, or a new prefix past `MAX_WATCHED_PREFIXES`.
   */
  openStream(prefix?: string): (() => void) | 'streams' | 'prefixes';
  close(): void;
}

/** Start recording for the dashboard of the sidecar over `locker`. */
export function createDashboard(locker: Locker, shutdown: AbortSignal): Dashboard {
  const history = new LockHistory();
  const timeline = new HealthTimeline();
  const watch = new LockWatch(locker, history, shutdown);
  const stops = [history.follow(locker.name), timeline.start()];
  let streams = 0;
  return {
    sessions: new UiSessions(),
    history,
    watch,
    timeline,
    openStream(prefix) {
      if (streams >= MAX_DASHBOARD_STREAMS) return 'streams';
      if (prefix !== undefined && !watch.has(prefix) && watch.size >= MAX_WATCHED_PREFIXES) {
        return 'prefixes';
      }
      streams++;
      let open = true;
      return () => {
        if (open) streams--;
        open = false;
      };
    },
    close() {
      watch.close();
      for (const stop of stops) stop();
    },
  };
}
