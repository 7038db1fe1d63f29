/**
 * The dashboard leaves nothing running: `createSidecar` in this process over SQLite, with the
 * store's `list` counted and the stream timers tracked. A page that goes away stops its prefix's
 * listings and its timers; `close()` ends the streams still open, and after it nothing lists the
 * store and no dashboard timer is left.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WATCH_INTERVAL_MS } from '../../../packages/cli/src/server/dashboard/lock-watch.js';
import { HEALTH_PUSH_MS } from '../../../packages/cli/src/server/routes/dashboard.js';
import { SSE_HEARTBEAT_MS } from '../../../packages/cli/src/server/routes/event-stream.js';
import { sqliteHarness } from '../handed/stores.js';
import { openEvents, sleep, startInProcess, trackIntervals, uniqueKey } from './support.js';

afterEach(() => {
  vi.restoreAllMocks();
});

describe('dashboard shutdown', () => {
  it('a page that leaves stops its listings and timers; close ends the rest', async () => {
    // The streams' interval timers (health pushes, heartbeats) still running.
    const timersLeft = trackIntervals([HEALTH_PUSH_MS, SSE_HEARTBEAT_MS]);

    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}` });
    try {
      const backend = await sidecar.locker.backend();
      const list = backend.list!.bind(backend);
      let listings = 0;
      backend.list = (request) => {
        listings++;
        return list(request);
      };
      const prefix = uniqueKey('dash-shutdown');
      const first = await openEvents(url, `/ui/events?prefix=${prefix}`);
      await expect.poll(() => listings).toBeGreaterThanOrEqual(2);
      expect(timersLeft()).toBe(2);
      await first.close();
      await expect.poll(timersLeft).toBe(0);
      // At most one listing was under way when the page left; none after it.
      await sleep(WATCH_INTERVAL_MS);
      const after = listings;
      await sleep(3 * WATCH_INTERVAL_MS);
      expect(listings).toBe(after);

      const second = await openEvents(url, `/ui/events?prefix=${prefix}`);
      const election = await openEvents(url, `/ui/api/elections/observe?name=${prefix}`);
      await expect.poll(() => second.named.some((e) => e.event === 'locks')).toBe(true);
      await expect.poll(() => election.events.length).toBe(1);
      expect(election.events[0]).toEqual({ name: prefix, leader: null });
      await sidecar.close();
      await second.ended;
      await election.ended;
      expect(timersLeft()).toBe(0);
      const atClose = listings;
      await sleep(3 * WATCH_INTERVAL_MS);
      expect(listings).toBe(atClose);
    } finally {
      await sidecar.close();
      await harness.close();
    }
  });
});
