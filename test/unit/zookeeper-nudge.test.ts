/**
 * StallNudge (backends/zookeeper/nudge.ts): when a session's requests go unanswered for
 * NUDGE_AFTER_MS it sends one cheap read, at most one per interval; a session whose answers keep
 * coming, or that has nothing out, is never nudged.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  NUDGE_AFTER_MS,
  StallNudge,
} from '../../packages/fencelock/src/backends/zookeeper/nudge.js';

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('StallNudge', () => {
  it('nudges once per interval while every outstanding request goes unanswered', () => {
    const send = vi.fn();
    const nudge = new StallNudge(send);
    const done = nudge.begin();
    vi.advanceTimersByTime(NUDGE_AFTER_MS - 1);
    expect(send).not.toHaveBeenCalled();
    vi.advanceTimersByTime(1);
    expect(send).toHaveBeenCalledTimes(1);
    vi.advanceTimersByTime(NUDGE_AFTER_MS * 3);
    expect(send).toHaveBeenCalledTimes(4);
    done(true);
    vi.advanceTimersByTime(NUDGE_AFTER_MS * 5);
    expect(send).toHaveBeenCalledTimes(4);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('does not nudge a session that answers within each interval', () => {
    const send = vi.fn();
    const nudge = new StallNudge(send);
    let previous = nudge.begin();
    for (let i = 0; i < 20; i++) {
      vi.advanceTimersByTime(NUDGE_AFTER_MS / 2);
      const next = nudge.begin();
      previous(true);
      previous = next;
    }
    expect(send).not.toHaveBeenCalled();
    previous(true);
  });

  it('nudges a stall that follows answers, within two intervals of the last answer', () => {
    const send = vi.fn();
    const nudge = new StallNudge(send);
    const first = nudge.begin();
    vi.advanceTimersByTime(NUDGE_AFTER_MS / 2);
    first(true);
    const stuck = nudge.begin();
    // The interval in which the first request was answered sends nothing; the next one does.
    vi.advanceTimersByTime(NUDGE_AFTER_MS / 2);
    expect(send).not.toHaveBeenCalled();
    vi.advanceTimersByTime(NUDGE_AFTER_MS);
    expect(send).toHaveBeenCalledTimes(1);
    stuck(true);
  });

  it('counts a request abandoned at its bound as no answer, and each done only once', () => {
    const send = vi.fn();
    const nudge = new StallNudge(send);
    const first = nudge.begin();
    const second = nudge.begin();
    first(false);
    first(true); // ignored: already done
    vi.advanceTimersByTime(NUDGE_AFTER_MS);
    expect(send).toHaveBeenCalledTimes(1);
    second(true);
    vi.advanceTimersByTime(NUDGE_AFTER_MS * 2);
    expect(send).toHaveBeenCalledTimes(1);
  });

  it('stop() clears its timer and ends the nudges', () => {
    const send = vi.fn();
    const nudge = new StallNudge(send);
    nudge.begin();
    nudge.stop();
    expect(vi.getTimerCount()).toBe(0);
    nudge.begin();
    vi.advanceTimersByTime(NUDGE_AFTER_MS * 3);
    expect(send).not.toHaveBeenCalled();
  });
});
