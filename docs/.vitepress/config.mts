// The docs site (VitePress): `npm run docs` builds it into docs/.vitepress/dist after the API
// reference (TypeDoc, docs/.vitepress/typedoc.config.mjs) and the charts
// (scripts/docs/charts.mjs); `npm run docs:dev` serves it with live reload.
// Everything it shows is local: the default theme's fonts are bundled, search runs in the page.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { slug } from 'github-slugger';
import { defineConfig } from 'vitepress';
import { firstGuideLink, guideSidebar, referenceSidebar } from './pages.mjs';

const docsDir = join(import.meta.dirname, '..');
if (!existsSync(join(docsDir, 'reference/index.md'))) {
  throw new Error('docs: docs/reference/ is missing; build the site with `npm run docs`');
}
const guide = guideSidebar(docsDir);
const { description } = JSON.parse(
  readFileSync(join(docsDir, '../packages/fencelock/package.json'), 'utf8'),
);

export default defineConfig({
  title: 'fencelock',
  description,
  lang: 'en-US',
  head: [['link', { rel: 'icon', type: 'image/svg+xml', href: '/favicon.svg' }]],
  // docs/torture/ holds the torture runs' committed results; a run's own <date>.md report is
  // not a page (docs/guarantees.md is the page made from it).
  srcExclude: ['torture/**'],
  lastUpdated: false,
  // Heading ids as GitHub makes them ("Dapr's errors" → #daprs-errors), so an anchor written in a
  // page works both on GitHub and here (VitePress passes link fragments through it as well).
  markdown: { anchor: { slugify: (text) => slug(text) } },
  themeConfig: {
    nav: [
      { text: 'Guide', link: firstGuideLink(guide), activeMatch: '^/(?!reference/)' },
      { text: 'API reference', link: '/reference/', activeMatch: '^/reference/' },
    ],
    sidebar: {
      '/reference/': referenceSidebar(docsDir),
      '/': guide,
    },
    search: { provider: 'local' },
    outline: { level: [2, 3] },
    footer: { message: 'MIT licensed.' },
  },
  // The home page (docs/index.md holds its text only: Biome's Markdown formatter would rewrite
  // YAML front matter): the hero, whose first button leads to the first guide page present.
  transformPageData(pageData) {
    if (pageData.relativePath !== 'index.md') return;
    pageData.frontmatter.layout = 'home';
    pageData.frontmatter.hero = {
      name: 'fencelock',
      text: 'Distributed locks with a fencing token on every lease',
      tagline:
        'One TypeScript API over Redis, Redlock, etcd, ZooKeeper, PostgreSQL and an embedded SQLite store.',
      actions: [
        { theme: 'brand', text: 'Read the guide', link: firstGuideLink(guide) },
        { theme: 'alt', text: 'API reference', link: '/reference/' },
      ],
    };
  },
});
