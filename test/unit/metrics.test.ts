/**
 * The metrics adapters (`fencelock/metrics`) on a real prom-client registry and a real
 * OpenTelemetry MeterProvider, fed by lock activity on the in-memory backend. Every figure is
 * asserted exactly.
 */
import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createLocker, InvalidArgumentError, type Locker } from '../../src/index.js';
import {
  collectOpenTelemetryMetrics,
  collectPrometheusMetrics,
  type PrometheusMetrics,
} from '../../src/metrics/index.js';
import { MemoryBackend } from './memory-backend.js';

const OWNER = 'f'.repeat(32);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function lockerOn(backend: MemoryBackend): Locker {
  const locker = createLocker(backend, { retry: { initialDelayMs: 5, maxDelayMs: 10 } });
  cleanups.push(() => locker.close());
  return locker;
}

function prometheus(registry = new Registry()): PrometheusMetrics {
  const metrics = collectPrometheusMetrics({ registry });
  cleanups.push(() => metrics.unsubscribe());
  return metrics;
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

    const m = { backend: 'memory' };
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
    expect(waited).toBeGreaterThanOrEqual(0.03);
    expect(await sample(registry, 'fencelock_releases_total', { ...m, outcome: 'released' })).toBe(
      1,
    );
    expect(await sample(registry, 'fencelock_hold_seconds_count', m)).toBe(1);
    expect(await sample(registry, 'fencelock_hold_seconds_sum', m)).toBeGreaterThanOrEqual(0.05);
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
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(2);
    expect(await sample(registry, 'fencelock_waiters', { backend: 'memory' })).toBe(1);
    controller.abort();
    await waiting;
    await a.release();
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(1);
    expect(await sample(registry, 'fencelock_waiters', { backend: 'memory' })).toBe(0);
  });

  it('counts an owner-addressed grant as held until its TTL runs out', async () => {
    const { registry } = prometheus();
    const locker = lockerOn(new MemoryBackend());
    await locker.acquireForOwner('o', OWNER, { ttlMs: 120 });
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(1);
    await sleep(200);
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(0);
    // Renewed: held for the new TTL, released: not held, and the hold time is known here.
    const grant = await locker.acquireForOwner('o', OWNER, { ttlMs: 120 });
    await locker.renewForOwner({ key: 'o', owner: OWNER, fencingToken: grant.fencingToken }, 5000);
    await sleep(200);
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(1);
    await locker.releaseForOwner({ key: 'o', owner: OWNER });
    expect(await sample(registry, 'fencelock_holders', { backend: 'memory' })).toBe(0);
    expect(await sample(registry, 'fencelock_hold_seconds_count', { backend: 'memory' })).toBe(1);
    expect(await sample(registry, 'fencelock_renewals_total', { backend: 'memory' })).toBe(1);
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

    const m = { backend: 'memory' };
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
    expect([...labelNames].sort()).toEqual(['backend', 'le', 'outcome']);
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
        backend: 'memory',
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
      [{ backend: 'memory', outcome: 'granted' }, 2],
      [{ backend: 'memory', outcome: 'busy' }, 1],
    ]);
    const hold = points(resourceMetrics, 'fencelock.hold.duration');
    expect(hold).toHaveLength(1);
    expect((hold[0]!.value as { count: number }).count).toBe(1);
    expect(
      points(resourceMetrics, 'fencelock.holders').map((p) => [p.attributes, p.value]),
    ).toEqual([[{ backend: 'memory' }, 1]]);
    expect(points(resourceMetrics, 'fencelock.waiters').map((p) => p.value)).toEqual([0]);
    expect(otel.names).toHaveLength(9);
  });

  it('refuses something that is not a Meter', () => {
    expect(() => collectOpenTelemetryMetrics({ meter: {} as never })).toThrow(InvalidArgumentError);
  });
});
