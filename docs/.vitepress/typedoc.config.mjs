// TypeDoc options for the API reference (`npm run docs` runs TypeDoc with them first): Markdown
// pages (typedoc-plugin-markdown), one per public entry point, into docs/reference/ (generated,
// git-ignored). Their anchors are GitHub-style, as the site's headings are (config.mts).
import { resolve } from 'node:path';
import { apiEntryPoints } from '../../scripts/docs/api-entry-points.mjs';

const root = resolve(import.meta.dirname, '../..');

export default {
  entryPoints: apiEntryPoints(root).map(({ source }) => resolve(root, source)),
  tsconfig: resolve(import.meta.dirname, 'tsconfig.typedoc.json'),
  // `npm run lint` type-checks these sources; TypeDoc only reads them (half its time here).
  skipErrorChecking: true,
  plugin: ['typedoc-plugin-markdown', resolve(root, 'scripts/docs/typedoc-module-names.mjs')],
  out: resolve(root, 'docs/reference'),
  name: 'API reference',
  readme: 'none',
  // `@internal` members are stripped from the published declarations (stripInternal): keep them
  // out of the reference too.
  excludeInternal: true,
  excludePrivate: true,
  disableSources: true,
  outputFileStrategy: 'modules',
  entryFileName: 'index',
  hidePageHeader: true,
  hideBreadcrumbs: true,
  useCodeBlocks: true,
  parametersFormat: 'table',
  interfacePropertiesFormat: 'table',
  classPropertiesFormat: 'table',
  typeAliasPropertiesFormat: 'table',
  enumMembersFormat: 'table',
};
