/**
 * The dashboard at `/ui` of a real sidecar process (`fencelock serve`), in headless Chromium
 * (Debian's package, driven by playwright-core), over SQLite: sign-in with the API token and a session cookie
 * that opens the dashboard only, a lock acquired through the API showing up within a second and
 * leaving on release, a waiter in the detail view, the history with tokens, charts drawn from
 * the traffic, a followed election's leader changes, no console errors, and no accessibility
 * violations axe-core can find.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchChromium } from '../../helpers/docs-site.js';
import { sqliteHarness } from '../handed/stores.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  type EventStream,
  lockPath,
  openEvents,
  type ServerProcess,
  sleep,
  spawnServer,
  TOKEN,
  uniqueKey,
} from './support.js';

const AXE_SOURCE = readFileSync(
  createRequire(import.meta.url).resolve('axe-core/axe.min.js'),
  'utf8',
);

let dir: string;
let tokenFile: string;
let browser: Browser;

beforeAll(async () => {
  await buildCli();
  dir = mkdtempSync(join(tmpdir(), 'fencelock-dashboard-test-'));
  tokenFile = join(dir, 'token');
  writeFileSync(tokenFile, `${TOKEN}\n`);
  browser = await launchChromium();
}, BUILD_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A page that records the console errors and uncaught exceptions it meets. */
async function openPage(): Promise<{ page: Page; errors: string[] }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(message.text());
  });
  page.on('pageerror', (error) => errors.push(error.message));
  return { page, errors };
}

async function signIn(page: Page, url: string, token: string): Promise<void> {
  await page.goto(`${url}/ui`);
  await page.getByLabel('API token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

/** axe-core's violations on the page as it is now (WCAG 2 A and AA rules). */
async function accessibilityViolations(page: Page): Promise<string[]> {
  await page.addScriptTag({ content: AXE_SOURCE });
  return page.evaluate(async () => {
    type Axe = {
      run(
        context: unknown,
        options: unknown,
      ): Promise<{ violations: { id: string; nodes: unknown[] }[] }>;
    };
    const page = globalThis as unknown as { axe: Axe; document: unknown };
    const result = await page.axe.run(page.document, {
      runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa'] },
    });
    return result.violations.map((v) => `${v.id} (${v.nodes.length})`);
  });
}

// The page on the embedded store; its data stream on every engine is dashboard-engines.test.ts.
describe('dashboard in the browser (SQLite)', () => {
  let server: ServerProcess;
  let harness: ReturnType<typeof sqliteHarness>;

  beforeAll(async () => {
    harness = sqliteHarness();
    const store = `sqlite:${harness.db.name}`;
    server = await spawnServer(['--store', store, '--port', '0', '--token-file', tokenFile]);
  });

  afterAll(async () => {
    await server?.stop();
    await harness?.close();
  });

  it('refuses its data without the token or a session; the cookie opens the dashboard only', async () => {
    for (const path of ['/ui/events', '/ui/api/history?key=k']) {
      expect((await call(server.url, path)).status, path).toBe(401);
    }
    // The page itself holds no data, and says whether the caller is signed in.
    const page = await call(server.url, '/ui');
    expect(page.status).toBe(200);
    expect(page.text).toContain('<title>fencelock dashboard</title>');
    const session = await call(server.url, '/ui/session');
    expect(session.body).toEqual({ tokenRequired: true, signedIn: false });

    const wrong = await call(server.url, '/ui/session', { body: { token: `${TOKEN}x` } });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('set-cookie')).toBeNull();
    const right = await call(server.url, '/ui/session', { body: { token: TOKEN } });
    expect(right.status).toBe(204);
    const setCookie = right.headers.get('set-cookie') ?? '';
    expect(setCookie).toMatch(
      /^fencelock_ui=[\w-]{43}; Max-Age=43200; Path=\/ui; HttpOnly; SameSite=Strict$/,
    );
    const cookie = setCookie.split(';')[0]!;
    // Behind a TLS-terminating proxy the cookie is kept off plain HTTP.
    const proxied = await fetch(`${server.url}/ui/session`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-proto': 'https' },
      body: JSON.stringify({ token: TOKEN }),
    });
    expect(proxied.headers.get('set-cookie')).toMatch(/; HttpOnly; Secure; SameSite=Strict$/);
    const withCookie = (path: string) =>
      fetch(`${server.url}${path}`, { headers: { cookie } }).then((r) => r.status);
    expect(await withCookie('/ui/api/history?key=k')).toBe(200);
    // The cookie is no API credential.
    expect(await withCookie('/v1/locks')).toBe(401);
    expect(await withCookie('/metrics')).toBe(401);
    expect(await withCookie('/ui/api/history?key=k&x=1')).toBe(400);
    // A forged or signed-out cookie opens nothing.
    expect(await withCookie('/ui/api/history?key=k')).toBe(200);
    await fetch(`${server.url}/ui/session`, { method: 'DELETE', headers: { cookie } });
    expect(await withCookie('/ui/api/history?key=k')).toBe(401);
    const forged = await fetch(`${server.url}/ui/api/history?key=k`, {
      headers: { cookie: `fencelock_ui=${'A'.repeat(43)}` },
    });
    expect(forged.status).toBe(401);
  });

  it('ends the streams a session opened when it signs out; a stream opened with the token stays', async () => {
    const signedIn = await call(server.url, '/ui/session', { body: { token: TOKEN } });
    const cookie = (signedIn.headers.get('set-cookie') ?? '').split(';')[0]!;
    const name = uniqueKey('dash-sign-out');
    const bySession = [
      await openEvents(server.url, `/ui/events?prefix=${name}`, { cookie }),
      await openEvents(server.url, `/ui/api/elections/observe?name=${name}`, { cookie }),
    ];
    const byToken = await openEvents(server.url, `/ui/events?prefix=${name}`, {
      authorization: `Bearer ${TOKEN}`,
    });
    try {
      for (const stream of [...bySession, byToken]) expect(stream.response.status).toBe(200);
      await expect.poll(() => bySession.every((s) => s.events.length > 0)).toBe(true);
      let ended = 0;
      for (const stream of bySession) void stream.ended.then(() => ended++);
      const signOut = await fetch(`${server.url}/ui/session`, {
        method: 'DELETE',
        headers: { cookie },
      });
      expect(signOut.status).toBe(204);
      await expect.poll(() => ended).toBe(2);
      // The browser's reconnection is refused; the token's stream goes on.
      const again = await fetch(`${server.url}/ui/events?prefix=${name}`, { headers: { cookie } });
      await again.text();
      expect(again.status).toBe(401);
      const before = byToken.named.length;
      await expect.poll(() => byToken.named.length, { timeout: 3_000 }).toBeGreaterThan(before);
    } finally {
      for (const stream of [...bySession, byToken]) await stream.close();
    }
  });

  it('lists at most 16 prefixes and serves at most 64 streams: 429 beyond, room again once closed', async () => {
    const auth = { authorization: `Bearer ${TOKEN}` };
    const base = uniqueKey('dash-limits');
    const streams: EventStream[] = [];
    try {
      for (let i = 0; i < 16; i++) {
        streams.push(await openEvents(server.url, `/ui/events?prefix=${base}:${i}`, auth));
      }
      expect(streams.map((s) => s.response.status)).toEqual(Array(16).fill(200));
      const seventeenth = await call(server.url, `/ui/events?prefix=${base}:16`, { token: TOKEN });
      expect(seventeenth.status).toBe(429);
      expect(seventeenth.body).toMatchObject({ errorCode: 'ERR_TOO_MANY_STREAMS' });
      expect(seventeenth.body.message).toContain('16 prefixes');
      // A prefix listed already costs no listing: more pages may watch it.
      for (let i = 16; i < 64; i++) {
        streams.push(await openEvents(server.url, `/ui/events?prefix=${base}:0`, auth));
      }
      expect(streams.every((s) => s.response.status === 200)).toBe(true);
      const sixtyFifth = await call(server.url, `/ui/events?prefix=${base}:0`, { token: TOKEN });
      expect(sixtyFifth.status).toBe(429);
      expect(sixtyFifth.body.message).toContain('64 event streams');
      const election = await call(server.url, `/ui/api/elections/observe?name=${base}`, {
        token: TOKEN,
      });
      expect(election.status).toBe(429);
      // Closed streams give their room back (once the sidecar saw them go).
      await Promise.all(streams.splice(0).map((s) => s.close()));
      await expect
        .poll(async () => {
          const again = await openEvents(server.url, `/ui/events?prefix=${base}:16`, auth);
          streams.push(again);
          return again.response.status;
        })
        .toBe(200);
    } finally {
      await Promise.all(streams.map((s) => s.close()));
    }
  });

  it('says why it cannot show a view, without retrying in a loop; odd addresses do not break it', async () => {
    const { page } = await openPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));
    let requests = 0;
    page.on('request', () => requests++);
    await signIn(page, server.url, TOKEN);
    await expect.poll(() => page.locator('#status').textContent()).toBe('Live');

    // A prefix the sidecar refuses (a NUL): its reason, once.
    await page.goto(`${server.url}/ui?prefix=%00`);
    await expect
      .poll(() => page.locator('#status').textContent())
      .toMatch(/^The sidecar refused this view: invalid prefix: /);
    const refusedAt = requests;
    await sleep(2_000);
    expect(requests - refusedAt).toBe(0);

    // A prefix refused after a listing of another: that listing is gone from the view.
    await page.goto(`${server.url}/ui`);
    await expect.poll(() => page.locator('#locks-note').textContent()).toMatch(/held keys shown/);
    await page.getByLabel('Key prefix').fill('x'.repeat(1_100));
    await page.getByRole('button', { name: 'Watch' }).click();
    await expect
      .poll(() => page.locator('#status').textContent())
      .toMatch(/^The sidecar refused this view: invalid prefix: /);
    expect(await page.locator('#locks-note').textContent()).toBe('');
    expect(await page.locator('#locks-table tbody tr').count()).toBe(0);

    // A malformed lock address: the locks view.
    await page.goto(`${server.url}/ui#/lock/%E0%A4`);
    await expect.poll(() => page.locator('#locks-view').isVisible()).toBe(true);

    // A lock outside the watched prefix: said so; one click watches it.
    const key = uniqueKey('dash-outside');
    const acquired = await call(server.url, lockPath(key, 'acquire'), {
      token: TOKEN,
      body: { owner: 'outside', ttlMs: 30_000 },
    });
    expect(acquired.status).toBe(200);
    await page.goto(`${server.url}/ui?prefix=elsewhere:#/lock/${encodeURIComponent(key)}`);
    await expect
      .poll(() => page.locator('#lock-mode').textContent())
      .toBe('unknown: the key is outside the watched prefix');
    await page.getByRole('button', { name: 'Watch this key' }).click();
    await expect.poll(() => page.locator('#lock-mode').textContent()).toBe('write');
    expect(await page.locator('#holders-table tbody td').first().textContent()).toBe(
      acquired.body.ownerId,
    );
    expect(new URL(page.url()).searchParams.get('prefix')).toBe(key);
    expect(pageErrors).toEqual([]);
    await call(server.url, lockPath(key, 'release'), {
      token: TOKEN,
      body: { owner: 'outside', fencingToken: acquired.body.fencingToken },
    });
    await page.context().close();
  });

  it('asks for the token in the browser and refuses a wrong one', async () => {
    const { page } = await openPage();
    await signIn(page, server.url, 'not-the-token-at-all');
    await expect
      .poll(() => page.getByRole('alert').textContent())
      .toBe('The sidecar refused that token.');
    expect(await page.locator('#locks-view').isHidden()).toBe(true);
    await page.context().close();
  });

  it('shows a lock live, its waiter and history, then charts; no console error', async () => {
    const { page, errors } = await openPage();
    const prefix = uniqueKey('dash');
    const key = `${prefix}:job`;
    await signIn(page, server.url, TOKEN);
    await page.getByLabel('Key prefix').fill(prefix);
    await page.getByRole('button', { name: 'Watch' }).click();
    await expect.poll(() => page.locator('#status').textContent()).toBe('Live');
    await expect.poll(() => page.locator('#locks-note').textContent()).toContain('0 of 0');

    // Acquired through the API: in the table within a second, with its token and owner.
    const acquire = (owner: string, waitMs = 0) =>
      call(server.url, lockPath(key, 'acquire'), {
        token: TOKEN,
        body: { owner, ttlMs: 30_000, waitMs },
      });
    const first = await acquire('alpha');
    expect(first.status).toBe(200);
    const granted = performance.now();
    const row = page.locator(`#locks-table tr[data-key="${key}"]`);
    await row.waitFor({ timeout: 1_000 });
    expect(performance.now() - granted).toBeLessThan(1_000);
    const cells = await row.locator('td').allTextContents();
    // The engine knows the owner id the sidecar made of the owner name (`ownerId`).
    const alpha = first.body.ownerId as string;
    expect(cells.slice(0, 4)).toEqual([key, 'write', alpha, first.body.fencingToken]);
    expect(cells[6]).toBe('0');

    // A waiter shows in the detail view, with the grant in the history.
    const waiting = acquire('beta', 20_000);
    await row.getByRole('link', { name: key }).click();
    await expect.poll(() => page.locator('#lock-key').textContent()).toBe(key);
    await expect.poll(() => page.locator('#lock-waiters').textContent()).toBe('1');
    const holder = await page.locator('#holders-table tbody td').allTextContents();
    expect(holder.slice(0, 2)).toEqual([alpha, first.body.fencingToken]);
    await expect
      .poll(() => page.locator('#history-table tbody tr').first().locator('td').allTextContents())
      .toEqual([expect.any(String), 'granted', alpha, first.body.fencingToken]);

    // Released: the waiter holds it, the history tells both.
    const released = await call(server.url, lockPath(key, 'release'), {
      token: TOKEN,
      body: { owner: 'alpha', fencingToken: first.body.fencingToken },
    });
    expect(released.status).toBe(200);
    const second = await waiting;
    expect(second.status).toBe(200);
    await expect
      .poll(async () =>
        (await page.locator('#holders-table tbody td').allTextContents()).slice(0, 2),
      )
      .toEqual([second.body.ownerId, second.body.fencingToken]);
    await expect
      .poll(async () =>
        (await page.locator('#history-table tbody tr').allInnerTexts()).map((r) =>
          r.split('\t').slice(1).join(' '),
        ),
      )
      .toEqual([
        `granted ${second.body.ownerId} ${second.body.fencingToken}`,
        `released ${alpha} ${first.body.fencingToken}`,
        `granted ${alpha} ${first.body.fencingToken}`,
      ]);
    expect(await accessibilityViolations(page)).toEqual([]);

    // Released again: gone from the table within a second.
    await page.getByRole('link', { name: 'Back to the locks' }).click();
    await row.waitFor({ timeout: 1_000 });
    expect(
      (
        await call(server.url, lockPath(key, 'release'), {
          token: TOKEN,
          body: { owner: 'beta', fencingToken: second.body.fencingToken },
        })
      ).status,
    ).toBe(200);
    const releasedAt = performance.now();
    await row.waitFor({ state: 'detached', timeout: 1_000 });
    expect(performance.now() - releasedAt).toBeLessThan(1_000);
    expect(await accessibilityViolations(page)).toEqual([]);

    // Health: the two grants above are in the charts.
    await page.getByRole('link', { name: 'Health' }).click();
    const grants = page.locator('#chart-grants');
    await expect.poll(() => grants.getAttribute('data-total')).not.toBeNull();
    expect(Number(await grants.getAttribute('data-total'))).toBeGreaterThan(0);
    expect(await grants.locator('canvas').count()).toBe(1);
    expect(await page.locator('#charts figure').count()).toBe(5);
    expect(await accessibilityViolations(page)).toEqual([]);

    expect(errors).toEqual([]);
    await page.context().close();
  });

  it('follows an election: leader, term, value and candidates, the next leader after a resign', async () => {
    const { page, errors } = await openPage();
    const name = uniqueKey('dash-election');
    const path = (action: string) => `/v1/elections/${encodeURIComponent(name)}/${action}`;
    await signIn(page, server.url, TOKEN);
    await page.getByRole('link', { name: 'Elections' }).click();
    await page.getByLabel('Election name').fill(name);
    await page.getByRole('button', { name: 'Follow' }).click();
    const row = page.locator(`#elections-table tr[data-election="${name}"]`);
    // Election, leader, term, value and candidates (not the time it leads since).
    const columns = async () => {
      const cells = await row.locator('td').allTextContents();
      return [...cells.slice(0, 4), cells[5]];
    };
    await expect.poll(columns).toEqual([name, 'nobody', '–', '–', '–']);

    const campaign = (owner: string, value: string, waitMs = 0) =>
      call(server.url, path('campaign'), {
        token: TOKEN,
        body: { owner, value, ttlMs: 30_000, waitMs },
      });
    const first = await campaign('node-a', 'http://10.0.0.1:8080');
    expect(first.status).toBe(200);
    await expect
      .poll(columns)
      .toEqual([name, first.body.ownerId, first.body.term, 'http://10.0.0.1:8080', '1']);
    const next = campaign('node-b', 'http://10.0.0.2:8080', 20_000);
    // A candidate in line is counted within a recount (1 s), with no change of leader.
    await expect
      .poll(columns, { timeout: 5_000 })
      .toEqual([name, first.body.ownerId, first.body.term, 'http://10.0.0.1:8080', '2']);
    // The followed names survive a reload (this browser keeps them).
    await page.reload();
    await expect
      .poll(columns)
      .toEqual([name, first.body.ownerId, first.body.term, 'http://10.0.0.1:8080', '2']);
    const resigned = await call(server.url, path('resign'), {
      token: TOKEN,
      body: { owner: 'node-a', term: first.body.term },
    });
    expect(resigned.status).toBe(200);
    const second = await next;
    expect(second.status).toBe(200);
    expect(BigInt(second.body.term)).toBeGreaterThan(BigInt(first.body.term));
    await expect
      .poll(columns)
      .toEqual([name, second.body.ownerId, second.body.term, 'http://10.0.0.2:8080', '1']);
    expect(await accessibilityViolations(page)).toEqual([]);

    await page.getByRole('button', { name: `Stop following ${name}` }).click();
    await row.waitFor({ state: 'detached' });
    await call(server.url, path('resign'), {
      token: TOKEN,
      body: { owner: 'node-b', term: second.body.term },
    });
    expect(errors).toEqual([]);
    await page.context().close();
  });
});
