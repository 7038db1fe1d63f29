/**
 * The fair-waiting cases every engine with a line of waiters in Redis meets (the single-node
 * backend's FIFO list, Redlock's line on every node), registered with `it` by the engine's test
 * file, and the count of attempts a granted acquire made (a waiter that waits on release messages
 * attempts a few times, one that spins hundreds).
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { setTimeout as delay } from 'node:timers/promises';
import { expect, it } from 'vitest';
import {
  type AcquireEvent,
  CHANNELS,
  type Lease,
  type Locker,
  LockTimeoutError,
} from '../../packages/fencelock/src/index.js';

/** What the cases need from the engine's test file. */
export interface FairLineFixture {
  /** A locker on its own connections (as a separate process would have). */
  readonly newLocker: () => Locker;
  /** How many entries the key's line has, on each node. */
  readonly lineLengths: (key: string) => Promise<number[]>;
  /** How many nodes keep a line (1 for a single node). */
  readonly nodes: number;
  /** The holder keeps its entry until its release (Redlock), instead of leaving at its grant. */
  readonly holderKeepsEntry: boolean;
  /** Most attempts a waiter woken by release messages makes for its grant. */
  readonly maxAttempts: number;
  /** How long a line entry outlives its owner's latest attempt, ms. */
  readonly entryTtlMs: number;
  /** A key of its own for one case. */
  readonly unique: (label: string) => string;
}

/** Attempts each granted acquire of `key` made, by owner, while `body` runs. */
export async function countingAttempts(
  key: string,
  body: (attempts: Map<string, number>) => Promise<void>,
): Promise<void> {
  const attempts = new Map<string, number>();
  const onAcquire = (message: unknown) => {
    const event = message as AcquireEvent;
    if (event.key === key && event.outcome === 'granted') attempts.set(event.owner, event.attempts);
  };
  subscribe(CHANNELS.acquire, onAcquire);
  try {
    await body(attempts);
  } finally {
    unsubscribe(CHANNELS.acquire, onAcquire);
  }
}

/** Register the fair-waiting cases (inside the engine's `describe`). */
export function fairLineCases(f: FairLineFixture): void {
  const all = (n: number) => Array.from({ length: f.nodes }, () => n);

  it('grants waiters in the order they started waiting, each woken by a release', async () => {
    const key = f.unique('order');
    await countingAttempts(key, async (attempts) => {
      const holder = f.newLocker();
      const held = await holder.acquire(key);
      // Two waiters share a locker: the release message must wake the right one of them.
      const shared = f.newLocker();
      const waiterLockers = [f.newLocker(), shared, f.newLocker(), shared, holder];
      const order: number[] = [];
      const tokens: bigint[] = [];
      const owners: string[] = [];
      const done: Promise<void>[] = [];
      for (const [i, locker] of waiterLockers.entries()) {
        done.push(
          locker.acquire(key, { waitMs: 10_000 }).then(async (lease: Lease) => {
            order.push(i);
            tokens.push(lease.fencingToken);
            owners.push(lease.owner);
            await delay(5);
            await lease.release();
          }),
        );
        // Each waiter's first attempt reaches the engine before the next one starts.
        await delay(40);
      }
      expect(await held.release()).toBe('released');
      await Promise.all(done);
      expect(order).toEqual([0, 1, 2, 3, 4]);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!).toBe(true);
      expect(tokens[0]! > held.fencingToken).toBe(true);
      // No polling while waiting: the later waiters waited 40 to 200 ms (a waiter whose
      // subscription failed attempted 45 times in this case).
      for (const owner of owners) expect(attempts.get(owner)).toBeLessThanOrEqual(f.maxAttempts);
    });
  });

  it('a releaser that asks again at once goes behind the waiter already in line', async () => {
    const key = f.unique('regrab');
    const a = f.newLocker();
    const b = f.newLocker();
    const first = await a.acquire(key);
    const grants: string[] = [];
    const waiting = b.acquire(key, { waitMs: 10_000 }).then(async (lease) => {
      grants.push('b');
      await delay(20);
      await lease.release();
    });
    await delay(50);
    await first.release();
    // Sent right after the release, on the releaser's own connections: without the line it would
    // find the key free before b's attempt arrives.
    const again = await a.acquire(key, { waitMs: 10_000 });
    grants.push('a');
    await again.release();
    await waiting;
    expect(grants).toEqual(['b', 'a']);
  });

  it('tryAcquire never joins the line and does not jump it', async () => {
    const key = f.unique('try');
    const a = f.newLocker();
    const b = f.newLocker();
    const c = f.newLocker();
    const held = await a.acquire(key);
    expect(await b.tryAcquire(key)).toBeNull();
    expect(await f.lineLengths(key)).toEqual(all(0));
    // A waiter is in line; the key is then free only for it, not for a single attempt.
    const waiting = c.acquire(key, { waitMs: 10_000 });
    await delay(50);
    expect(await f.lineLengths(key)).toEqual(all(1));
    await held.release();
    const lease = await waiting;
    expect(await f.lineLengths(key)).toEqual(all(f.holderKeepsEntry ? 1 : 0));
    expect(await b.tryAcquire(key)).toBeNull();
    await lease.release();
    expect(await f.lineLengths(key)).toEqual(all(0));
    const single = await b.tryAcquire(key);
    expect(single).not.toBeNull();
    await single?.release();
  });

  it('a waiter that times out leaves the line at once: the next one is granted promptly', async () => {
    const key = f.unique('timeout');
    const a = f.newLocker();
    const quitter = f.newLocker();
    const next = f.newLocker();
    const held = await a.acquire(key);
    const gaveUp = quitter.acquire(key, { waitMs: 150 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await delay(30);
    const waiting = next.acquire(key, { waitMs: 10_000 });
    expect(await gaveUp).toBeInstanceOf(LockTimeoutError);
    await delay(50);
    expect(await f.lineLengths(key)).toEqual(all(1));
    const releasedAt = performance.now();
    await held.release();
    const lease = await waiting;
    // Without the withdrawal the quitter's entry would hold the line for its whole life.
    expect(performance.now() - releasedAt).toBeLessThan(f.entryTtlMs / 2);
    await lease.release();
  });
}
