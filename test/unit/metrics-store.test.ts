/**
 * The `store` label end to end: lockers name their store in their events (`name` option, else
 * the store URL without user info and parameters, else the backend's name), and the metrics
 * adapters keep two stores of one backend apart.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createLocker,
  InvalidArgumentError,
  type Locker,
} from '../../packages/fencelock/src/index.js';
import { collectPrometheusMetrics } from '../../packages/fencelock/src/metrics/index.js';
import { storeName } from '../../packages/fencelock/src/stores.js';
import { MemoryBackend } from './memory-backend.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

function track(locker: Locker): Locker {
  cleanups.push(() => locker.close());
  return locker;
}

async function gauge(registry: Registry, name: string, labels: Record<string, string>) {
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === name);
  return metric?.values.find((v) =>
    Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want),
  )?.value;
}

describe('store label', () => {
  it('keeps two named stores of one backend apart', async () => {
    const registry = new Registry();
    const metrics = collectPrometheusMetrics({ registry });
    cleanups.push(() => metrics.unsubscribe());
    const orders = track(createLocker(new MemoryBackend(), { name: 'orders' }));
    const payments = track(createLocker(new MemoryBackend(), { name: 'payments' }));
    await orders.acquire('k1', { ttlMs: 5000 });
    await orders.acquire('k2', { ttlMs: 5000 });
    await payments.acquire('k1', { ttlMs: 5000 });
    const waiting = payments.acquire('k1', { waitMs: 50 }).catch(() => undefined);
    await new Promise((resolve) => setTimeout(resolve, 20));
    const at = (store: string) => ({ backend: 'memory', store });
    expect(await gauge(registry, 'fencelock_holders', at('orders'))).toBe(2);
    expect(await gauge(registry, 'fencelock_holders', at('payments'))).toBe(1);
    expect(await gauge(registry, 'fencelock_waiters', at('orders'))).toBe(0);
    expect(await gauge(registry, 'fencelock_waiters', at('payments'))).toBe(1);
    await waiting;
  });

  it('names a store by its URL without password and parameters, a Backend by its name', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fencelock-store-label-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const registry = new Registry();
    const metrics = collectPrometheusMetrics({ registry });
    cleanups.push(() => metrics.unsubscribe());
    const url = `sqlite:${join(dir, 'locks.db')}`;
    const sqlite = track(createLocker(url));
    await (await sqlite.acquire('k', { ttlMs: 5000 })).release();
    const memory = track(createLocker(new MemoryBackend()));
    await memory.acquire('k', { ttlMs: 5000 });
    expect(await gauge(registry, 'fencelock_holders', { backend: 'sqlite', store: url })).toBe(0);
    expect([sqlite.name, memory.name]).toEqual([url, 'memory']);
    expect(await gauge(registry, 'fencelock_holders', { backend: 'memory', store: 'memory' })).toBe(
      1,
    );
    expect(storeName('redis://app:S3cret@10.0.0.5:6379/0?db=1')).toBe('redis://10.0.0.5:6379/0');
    expect(storeName('postgres://u@h/db?password=S3cret')).toBe('postgres://h/db');
    expect(storeName('redis://u:p@ss/w@h:1')).toBe('redis://h:1');
    // An "@" in a parameter is not user info; a "?" in a password is not the parameters.
    expect(storeName('redis://10.0.0.1:6379?prefix=app@eu:')).toBe('redis://10.0.0.1:6379');
    expect(storeName('redis://10.0.0.2:6379?prefix=app@eu:')).toBe('redis://10.0.0.2:6379');
    expect(storeName('redis://u:pa?ss@h:1?prefix=x')).toBe('redis://h:1');
    expect(storeName('redis+sentinel://u:S3cret@s1:26379,s2:26379/mymaster?db=1')).toBe(
      'redis+sentinel://s1:26379,s2:26379/mymaster',
    );
    expect(() => createLocker(new MemoryBackend(), { name: '' })).toThrow(InvalidArgumentError);
  });
});
