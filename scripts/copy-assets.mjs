// After tsc: copy the files tsc does not emit (Lua scripts, SQL) from a package's src/ into its
// dist/. `node scripts/copy-assets.mjs <src> <dist>`, run from the package's folder by its `build`
// script; test/helpers/private-build.ts calls `copyAssets` for the copies it compiles.
import { cpSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Copy every file under `from` that is not TypeScript to the same place under `to`. */
export function copyAssets(from, to) {
  for (const entry of readdirSync(from, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || entry.name.endsWith('.ts')) continue;
    const source = join(entry.parentPath, entry.name);
    cpSync(source, join(to, relative(from, source)));
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [from, to] = process.argv.slice(2);
  if (from === undefined || to === undefined) {
    throw new Error('usage: node scripts/copy-assets.mjs <src> <dist>');
  }
  copyAssets(from, to);
}
