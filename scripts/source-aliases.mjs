// Where each export of the workspace's published packages lives in its TypeScript sources:
// `fencelock/redis` → packages/fencelock/src/backends/redis/index.ts. vitest resolves the
// packages' imports of each other through it (tests run the sources, not dist/), and
// test/unit/workspace.test.ts checks that tsconfig.json's `paths` (what `npm run lint` type-checks
// against) say the same.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Folders of the packages other workspace code imports by name. */
export const PUBLISHED_PACKAGES = ['packages/fencelock', 'packages/cli'];

/** `{ 'fencelock/redis': 'packages/fencelock/src/backends/redis/index.ts', … }`, relative to the root. */
export function sourceAliases() {
  const aliases = {};
  for (const folder of PUBLISHED_PACKAGES) {
    const pkg = JSON.parse(readFileSync(join(ROOT, folder, 'package.json'), 'utf8'));
    for (const [subpath, target] of Object.entries(pkg.exports)) {
      if (typeof target !== 'object') continue; // ./package.json
      const specifier = subpath === '.' ? pkg.name : `${pkg.name}/${subpath.slice(2)}`;
      const source = target.default.replace(/^\.\/dist\//, 'src/').replace(/\.js$/, '.ts');
      aliases[specifier] = `${folder}/${source}`;
    }
  }
  return aliases;
}
