/**
 * Clients taking turns on one key: each loops acquire → hold `holdMs` → release until
 * `durationMs` has passed. What the line tests of the SQLite and PostgreSQL backends measure:
 * overlaps (a grant while another client held the key), grants per client and fairness (the
 * share of grants that went to another client than the previous grant, as `npm run bench`
 * reports it).
 */
import { expect } from 'vitest';
import type { AttemptRequest, Locker } from '../../packages/fencelock/src/index.js';

export interface Turns {
  /** Grants in order, as the index of the client granted. */
  readonly grants: readonly number[];
  /** Grants made while another client still held the key (must be 0). */
  readonly overlaps: number;
  /** Releases that did not answer `released`. */
  readonly failedReleases: number;
  /** Grants of each client, by index. */
  readonly perClient: readonly number[];
  /** Share of grants that went to another client than the previous grant, 0 to 1. */
  readonly fairness: number;
}

export async function takeTurns(
  clients: readonly Locker[],
  key: string,
  options: { durationMs: number; holdMs: number; ttlMs: number; waitMs: number },
): Promise<Turns> {
  const grants: number[] = [];
  let holders = 0;
  let overlaps = 0;
  let failedReleases = 0;
  const endAt = performance.now() + options.durationMs;
  await Promise.all(
    clients.map(async (locker, index) => {
      while (performance.now() < endAt) {
        const lease = await locker.acquire(key, { ttlMs: options.ttlMs, waitMs: options.waitMs });
        holders += 1;
        if (holders > 1) overlaps += 1;
        grants.push(index);
        await new Promise((resolve) => setTimeout(resolve, options.holdMs));
        holders -= 1;
        if ((await lease.release()) !== 'released') failedReleases += 1;
      }
    }),
  );
  const handoffs = grants.filter((g, i) => i > 0 && g !== grants[i - 1]).length;
  return {
    grants,
    overlaps,
    failedReleases,
    perClient: clients.map((_, index) => grants.filter((g) => g === index).length),
    fairness: grants.length > 1 ? handoffs / (grants.length - 1) : 1,
  };
}

/** Turns without overlap or failed release, every client granted, fairness at least 0.9. */
export function expectFairTurns(turns: Turns): void {
  expect(turns.overlaps).toBe(0);
  expect(turns.failedReleases).toBe(0);
  expect(Math.min(...turns.perClient)).toBeGreaterThan(0);
  expect(turns.fairness).toBeGreaterThanOrEqual(0.9);
}

/**
 * A backend attempt on `key` by a made-up owner (32 times `ownerDigit`), straight to the engine:
 * `waiting` true joins the key's line (and, never attempting again, stands for a crashed
 * waiter), false is a single attempt (`tryAcquire`).
 */
export function lineAttempt(key: string, ownerDigit: string, waiting: boolean): AttemptRequest {
  return {
    key,
    owner: ownerDigit.repeat(32),
    ttlMs: 5_000,
    mode: 'write',
    autoRenew: false,
    willWait: waiting,
  };
}
