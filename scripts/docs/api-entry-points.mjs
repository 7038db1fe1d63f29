// The public entry points of the published packages, read from their package.json `exports`:
// each subpath's declaration file (dist/….d.ts) maps back to the source it is built from
// (src/….ts). The API reference documents exactly these modules, named by their import
// specifier ("fencelock/redis", "@fencelock/cli/server").
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Packages and export subpaths the reference covers (`@fencelock/cli/tooling` is for tools/). */
const DOCUMENTED = [
  { dir: 'packages/fencelock', subpaths: 'all' },
  { dir: 'packages/cli', subpaths: ['./server'] },
];

/**
 * @param {string} root the repository root
 * @returns {{ specifier: string, source: string }[]} source paths relative to root
 */
export function apiEntryPoints(root) {
  return DOCUMENTED.flatMap(({ dir, subpaths }) => {
    const manifest = JSON.parse(readFileSync(join(root, dir, 'package.json'), 'utf8'));
    return Object.entries(manifest.exports)
      .filter(([, target]) => typeof target === 'object' && target.types !== undefined)
      .filter(([subpath]) => subpaths === 'all' || subpaths.includes(subpath))
      .map(([subpath, target]) => ({
        specifier: subpath === '.' ? manifest.name : `${manifest.name}${subpath.slice(1)}`,
        source: join(dir, target.types.replace(/^\.\/dist\//, 'src/').replace(/\.d\.ts$/, '.ts')),
      }));
  });
}
