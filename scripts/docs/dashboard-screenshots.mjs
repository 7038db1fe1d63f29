#!/usr/bin/env node
// The dashboard screenshots of docs/dashboard.md, taken from a real sidecar: a sidecar over a
// fresh SQLite file (no token, loopback), some lock traffic from a locker of this process on the
// same file (an exclusive lock with waiters, read grants, semaphore permits, short grants taken
// and released in a loop for the charts, an election with a leader and two candidates in line),
// then Debian's Chromium (playwright-core) on /ui's four views. They land in docs/public/dashboard/ (committed), served at /dashboard/<view>.png.
// Usage: npm run docs:screenshots (builds the packages first; needs /usr/bin/chromium).
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createSidecar } from '@fencelock/cli/server';
import { createLocker } from 'fencelock';
import { chromium } from 'playwright-core';

const root = resolve(import.meta.dirname, '../..');
const outDir = join(root, 'docs/public/dashboard');
/** How long the traffic runs before the health view is taken, ms: a few 5-second buckets. */
const TRAFFIC_MS = 25_000;

const dir = mkdtempSync(join(tmpdir(), 'fencelock-screenshots-'));
const store = `sqlite:${join(dir, 'locks.db')}`;
const sidecar = createSidecar({ store });
// Named as the sidecar's locker, so that the health view (this process's traffic per store name)
// shows one store.
const locker = createLocker(store, { name: sidecar.locker.name });
const stop = new AbortController();
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
try {
  const url = await sidecar.listen({ port: 0 });
  const leases = [
    await locker.acquire('orders:nightly-export', { ttlMs: 60_000 }),
    await locker.acquire('orders:reindex', { ttlMs: 30_000 }),
    await locker.acquire('catalog:config', { ttlMs: 45_000, mode: 'read' }),
    await locker.acquire('catalog:config', { ttlMs: 45_000, mode: 'read' }),
    await locker.semaphore('payments:gateway', { permits: 3 }).acquire({ ttlMs: 40_000 }),
    await locker.semaphore('payments:gateway', { permits: 3 }).acquire({ ttlMs: 40_000 }),
  ];
  const waiters = [1, 2].map(() =>
    locker
      .acquire('orders:nightly-export', { ttlMs: 10_000, signal: stop.signal })
      .then((lease) => lease.release())
      .catch(() => {}),
  );
  const election = locker.election('scheduler');
  const leadership = await election.campaign('http://10.0.3.7:8080', { ttlMs: 60_000 });
  const candidates = ['http://10.0.3.8:8080', 'http://10.0.3.9:8080'].map((value) =>
    election
      .campaign(value, { ttlMs: 60_000, signal: stop.signal })
      .then((next) => next.resign())
      .catch(() => {}),
  );
  const traffic = (async () => {
    while (!stop.signal.aborted) {
      await locker
        .withLock(
          'cache:rebuild',
          () => new Promise((r) => setTimeout(r, 40 + Math.random() * 200)),
          {
            ttlMs: 5_000,
            signal: stop.signal,
          },
        )
        .catch(() => {});
    }
  })();
  // The grants through the sidecar are what its health view counts (its own traffic).
  const sidecarTraffic = (async () => {
    for (let i = 0; !stop.signal.aborted; i++) {
      const key = `jobs:shard-${i % 4}`;
      const answer = await fetch(`${url}/v1/locks/${encodeURIComponent(key)}/acquire`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ owner: `worker-${i % 3}`, ttlMs: 5_000, waitMs: 2_000 }),
      }).then((r) => r.json());
      await new Promise((r) => setTimeout(r, 100 + Math.random() * 300));
      if (answer.fencingToken === undefined) continue;
      await fetch(`${url}/v1/locks/${encodeURIComponent(key)}/release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ owner: `worker-${i % 3}`, fencingToken: answer.fencingToken }),
      });
    }
  })();

  mkdirSync(outDir, { recursive: true });
  const page = await browser.newPage({ viewport: { width: 1100, height: 640 } });
  await page.goto(`${url}/ui`);
  await page.locator('#locks-table tbody tr').first().waitFor();
  await page.waitForTimeout(1_500);
  await page.screenshot({ path: join(outDir, 'locks.png') });
  await page.getByRole('link', { name: 'orders:nightly-export' }).click();
  await page.waitForTimeout(1_500);
  await page.screenshot({ path: join(outDir, 'lock.png') });
  await page.getByRole('link', { name: 'Elections' }).click();
  await page.getByLabel('Election name').fill('scheduler');
  await page.getByRole('button', { name: 'Follow' }).click();
  // The candidates in line are counted within a recount (1 s).
  await page.locator('#elections-table td', { hasText: /^3$/ }).waitFor();
  await page.screenshot({ path: join(outDir, 'elections.png') });
  await page.waitForTimeout(TRAFFIC_MS);
  await page.getByRole('link', { name: 'Health' }).click();
  await page.waitForTimeout(2_000);
  await page.screenshot({ path: join(outDir, 'health.png'), fullPage: true });

  stop.abort();
  await Promise.all([traffic, sidecarTraffic, ...waiters, ...candidates]);
  for (const lease of leases) await lease.release();
  await leadership.resign();
  console.log(`dashboard screenshots: ${outDir}/{locks,lock,elections,health}.png`);
} finally {
  stop.abort();
  await browser.close();
  await sidecar.close();
  await locker.close();
  rmSync(dir, { recursive: true, force: true });
}
