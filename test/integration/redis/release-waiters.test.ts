/**
 * The release-waiter registry (`release-waiters.ts`) on the real Redis of `scripts/services.sh`:
 * a release message names the owner at the head of a key's line (and the grant handed to it),
 * and only that owner's wait ends, with that grant; a message that names an owner between its
 * attempt and its next wait is kept for that wait; every wait ends by its bound, on abort, and
 * on close.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ReleaseWaiters } from '../../../packages/fencelock/src/backends/redis/release-waiters.js';
import { REDIS_URL } from '../../helpers/engines.js';

let client: Redis;
let publisher: Redis;
const registries: ReleaseWaiters[] = [];

beforeAll(() => {
  client = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  publisher = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
});

afterEach(async () => {
  await Promise.all(registries.splice(0).map((r) => r.close()));
});

afterAll(async () => {
  await client.quit();
  await publisher.quit();
});

function registry(): ReleaseWaiters {
  const waiters = new ReleaseWaiters(client);
  registries.push(waiters);
  return waiters;
}

function channel(): string {
  return `fencelock-waiters-${randomBytes(4).toString('hex')}:released`;
}

/** Resolves with the ms the wait took. */
async function timed(wait: Promise<unknown>): Promise<number> {
  const started = performance.now();
  await wait;
  return performance.now() - started;
}

/** Subscribe the registry to `on`. */
async function subscribed(waiters: ReleaseWaiters, on: string): Promise<void> {
  // The first wait on a channel ends when the server confirms the subscription.
  await waiters.wait(on, 'primer', new AbortController().signal, 5_000);
}

describe('ReleaseWaiters', () => {
  it('wakes only the waiter the message names, at once', async () => {
    const waiters = registry();
    const on = channel();
    await subscribed(waiters, on);
    const signal = new AbortController().signal;
    const a = timed(waiters.wait(on, 'a', signal, 3_000));
    let bDone = false;
    const b = waiters.wait(on, 'b', signal, 3_000).then(() => {
      bDone = true;
    });
    await publisher.publish(on, 'a');
    expect(await a).toBeLessThan(1_000);
    expect(bDone).toBe(false);
    await publisher.publish(on, 'b');
    await b;
  });

  it("keeps a message that named a queued owner with no wait, for that owner's next wait", async () => {
    const waiters = registry();
    const on = channel();
    await subscribed(waiters, on);
    waiters.inLine(on, 'c');
    await publisher.publish(on, 'c');
    // Let the message arrive while 'c' has no wait registered.
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await timed(waiters.wait(on, 'c', new AbortController().signal, 3_000))).toBeLessThan(
      100,
    );
    // Used up: the next wait waits again (here, for its bound).
    expect(await timed(waiters.wait(on, 'c', new AbortController().signal, 300))).toBeGreaterThan(
      250,
    );
  });

  it('ends the named wait with the grant a message hands over, also when kept for a later wait', async () => {
    const waiters = registry();
    const on = channel();
    await subscribed(waiters, on);
    const before = performance.now();
    const waiting = waiters.wait(on, 'f', new AbortController().signal, 3_000);
    await publisher.publish(on, 'f:1764646000123456:2000');
    const handed = await waiting;
    expect(handed).toMatchObject({ counter: '1764646000123456', ttlMs: 2000 });
    expect(handed?.receivedAt).toBeGreaterThan(before);
    expect(handed?.receivedAt).toBeLessThanOrEqual(performance.now());
    // Between an attempt and its wait: kept, with the grant.
    waiters.inLine(on, 'g');
    await publisher.publish(on, 'g:1764646000999999:700');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await waiters.wait(on, 'g', new AbortController().signal, 3_000)).toMatchObject({
      counter: '1764646000999999',
      ttlMs: 700,
    });
    // A bare owner id (an entry of an older version) only wakes: nothing handed.
    const bare = waiters.wait(on, 'h', new AbortController().signal, 3_000);
    await publisher.publish(on, 'h');
    expect(await bare).toBeUndefined();
  });

  it('forgets an owner that left the line (a message naming it is not kept)', async () => {
    const waiters = registry();
    const on = channel();
    await subscribed(waiters, on);
    waiters.inLine(on, 'd');
    waiters.leftLine(on, 'd');
    await publisher.publish(on, 'd');
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await timed(waiters.wait(on, 'd', new AbortController().signal, 300))).toBeGreaterThan(
      250,
    );
  });

  it('ends a wait at its bound, on abort, and on close', async () => {
    const waiters = registry();
    const on = channel();
    await subscribed(waiters, on);
    expect(await timed(waiters.wait(on, 'e', new AbortController().signal, 200))).toBeGreaterThan(
      150,
    );
    const controller = new AbortController();
    const aborted = timed(waiters.wait(on, 'e', controller.signal, 10_000));
    controller.abort();
    expect(await aborted).toBeLessThan(100);
    const closed = timed(waiters.wait(on, 'e', new AbortController().signal, 10_000));
    await waiters.close();
    expect(await closed).toBeLessThan(1_500);
    // Closed: a wait ends at once.
    expect(await timed(waiters.wait(on, 'e', new AbortController().signal, 10_000))).toBeLessThan(
      50,
    );
  });
});
