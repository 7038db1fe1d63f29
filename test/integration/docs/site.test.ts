/**
 * The docs site as a reader meets it, in headless Chromium: the home page with its title and
 * navigation; the local search, which must find "fencing token" and lead to a page that says it;
 * and every page of the built site, each loading without a console error or a failed request,
 * with every internal link (and `#anchor`) and image resolving to a built page, element or asset.
 * The site is built first (`npm run docs`) when it is missing or older than its sources.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DOCS_DIR,
  ensureDocsSite,
  htmlIds,
  launchChromium,
  serveSite,
  siteFile,
  sitePages,
} from '../../helpers/docs-site.js';

let site: Awaited<ReturnType<typeof serveSite>>;
let browser: Browser;

beforeAll(async () => {
  await ensureDocsSite();
  site = await serveSite();
  browser = await launchChromium();
}, 300_000);

afterAll(async () => {
  await browser?.close();
  await site?.close();
});

/** A page that records console errors, uncaught exceptions and failed or refused requests. */
async function watchedPage(): Promise<{ page: Page; problems: string[] }> {
  const page = await browser.newPage();
  const problems: string[] = [];
  page.on('console', (message) => {
    if (message.type() === 'error') {
      problems.push(`console error: ${message.text()} (${message.location().url})`);
    }
  });
  page.on('pageerror', (error) => problems.push(`uncaught: ${error.message}`));
  page.on('requestfailed', (request) =>
    problems.push(`request failed: ${request.url()} (${request.failure()?.errorText})`),
  );
  page.on('response', (response) => {
    if (response.status() >= 400) problems.push(`HTTP ${response.status()}: ${response.url()}`);
  });
  return { page, problems };
}

/** Until Vue has hydrated the page (the app is mounted; a hydration mismatch has been logged). */
async function hydrated(page: Page): Promise<void> {
  await expect.poll(() => page.locator('#app').evaluate((app) => '__vue_app__' in app)).toBe(true);
}

/** The Markdown pages of docs/ (not the committed torture results), as site paths. */
function markdownPages(dir = DOCS_DIR, prefix = '/'): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name.startsWith('.') || ['public', 'torture', 'reference'].includes(entry.name)) {
      return [];
    }
    if (entry.isDirectory()) return markdownPages(join(dir, entry.name), `${prefix}${entry.name}/`);
    if (!entry.name.endsWith('.md')) return [];
    const name = entry.name.slice(0, -'.md'.length);
    return [name === 'index' ? `${prefix}index.html` : `${prefix}${name}.html`];
  });
}

describe('docs site', () => {
  it('home page: the title, the navigation to the guide and the API reference', async () => {
    const { page, problems } = await watchedPage();
    await page.goto(`${site.origin}/`, { waitUntil: 'networkidle' });
    expect(await page.title()).toMatch(/^fencelock/);
    await expect.poll(() => page.locator('.VPHero .name').textContent()).toContain('fencelock');
    const nav = page.locator('.VPNavBarMenu');
    const guide = await nav.getByRole('link', { name: 'Guide' }).getAttribute('href');
    const reference = await nav.getByRole('link', { name: 'API reference' }).getAttribute('href');
    expect(siteFile(new URL(guide!, site.origin).pathname)).toBeDefined();
    expect(reference).toBe('/reference/');
    await nav.getByRole('link', { name: 'API reference' }).click();
    await page.waitForURL(`${site.origin}/reference/`);
    await expect
      .poll(() => page.locator('.vp-doc h1').first().textContent())
      .toContain('API reference');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('local search: "fencing token" lists a page that says it, and the result opens it', async () => {
    const { page, problems } = await watchedPage();
    await page.goto(`${site.origin}/`, { waitUntil: 'networkidle' });
    await page.locator('.VPNavBarSearchButton').click();
    await page.locator('.search-input').fill('fencing token');
    const results = page.locator('#localsearch-list a.result');
    await results.first().waitFor();
    const hrefs = await results.evaluateAll((links) => links.map((a) => a.getAttribute('href')!));
    expect(hrefs.length).toBeGreaterThan(0);
    const first = new URL(hrefs[0]!, site.origin);
    const file = siteFile(first.pathname);
    expect(file, `${first.pathname} is a built page`).toBeDefined();
    const text = readFileSync(file!, 'utf8')
      .replace(/<[^>]+>/g, ' ')
      .replace(/\s+/g, ' ')
      .toLowerCase();
    expect(text).toContain('fencing token');
    await results.first().click();
    await page.waitForURL((url) => url.pathname === first.pathname);
    await expect.poll(() => page.locator('.vp-doc h1').first().isVisible()).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('every page loads cleanly, and every internal link, anchor and image resolves', async () => {
    const pages = sitePages().filter((path) => path !== '/404.html');
    // Every Markdown page of docs/ was built, and the API reference has pages of its own.
    expect(pages).toEqual(expect.arrayContaining(markdownPages()));
    expect(pages.filter((path) => path.startsWith('/reference/')).length).toBeGreaterThan(1);
    // The charts pages embed as /charts/<name>.svg, drawn from the committed results.
    for (const chart of ['/charts/bench.svg', '/charts/torture.svg']) {
      const file = siteFile(chart);
      expect(file, `${chart} is in the built site`).toBeDefined();
      expect(readFileSync(file!, 'utf8')).toMatch(
        /^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/,
      );
    }

    const broken: string[] = [];
    const idsOf = new Map<string, Set<string>>();
    for (const path of pages) {
      const { page, problems } = await watchedPage();
      await page.goto(`${site.origin}${path}`, { waitUntil: 'load' });
      await hydrated(page);
      broken.push(...problems.map((problem) => `${path}: ${problem}`));
      const attributeOf = (selector: string, name: string) =>
        page.locator(selector).evaluateAll((elements, name) => {
          return elements.map((element) => element.getAttribute(name)!);
        }, name);
      const targets = [
        ...(await attributeOf('a[href]', 'href')),
        ...(await attributeOf('img[src]', 'src')),
      ];
      for (const target of targets) {
        const url = new URL(target, `${site.origin}${path}`);
        if (url.origin !== site.origin) continue;
        const file = siteFile(url.pathname);
        if (file === undefined) {
          broken.push(`${path}: ${target} (no such page or file)`);
          continue;
        }
        if (url.hash.length > 1 && file.endsWith('.html')) {
          const id = decodeURIComponent(url.hash.slice(1));
          if (!idsOf.has(file)) idsOf.set(file, htmlIds(file));
          if (!idsOf.get(file)!.has(id)) broken.push(`${path}: ${target} (no element #${id})`);
        }
      }
      const images = await page
        .locator('img')
        .evaluateAll((images) =>
          (images as { complete: boolean; naturalWidth: number; src: string }[])
            .filter((image) => image.complete && image.naturalWidth === 0)
            .map((image) => image.src),
        );
      broken.push(...images.map((src) => `${path}: image ${src} did not load`));
      await page.close();
    }
    expect(broken).toEqual([]);
  }, 300_000);
});
