/**
 * What the dashboard keeps in memory: the health buckets (quantiles as Prometheus'
 * `histogram_quantile`, the 15-minute window, buckets reused as time moves), the lock history
 * (one grant told once whichever source saw it first, bounds per key and on keys) and the sign-in
 * sessions (expiry, sign-out, the cookie's attributes).
 */
import { describe, expect, it, vi } from 'vitest';
import {
  BUCKET_MS,
  HealthTimeline,
  quantileMs,
  WINDOW_MS,
} from '../../packages/cli/src/server/dashboard/health-timeline.js';
import {
  LockHistory,
  MAX_ENTRIES_PER_KEY,
  MAX_KEYS,
} from '../../packages/cli/src/server/dashboard/lock-history.js';
import {
  MAX_SESSIONS,
  SESSION_COOKIE,
  SESSION_TTL_MS,
  UiSessions,
} from '../../packages/cli/src/server/dashboard/ui-sessions.js';

const LABELS = Object.freeze({ backend: 'redis', store: 'redis://127.0.0.1:6390' });

describe('quantileMs', () => {
  const bounds = [0.01, 0.1, 1];

  it('interpolates inside the bucket the rank falls in, from 0 for the first', () => {
    // 10 samples: 4 in (0, 10 ms], 4 in (10, 100], 2 in (100, 1000].
    const counts = [4, 4, 2, 0];
    expect(quantileMs(counts, bounds, 0.2)).toBeCloseTo(5);
    expect(quantileMs(counts, bounds, 0.5)).toBeCloseTo(10 + 90 * (1 / 4));
    expect(quantileMs(counts, bounds, 0.99)).toBeCloseTo(100 + 900 * (1.9 / 2));
  });

  it('answers the highest finite bound for a rank in +Inf, null for no samples', () => {
    expect(quantileMs([0, 0, 0, 3], bounds, 0.5)).toBe(1000);
    expect(quantileMs([0, 0, 0, 0], bounds, 0.5)).toBeNull();
  });
});

describe('HealthTimeline', () => {
  it('keeps one point per 5 s bucket over 15 minutes, empty ones included', () => {
    let now = 1_000 * BUCKET_MS;
    const timeline = new HealthTimeline(() => now);
    timeline.acquire(LABELS, 'granted', 0.004);
    timeline.acquire(LABELS, 'granted', 0.2);
    timeline.acquire(LABELS, 'busy', 0);
    timeline.release(LABELS, 'released', 3);
    timeline.renew(LABELS, false);
    timeline.renew(LABELS, true);
    timeline.lost(LABELS);
    now += BUCKET_MS;
    timeline.acquire(LABELS, 'granted', 0.001);

    const [series, ...others] = timeline.series();
    expect(others).toEqual([]);
    expect(series!.store).toBe(LABELS.store);
    expect(series!.points).toHaveLength(WINDOW_MS / BUCKET_MS);
    const [older, newest] = series!.points.slice(-2);
    expect(newest!.at).toBe(now);
    expect(older).toEqual({
      at: now - BUCKET_MS,
      grantsPerSecond: 2 / 5,
      // Two waits: 4 ms in (1, 5] ms and 200 ms in (100, 250] ms; one hold of 3 s in (2.5, 5] s.
      waitP50Ms: 5,
      waitP99Ms: 100 + 150 * ((0.99 * 2 - 1) / 1),
      holdP99Ms: 2_500 + 2_500 * 0.99,
      renewFailures: 1,
      leasesLost: 1,
    });
    expect(newest).toMatchObject({ grantsPerSecond: 1 / 5, renewFailures: 0, leasesLost: 0 });
    expect(series!.points[0]).toEqual({
      at: now - WINDOW_MS + BUCKET_MS,
      grantsPerSecond: 0,
      waitP50Ms: null,
      waitP99Ms: null,
      holdP99Ms: null,
      renewFailures: 0,
      leasesLost: 0,
    });
  });

  it('forgets a bucket once the window has moved past it, and reuses its slot', () => {
    let now = 0;
    const timeline = new HealthTimeline(() => now);
    timeline.acquire(LABELS, 'granted', 0.01);
    now = WINDOW_MS; // the same ring slot, a window later
    expect(timeline.series()[0]!.points.every((p) => p.grantsPerSecond === 0)).toBe(true);
    timeline.renew(LABELS, false);
    const last = timeline.series()[0]!.points.at(-1)!;
    expect(last).toMatchObject({ at: WINDOW_MS, grantsPerSecond: 0, renewFailures: 1 });
    expect(last.waitP50Ms).toBeNull();
  });
});

describe('LockHistory', () => {
  it('tells a grant once whether an event or a listing saw it first; an end once', () => {
    let now = 1;
    const history = new LockHistory(() => now++);
    const heard: string[] = [];
    history.subscribe((key, entry) => heard.push(`${key} ${entry.event} ${entry.fencingToken}`));
    history.record('k', 'granted', 'o1', 7n);
    history.record('k', 'granted', 'o1', '7');
    history.record('k', 'released', 'o1', 7n);
    history.record('k', 'ended', 'o1', '7');
    history.record('k', 'granted', 'o2', 8n);
    history.record('k', 'lost', 'o2', 8n, 'expired');
    expect(history.of('k')).toEqual([
      { at: 1, event: 'granted', owner: 'o1', fencingToken: '7' },
      { at: 2, event: 'released', owner: 'o1', fencingToken: '7' },
      { at: 3, event: 'granted', owner: 'o2', fencingToken: '8' },
      { at: 4, event: 'lost', owner: 'o2', fencingToken: '8', reason: 'expired' },
    ]);
    expect(heard).toEqual(['k granted 7', 'k released 7', 'k granted 8', 'k lost 8']);
    expect(history.of('other')).toEqual([]);
  });

  it('puts a release or loss heard after a listing told `ended` in its place', () => {
    let now = 1;
    const history = new LockHistory(() => now++);
    history.record('k', 'granted', 'o1', 7n);
    history.record('k', 'ended', 'o1', 7n);
    history.record('k', 'released', 'o1', 7n);
    history.record('k', 'granted', 'o2', 8n);
    history.record('k', 'ended', 'o2', 8n);
    history.record('k', 'lost', 'o2', 8n, 'expired');
    history.record('k', 'ended', 'o2', 8n);
    expect(history.of('k').map((e) => `${e.event} ${e.fencingToken}`)).toEqual([
      'granted 7',
      'released 7',
      'granted 8',
      'lost 8',
    ]);
  });

  it('keeps the last MAX_ENTRIES_PER_KEY entries of a key and MAX_KEYS keys', () => {
    const history = new LockHistory(() => 0);
    for (let token = 1; token <= MAX_ENTRIES_PER_KEY + 5; token++) {
      history.record('busy', 'granted', 'o', BigInt(token));
    }
    const entries = history.of('busy');
    expect(entries).toHaveLength(MAX_ENTRIES_PER_KEY);
    expect(entries[0]!.fencingToken).toBe('6');
    for (let i = 0; i < MAX_KEYS; i++) history.record(`k${i}`, 'granted', 'o', 1n);
    // `busy` changed least recently: it went first.
    expect(history.of('busy')).toEqual([]);
    expect(history.of('k0')).toHaveLength(1);
    history.record('k1', 'ended', 'o', 1n);
    history.record('new', 'granted', 'o', 1n);
    expect(history.of('k0')).toEqual([]);
    expect(history.of('k1')).toHaveLength(2);
  });
});

describe('UiSessions', () => {
  const cookieOf = (setCookie: string) => setCookie.split(';')[0]!;

  it('opens HttpOnly, SameSite=Strict sessions scoped to /ui that expire and can be closed', () => {
    let now = 0;
    const sessions = new UiSessions(() => now);
    const setCookie = sessions.open(false);
    expect(setCookie).toMatch(
      new RegExp(
        `^${SESSION_COOKIE}=[\\w-]{43}; Max-Age=43200; Path=/ui; HttpOnly; SameSite=Strict$`,
      ),
    );
    expect(sessions.open(true)).toMatch(/; HttpOnly; Secure; SameSite=Strict$/);
    const cookie = cookieOf(setCookie);
    expect(sessions.valid(`other=1; ${cookie}`)).toBe(true);
    expect(sessions.valid(undefined)).toBe(false);
    expect(sessions.valid(`${SESSION_COOKIE}=`)).toBe(false);
    expect(sessions.valid(`${cookie}x`)).toBe(false);
    now = SESSION_TTL_MS - 1;
    expect(sessions.valid(cookie)).toBe(true);
    now = SESSION_TTL_MS;
    expect(sessions.valid(cookie)).toBe(false);

    now = 0;
    const second = cookieOf(sessions.open(false));
    expect(sessions.close(second)).toMatch(new RegExp(`^${SESSION_COOKIE}=; Max-Age=0; Path=/ui`));
    expect(sessions.valid(second)).toBe(false);
  });

  it('tells the watchers of a session once when it ends: sign-out, expiry, eviction', () => {
    vi.useFakeTimers();
    try {
      const sessions = new UiSessions();
      const ends: string[] = [];
      const watch = (cookie: string | undefined, label: string) =>
        sessions.whenEnded(cookie, () => ends.push(label));

      const signedOut = cookieOf(sessions.open(false));
      watch(signedOut, 'stream 1');
      watch(signedOut, 'stream 2');
      const stopped = watch(signedOut, 'stopped');
      stopped();
      stopped();
      sessions.close(signedOut);
      expect(ends).toEqual(['stream 1', 'stream 2']);
      // No session (a request signed by the API token), or one that ended: nothing to watch.
      watch(undefined, 'token');
      watch(signedOut, 'after sign-out');

      ends.length = 0;
      const expiring = cookieOf(sessions.open(false));
      watch(expiring, 'expiring');
      vi.advanceTimersByTime(SESSION_TTL_MS - 1);
      expect(ends).toEqual([]);
      vi.advanceTimersByTime(1);
      expect(ends).toEqual(['expiring']);
      expect(sessions.valid(expiring)).toBe(false);

      ends.length = 0;
      const oldest = cookieOf(sessions.open(false));
      watch(oldest, 'oldest');
      for (let i = 0; i < MAX_SESSIONS; i++) sessions.open(false);
      expect(ends).toEqual(['oldest']);
      expect(sessions.valid(oldest)).toBe(false);
      vi.advanceTimersByTime(SESSION_TTL_MS);
      expect(ends).toEqual(['oldest']);
      expect(vi.getTimerCount()).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});
