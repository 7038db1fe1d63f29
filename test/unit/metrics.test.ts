/**
 * The metrics adapters (`fencelock/metrics`) on a real prom-client registry and a real
 * OpenTelemetry MeterProvider, fed by lock activity on the in-memory backend, and by events
 * published on fencelock's real diagnostics channels as a locker that names its store publishes
 * them (two stores of one backend). Every figure is asserted exactly.
 */
import diagnostics_channel from 'node:diagnostics_channel';
import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type AcquireEvent,
  CHANNELS,
  type EventPayloads,
  type ReleaseEvent,
  type WaitEvent,
} from '../../packages/fencelock/src/core/events.js';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
} from '../../packages/fencelock/src/index.js';
import {
  collectOpenTelemetryMetrics,
  collectPrometheusMetrics,
  MAX_STORE_LABEL_CHARS,
  type PrometheusMetrics,
} from '../../packages/fencelock/src/metrics/index.js';
import { TIMER_EARLY_MS } from '../helpers/promises.js';
import { MemoryBackend } from './memory-backend.js';

const OWNER = 'f'.repeat(32);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** How early a timer can fire, s (see TIMER_EARLY_MS). */
const TIMER_EARLY_S = TIMER_EARLY_MS / 1000;

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function lockerOn(backend: MemoryBackend): Locker {
  const locker = createLocker(backend, { retry: { initialDelayMs: 5, maxDelayMs: 10 } });
  cleanups.push(() => locker.close());
  return locker;
}

function prometheus(registry = new Registry(), maxStores?: number): PrometheusMetrics {
  const metrics = collectPrometheusMetrics({
    registry,
    ...(maxStores === undefined ? {} : { maxStores }),
  });
  cleanups.push(() => metrics.unsubscribe());
  return metrics;
}

/** Labels of a locker over the in-memory backend whose events name no store. */
const MEMORY = { backend: 'memory', store: 'memory' };

/** An event as a locker publishes it when it names its store. */
type Named<E> = E & { readonly store: string };

/** Publish `event` on fencelock's diagnostics channel `name`. */
function emit<K extends keyof EventPayloads>(name: K, event: Named<EventPayloads[K]>): void {
  diagnostics_channel.channel(CHANNELS[name]).publish(event);
}

/** The events of one grant on `store` (a Redis store), and of its end. */
function grantOn(store: string, key: string, owner = `${key}-owner`) {
  const base = { backend: 'redis', store, key, owner };
  const granted: Named<AcquireEvent> = {
    ...base,
    outcome: 'granted',
    fencingToken: 1n,
    waitMs: 2,
    attempts: 1,
    ttlMs: 60_000,
  };
  emit('acquire', granted);
  return {
    release(): void {
      const released: Named<ReleaseEvent> = {
        ...base,
        fencingToken: 1n,
        outcome: 'released',
        holdMs: 250,
      };
      emit('release', released);
    },
  };
}

/** A blocking acquire on `store` that starts waiting; `end()` publishes the end of its wait. */
function waitOn(store: string, key: string, owner = `${key}-waiter`) {
  const event = (phase: WaitEvent['phase']): Named<WaitEvent> => ({
    backend: 'redis',
    store,
    key,
    owner,
    phase,
  });
  emit('wait', event('start'));
  return { end: () => emit('wait', event('end')) };
}

/** The value of one sample (`name` as exposed, e.g. `fencelock_hold_seconds_count`). */
async function sample(
  registry: Registry,
  name: string,
  labels: Record<string, string>,
): Promise<number | undefined> {
  for (const metric of await registry.getMetricsAsJSON()) {
    for (const v of metric.values) {
      const sampleName = (v as { metricName?: string }).metricName ?? metric.name;
      if (sampleName !== name) continue;
      const l = v.labels as Record<string, string | number>;
      if (Object.entries(labels).every(([k, want]) => String(l[k]) === want)) {
        if (Object.keys(l).filter((k) => k !== 'le').length === Object.keys(labels).length) {
          return v.value;
        }
      }
    }
  }
  return undefined;
}

describe('collectPrometheusMetrics', () => {
  it('counts acquires by outcome, releases, hold and wait times', async () => {
    const { registry } = prometheus();
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const lease = await locker.acquire('k', { ttlMs: 5000 });
    await expect(locker.tryAcquire('k')).resolves.toBeNull();
    await expect(locker.acquire('k', { waitMs: 30 })).rejects.toMatchObject({
      code: 'ERR_LOCK_TIMEOUT',
    });
    await sleep(20);
    await lease.release();

    const m = MEMORY;
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', { ...m, outcome: 'granted' }),
    ).toBe(1);
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', { ...m, outcome: 'busy' }),
    ).toBe(1);
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', { ...m, outcome: 'timeout' }),
    ).toBe(1);
    expect(
      await sample(registry, 'fencelock_acquire_wait_seconds_count', { ...m, outcome: 'timeout' }),
    ).toBe(1);
    const waited = await sample(registry, 'fencelock_acquire_wait_seconds_sum', {
      ...m,
      outcome: 'timeout',
    });
    expect(waited).toBeGreaterThanOrEqual(0.03 - TIMER_EARLY_S);
    expect(await sample(registry, 'fencelock_releases_total', { ...m, outcome: 'released' })).toBe(
      1,
    );
    expect(await sample(registry, 'fencelock_hold_seconds_count', m)).toBe(1);
    expect(await sample(registry, 'fencelock_hold_seconds_sum', m)).toBeGreaterThanOrEqual(
      0.05 - 2 * TIMER_EARLY_S, // the 30 ms wait's timer and the 20 ms sleep's
    );
    expect(await sample(registry, 'fencelock_holders', m)).toBe(0);
    expect(await sample(registry, 'fencelock_waiters', m)).toBe(0);
  });

  it('reports holders and waiters while they hold and wait', async () => {
    const { registry } = prometheus();
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const a = await locker.acquire('h1', { ttlMs: 5000 });
    await locker.acquire('h2', { ttlMs: 5000 });
    const controller = new AbortController();
    const waiting = locker.acquire('h1', { signal: controller.signal }).catch((e: unknown) => e);
    await sleep(30);
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(2);
    expect(await sample(registry, 'fencelock_waiters', MEMORY)).toBe(1);
    controller.abort();
    await waiting;
    await a.release();
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(1);
    expect(await sample(registry, 'fencelock_waiters', MEMORY)).toBe(0);
  });

  it('counts an owner-addressed grant as held until its TTL runs out', async () => {
    const { registry } = prometheus();
    const locker = lockerOn(new MemoryBackend());
    await locker.acquireForOwner('o', OWNER, { ttlMs: 120 });
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(1);
    await sleep(200);
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(0);
    // Renewed: held for the new TTL, released: not held, and the hold time is known here.
    const grant = await locker.acquireForOwner('o', OWNER, { ttlMs: 120 });
    await locker.renewForOwner({ key: 'o', owner: OWNER, fencingToken: grant.fencingToken }, 5000);
    await sleep(200);
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(1);
    await locker.releaseForOwner({ key: 'o', owner: OWNER });
    expect(await sample(registry, 'fencelock_holders', MEMORY)).toBe(0);
    expect(await sample(registry, 'fencelock_hold_seconds_count', MEMORY)).toBe(1);
    expect(await sample(registry, 'fencelock_renewals_total', MEMORY)).toBe(1);
  });

  it('counts renew failures and lost leases by reason', async () => {
    const { registry } = prometheus();
    const backend = new MemoryBackend();
    const locker = lockerOn(backend);
    const expiring = await locker.acquire('x', { ttlMs: 100, autoRenew: false });
    await sleep(200);
    expect(expiring.signal.aborted).toBe(true);
    const renewed = await locker.acquire('r', { ttlMs: 5000 });
    backend.renewMode = 'fail';
    await expect(renewed.extend(5000)).rejects.toMatchObject({ code: 'ERR_BACKEND' });
    backend.entries.delete('r');
    backend.renewMode = 'ok';
    await expect(renewed.extend(5000)).rejects.toMatchObject({ code: 'ERR_LOCK_LOST' });

    const m = MEMORY;
    expect(await sample(registry, 'fencelock_leases_lost_total', { ...m, reason: 'expired' })).toBe(
      1,
    );
    expect(
      await sample(registry, 'fencelock_leases_lost_total', { ...m, reason: 'not-held' }),
    ).toBe(1);
    expect(await sample(registry, 'fencelock_renewals_total', m)).toBe(2);
    expect(await sample(registry, 'fencelock_renew_failures_total', m)).toBe(2);
    expect(await sample(registry, 'fencelock_holders', m)).toBe(0);
  });

  it('counts holders and waiters per store: two stores of one backend show apart', async () => {
    const { registry } = prometheus();
    const first = grantOn('orders', 'k1');
    grantOn('orders', 'k2');
    // The same key and owner on another store: another lease.
    grantOn('payments', 'k1');
    const waiting = waitOn('payments', 'k1');
    const at = (store: string) => ({ backend: 'redis', store });
    expect(await sample(registry, 'fencelock_holders', at('orders'))).toBe(2);
    expect(await sample(registry, 'fencelock_holders', at('payments'))).toBe(1);
    expect(await sample(registry, 'fencelock_waiters', at('orders'))).toBe(0);
    expect(await sample(registry, 'fencelock_waiters', at('payments'))).toBe(1);

    first.release();
    waiting.end();
    expect(await sample(registry, 'fencelock_holders', at('orders'))).toBe(1);
    expect(await sample(registry, 'fencelock_holders', at('payments'))).toBe(1);
    expect(await sample(registry, 'fencelock_waiters', at('payments'))).toBe(0);
    const granted = { outcome: 'granted' };
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', { ...at('orders'), ...granted }),
    ).toBe(2);
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', { ...at('payments'), ...granted }),
    ).toBe(1);
    expect(
      await sample(registry, 'fencelock_releases_total', { ...at('orders'), outcome: 'released' }),
    ).toBe(1);
    expect(
      await sample(registry, 'fencelock_releases_total', {
        ...at('payments'),
        outcome: 'released',
      }),
    ).toBeUndefined();
    expect(await sample(registry, 'fencelock_hold_seconds_sum', at('orders'))).toBe(0.25);
  });

  it('labels a store named by its URL without the password, and cuts a long name', async () => {
    const { registry } = prometheus();
    grantOn('redis://app:S3cretPw@10.0.0.5:6379/0', 'k');
    grantOn('postgres://app@10.0.0.6/db?password=S3cretPw', 'k');
    grantOn(`sqlite:/${'d'.repeat(300)}/locks.db`, 'k');
    expect(await registry.metrics()).not.toContain('S3cretPw');
    for (const store of [
      'redis://app:***@10.0.0.5:6379/0',
      'postgres://app@10.0.0.6/db?password=***',
      `sqlite:/${'d'.repeat(MAX_STORE_LABEL_CHARS - 1 - 'sqlite:/'.length)}…`,
    ]) {
      expect(await sample(registry, 'fencelock_holders', { backend: 'redis', store })).toBe(1);
    }
  });

  it('keeps maxStores store labels apart; further stores share "other"', async () => {
    const { registry } = prometheus(new Registry(), 2);
    grantOn('s1', 'k');
    grantOn('s2', 'k');
    grantOn('s3', 'k');
    grantOn('s4', 'k');
    const holders = async (store: string) =>
      sample(registry, 'fencelock_holders', { backend: 'redis', store });
    expect([await holders('s1'), await holders('s2'), await holders('other')]).toEqual([1, 1, 2]);
    expect(await holders('s3')).toBeUndefined();
    for (const maxStores of [0, 1.5, Number.NaN]) {
      expect(() => collectPrometheusMetrics({ registry: new Registry(), maxStores })).toThrow(
        InvalidArgumentError,
      );
    }
  });

  it('never labels a metric with the key or the owner', async () => {
    const { registry } = prometheus();
    const locker = lockerOn(new MemoryBackend());
    const lease = await locker.acquire('secret-key-name', { ttlMs: 5000 });
    await lease.release();
    const text = await registry.metrics();
    expect(text).not.toContain('secret-key-name');
    expect(text).not.toContain(lease.owner);
    const labelNames = new Set(
      (await registry.getMetricsAsJSON()).flatMap((m) =>
        m.values.flatMap((v) => Object.keys(v.labels)),
      ),
    );
    expect([...labelNames].sort()).toEqual(['backend', 'le', 'outcome', 'store']);
  });

  it('unsubscribe stops counting and removes the metrics; a second adapter can register', async () => {
    const registry = new Registry();
    const first = collectPrometheusMetrics({ registry });
    expect(() => collectPrometheusMetrics({ registry })).toThrow(/already been registered/);
    // The failed second call left the first one's metrics in place.
    expect(registry.getMetricsAsArray()).toHaveLength(9);
    first.unsubscribe();
    first.unsubscribe();
    expect(registry.getMetricsAsArray()).toHaveLength(0);
    const locker = lockerOn(new MemoryBackend());
    await (await locker.acquire('u', { ttlMs: 5000 })).release();
    const second = prometheus(registry);
    expect(second.names).toHaveLength(9);
    expect(
      await sample(registry, 'fencelock_acquire_attempts_total', {
        ...MEMORY,
        outcome: 'granted',
      }),
    ).toBeUndefined();
  });

  it('takes a prefix and refuses a malformed one or bad buckets', () => {
    const registry = new Registry();
    const metrics = collectPrometheusMetrics({ registry, prefix: 'app_lock_' });
    expect(metrics.names).toContain('app_lock_acquire_attempts_total');
    metrics.unsubscribe();
    expect(() => collectPrometheusMetrics({ registry, prefix: 'bad-prefix' })).toThrow(
      InvalidArgumentError,
    );
    expect(() => collectPrometheusMetrics({ registry, waitBucketsSeconds: [1, 0.5] })).toThrow(
      InvalidArgumentError,
    );
    expect(registry.getMetricsAsArray()).toHaveLength(0);
  });
});

/** A pull reader: `collect()` reads the instruments now. */
class TestReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

function points(metrics: ResourceMetrics, name: string) {
  const found = metrics.scopeMetrics
    .flatMap((s) => s.metrics)
    .find((m) => m.descriptor.name === name);
  return found?.dataPoints ?? [];
}

describe('collectOpenTelemetryMetrics', () => {
  it('records the same activity on a real MeterProvider', async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    cleanups.push(() => provider.shutdown());
    const otel = collectOpenTelemetryMetrics({ meter: provider.getMeter('fencelock-test') });
    cleanups.push(() => otel.unsubscribe());

    const locker = lockerOn(new MemoryBackend());
    const lease = await locker.acquire('k', { ttlMs: 5000 });
    await expect(locker.tryAcquire('k')).resolves.toBeNull();
    await locker.acquire('k2', { ttlMs: 5000 });
    await lease.release();

    const { resourceMetrics } = await reader.collect();
    const attempts = points(resourceMetrics, 'fencelock.acquire.attempts').map((p) => [
      p.attributes,
      p.value,
    ]);
    expect(attempts).toEqual([
      [{ ...MEMORY, outcome: 'granted' }, 2],
      [{ ...MEMORY, outcome: 'busy' }, 1],
    ]);
    const hold = points(resourceMetrics, 'fencelock.hold.duration');
    expect(hold).toHaveLength(1);
    expect((hold[0]!.value as { count: number }).count).toBe(1);
    expect(
      points(resourceMetrics, 'fencelock.holders').map((p) => [p.attributes, p.value]),
    ).toEqual([[MEMORY, 1]]);
    expect(points(resourceMetrics, 'fencelock.waiters').map((p) => p.value)).toEqual([0]);
    expect(otel.names).toHaveLength(9);
  });

  it('records holders and waiters per store', async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    cleanups.push(() => provider.shutdown());
    const otel = collectOpenTelemetryMetrics({ meter: provider.getMeter('fencelock-test') });
    cleanups.push(() => otel.unsubscribe());

    grantOn('orders', 'k1');
    grantOn('orders', 'k2');
    grantOn('payments', 'k1');
    waitOn('payments', 'k3');

    const { resourceMetrics } = await reader.collect();
    const values = (name: string) =>
      points(resourceMetrics, name).map((p) => [p.attributes, p.value]);
    const orders = { backend: 'redis', store: 'orders' };
    const payments = { backend: 'redis', store: 'payments' };
    expect(values('fencelock.holders')).toEqual([
      [orders, 2],
      [payments, 1],
    ]);
    expect(values('fencelock.waiters')).toEqual([
      [orders, 0],
      [payments, 1],
    ]);
    expect(values('fencelock.acquire.attempts')).toEqual([
      [{ ...orders, outcome: 'granted' }, 2],
      [{ ...payments, outcome: 'granted' }, 1],
    ]);
  });

  it('refuses something that is not a Meter, or a bad maxStores', () => {
    expect(() => collectOpenTelemetryMetrics({ meter: {} as never })).toThrow(InvalidArgumentError);
    const provider = new MeterProvider();
    cleanups.push(() => provider.shutdown());
    expect(() =>
      collectOpenTelemetryMetrics({ meter: provider.getMeter('fencelock-test'), maxStores: 0 }),
    ).toThrow(InvalidArgumentError);
  });
});
