/**
 * The dashboard leaves nothing running and holds nothing without bound: `createSidecar` in this
 * process over SQLite, with the store's `list` counted and the stream timers tracked. A page that
 * goes away stops its prefix's listings and its timers, also when its stream was one of several
 * pipelined on one connection; `close()` ends the streams still open, and after it nothing lists
 * the store and no dashboard timer is left. A client that stops reading makes the sidecar skip
 * listings, not buffer them.
 */

import type { ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { WATCH_INTERVAL_MS } from '../../../packages/cli/src/server/dashboard/lock-watch.js';
import type { Sidecar } from '../../../packages/cli/src/server/index.js';
import { HEALTH_PUSH_MS } from '../../../packages/cli/src/server/routes/dashboard.js';
import {
  MAX_BUFFERED_BYTES,
  SSE_HEARTBEAT_MS,
} from '../../../packages/cli/src/server/routes/event-stream.js';
import { createLocker } from '../../../packages/fencelock/src/index.js';
import { sqliteHarness } from '../handed/stores.js';
import { openEvents, sleep, startInProcess, trackIntervals, uniqueKey } from './support.js';

afterEach(() => {
  vi.restoreAllMocks();
});

/** Count the listings the sidecar asks its store for from now on. @returns the count so far. */
async function countListings(sidecar: Sidecar): Promise<() => number> {
  const backend = await sidecar.locker.backend();
  const list = backend.list!.bind(backend);
  let listings = 0;
  backend.list = (request) => {
    listings++;
    return list(request);
  };
  return () => listings;
}

describe('dashboard shutdown', () => {
  it('a page that leaves stops its listings and timers; close ends the rest', async () => {
    // The streams' interval timers (health pushes, heartbeats) still running.
    const timersLeft = trackIntervals([HEALTH_PUSH_MS, SSE_HEARTBEAT_MS]);

    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}` });
    try {
      const listings = await countListings(sidecar);
      const prefix = uniqueKey('dash-shutdown');
      const first = await openEvents(url, `/ui/events?prefix=${prefix}`);
      await expect.poll(() => listings()).toBeGreaterThanOrEqual(2);
      expect(timersLeft()).toBe(2);
      await first.close();
      await expect.poll(timersLeft).toBe(0);
      // At most one listing was under way when the page left; none after it.
      await sleep(WATCH_INTERVAL_MS);
      const after = listings();
      await sleep(3 * WATCH_INTERVAL_MS);
      expect(listings()).toBe(after);

      const second = await openEvents(url, `/ui/events?prefix=${prefix}`);
      const election = await openEvents(url, `/ui/api/elections/observe?name=${prefix}`);
      await expect.poll(() => second.named.some((e) => e.event === 'locks')).toBe(true);
      await expect.poll(() => election.events.length).toBe(1);
      expect(election.events[0]).toEqual({ name: prefix, leader: null });
      await sidecar.close();
      await second.ended;
      await election.ended;
      expect(timersLeft()).toBe(0);
      const atClose = listings();
      await sleep(3 * WATCH_INTERVAL_MS);
      expect(listings()).toBe(atClose);
    } finally {
      await sidecar.close();
      await harness.close();
    }
  });

  it('a connection with pipelined streams (dashboard, election observers) that goes away frees every one of them', async () => {
    const timersLeft = trackIntervals([HEALTH_PUSH_MS, SSE_HEARTBEAT_MS]);
    const harness = sqliteHarness();
    const { sidecar, url } = await startInProcess({ store: `sqlite:${harness.db.name}` });
    try {
      const listings = await countListings(sidecar);
      const { port } = new URL(url);
      const socket = connect(Number(port), '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      const prefix = uniqueKey('dash-pipelined');
      const get = (path: string) => `GET ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`;
      const events = get(`/ui/events?prefix=${prefix}`);
      const observe = get(`/v1/elections/${prefix}/observe`);
      socket.write(events + observe + events + observe);
      await expect.poll(() => listings()).toBeGreaterThanOrEqual(2);
      // Two dashboard streams (health push and heartbeat each) and two observers (heartbeat).
      await expect.poll(timersLeft).toBe(6);
      socket.destroy();
      await expect.poll(timersLeft).toBe(0);
      await sleep(WATCH_INTERVAL_MS);
      const after = listings();
      await sleep(3 * WATCH_INTERVAL_MS);
      expect(listings()).toBe(after);
      // All 64 streams are there to be had again.
      const streams = await Promise.all(
        Array.from({ length: 64 }, () => openEvents(url, `/ui/events?prefix=${prefix}`)),
      );
      expect(streams.map((s) => s.response.status)).toEqual(Array(64).fill(200));
      await Promise.all(streams.map((s) => s.close()));
    } finally {
      await sidecar.close();
      await harness.close();
    }
  });

  it('skips listings a client has not read instead of buffering them', async () => {
    const harness = sqliteHarness();
    const store = `sqlite:${harness.db.name}`;
    const { sidecar, url } = await startInProcess({ store });
    const locker = createLocker(store);
    try {
      // 500 held keys of about 1,000 bytes: a listing of some 600 kB, sent every 500 ms.
      const prefix = uniqueKey('dash-slow');
      for (let i = 0; i < 500; i++) {
        await locker.acquire(`${prefix}:${String(i).padStart(900, '0')}`, { ttlMs: 60_000 });
      }
      let answer: ServerResponse | undefined;
      sidecar.app.server.on('request', (request, response) => {
        if (request.url?.startsWith('/ui/events')) answer = response;
      });
      const { port } = new URL(url);
      const socket = connect(Number(port), '127.0.0.1');
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(`GET /ui/events?prefix=${prefix} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n`);
      socket.pause();
      // 16 listings go by; a stream that wrote them all would hold megabytes.
      await sleep(16 * WATCH_INTERVAL_MS);
      expect(answer).toBeDefined();
      // Still open (not cut off as a stream past MAX_BUFFERED_BYTES would be), and bounded.
      expect(answer!.destroyed).toBe(false);
      expect(answer!.writableLength).toBeLessThan(MAX_BUFFERED_BYTES);
      socket.destroy();
    } finally {
      await locker.close();
      await sidecar.close();
      await harness.close();
    }
  });
});
