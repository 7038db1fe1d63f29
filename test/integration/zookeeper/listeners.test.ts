/**
 * Many concurrent acquires on one locker share one ZooKeeper session: nothing may add a listener
 * per acquire (or per grant) to a signal they all share, the session's `signal` (lost) or its
 * `suspended` signal. Node warns past 10 listeners on one AbortSignal
 * (`MaxListenersExceededWarning: Possible EventTarget memory leak detected`), which the
 * 10,000-lease benchmark hit, and the listeners are a leak besides.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import { sleep, useNamespace, waitForCount } from './support.js';

const fixture = useNamespace('listeners');
const CONCURRENT = 64;

describe('ZooKeeper: no listener per acquire on a shared signal', () => {
  let warnings: Error[] = [];
  const onWarning = (warning: Error) => {
    if (warning.name === 'MaxListenersExceededWarning') warnings.push(warning);
  };
  beforeEach(() => {
    warnings = [];
    process.on('warning', onWarning);
  });
  afterEach(() => {
    process.off('warning', onWarning);
  });

  it(`${CONCURRENT} concurrent grants on distinct keys emit no MaxListenersExceededWarning`, async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const leases = await Promise.all(
      Array.from({ length: CONCURRENT }, (_, i) => locker.acquire(`grants-${i}`)),
    );
    // Warnings are emitted on a later tick.
    await sleep(50);
    expect(warnings.map((w) => w.message)).toEqual([]);
    await Promise.all(leases.map((lease) => lease.release()));
  });

  it(`${CONCURRENT} concurrent waiters on one key emit no MaxListenersExceededWarning`, async () => {
    const locker = fixture.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const holder = await locker.acquire('queue');
    let granted = 0;
    const waiters = Array.from({ length: CONCURRENT }, () =>
      locker.acquire('queue', { waitMs: 30_000 }).then(async (lease) => {
        granted += 1;
        await lease.release();
      }),
    );
    const settled = Promise.allSettled(waiters);
    try {
      // Every waiter queued (and watching its predecessor) before the holder lets go.
      await waitForCount(fixture.admin, backend.dirOf('queue'), CONCURRENT + 1);
      await sleep(200);
      expect(warnings.map((w) => w.message)).toEqual([]);
    } finally {
      await holder.release();
    }
    const outcomes = await settled;
    expect(outcomes.filter((o) => o.status === 'rejected')).toEqual([]);
    expect(granted).toBe(CONCURRENT);
    await sleep(50);
    expect(warnings.map((w) => w.message)).toEqual([]);
  });
});
