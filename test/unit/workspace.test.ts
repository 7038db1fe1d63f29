/**
 * The workspace's wiring: what `npm run lint` type-checks against (tsconfig.json `paths`) and what
 * the tests run (vitest's aliases, from scripts/source-aliases.mjs) are the same source files, and
 * every export of a published package has its source.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sourceAliases } from '../../scripts/source-aliases.mjs';
import { ROOT } from '../helpers/private-build.js';

const aliases = sourceAliases();

describe('workspace', () => {
  it('maps every export of fencelock and @fencelock/cli to a source file that exists', () => {
    expect(aliases.fencelock).toBe('packages/fencelock/src/index.ts');
    expect(aliases['fencelock/fencing/redis']).toBe('packages/fencelock/src/fencing/redis.ts');
    expect(aliases['@fencelock/cli/server']).toBe('packages/cli/src/server/index.ts');
    const missing = Object.values(aliases).filter((file) => !existsSync(join(ROOT, file)));
    expect(missing).toEqual([]);
  });

  it('type-checks against the same sources (tsconfig.json paths)', () => {
    const tsconfig = JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8'));
    const paths = Object.fromEntries(
      Object.entries(aliases).map(([specifier, file]) => [specifier, [`./${file}`]]),
    );
    expect(tsconfig.compilerOptions.paths).toEqual(paths);
  });
});
