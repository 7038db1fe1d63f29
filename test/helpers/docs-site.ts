/**
 * The built docs site for the browser test: `npm run docs` when the output is missing or older
 * than anything it is built from, a static server for it on a loopback port, headless Chromium
 * (Debian's `chromium`, which `scripts/install-engines.sh` installs; Playwright downloads no
 * browser here), and the questions a link checker asks of the built files.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative, sep } from 'node:path';
import { promisify } from 'node:util';
import { type Browser, chromium } from 'playwright-core';
import sirv from 'sirv';
import { ROOT } from './private-build.js';

/** The built site (VitePress's output folder). */
export const SITE_DIR = join(ROOT, 'docs/.vitepress/dist');
/** The docs' Markdown pages and the site's configuration. */
export const DOCS_DIR = join(ROOT, 'docs');

const CHROMIUM = '/usr/bin/chromium';

/** What the site is built from: the pages, the site's config, the API's sources, the results. */
const INPUTS = [
  'docs',
  'scripts/docs',
  'packages/fencelock/src',
  'packages/fencelock/package.json',
  'packages/cli/src/server',
  'packages/cli/package.json',
  'bench/results',
  'bench/lib/report.mjs',
  'tools/torture/src/report.ts',
];
/** Under docs/: what the build writes (its output, Vite's cache, the reference, the charts). */
const OUTPUTS = [
  'docs/.vitepress/dist',
  'docs/.vitepress/cache',
  'docs/reference',
  'docs/public/charts',
];

/** The newest modification time of the files under `path` (folders' own times change when the
 * build writes in them, so they do not count). */
function newestInputMs(path: string): number {
  const rel = relative(ROOT, path).split(sep).join('/');
  if (OUTPUTS.some((out) => rel === out || rel.startsWith(`${out}/`))) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  return Math.max(0, ...readdirSync(path).map((name) => newestInputMs(join(path, name))));
}

/** Build the site with `npm run docs` unless its output is newer than all its inputs. */
export async function ensureDocsSite(): Promise<void> {
  const index = join(SITE_DIR, 'index.html');
  const builtMs = existsSync(index) ? statSync(index).mtimeMs : 0;
  const newest = Math.max(...INPUTS.map((input) => newestInputMs(join(ROOT, input))));
  if (builtMs > newest) return;
  try {
    await promisify(execFile)('npm', ['run', 'docs', '--silent'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`npm run docs failed:\n${stdout ?? ''}\n${stderr ?? ''}`);
  }
}

/** A static server for the built site on 127.0.0.1, on a free port. */
export async function serveSite(): Promise<{ origin: string; close: () => Promise<void> }> {
  const files = sirv(SITE_DIR, { dev: true, extensions: ['html'] });
  const server = createServer((req, res) =>
    files(req, res, () => {
      res.statusCode = 404;
      res.end('not found');
    }),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Headless Chromium from Debian's package, with no network of its own (no sync, no updates). */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: run scripts/install-engines.sh (Debian's chromium)`);
  }
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Playwright starts it with a fresh, empty profile (--user-data-dir in a temporary folder).
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/** Every HTML file of the built site, as URL paths (`/guarantees.html`, `/reference/index.html`). */
export function sitePages(dir = SITE_DIR): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sitePages(path);
    if (!entry.name.endsWith('.html')) return [];
    return [`/${relative(SITE_DIR, path).split(sep).join('/')}`];
  });
}

/** The file of the built site a URL path names, or undefined (no such page or asset). */
export function siteFile(pathname: string): string | undefined {
  const path = decodeURIComponent(pathname);
  const candidates = path.endsWith('/') ? [`${path}index.html`] : [path, `${path}.html`];
  for (const candidate of candidates) {
    const file = join(SITE_DIR, candidate);
    if (!file.startsWith(SITE_DIR + sep)) continue;
    if (existsSync(file) && statSync(file).isFile()) return file;
  }
  return undefined;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'" };

/** The element ids of a built HTML file (the targets of `#…` links into it). */
export function htmlIds(file: string): Set<string> {
  const html = readFileSync(file, 'utf8');
  const ids = [...html.matchAll(/\sid="([^"]*)"/g)].map((match) =>
    match[1]!.replace(/&(amp|lt|gt|quot|#39);/g, (_, name: string) => ENTITIES[name]!),
  );
  return new Set(ids);
}
