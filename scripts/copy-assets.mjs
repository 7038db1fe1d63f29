// Copy non-TypeScript runtime files (Lua scripts) from src/ into dist/ after tsc.
import { cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

for (const backend of readdirSync('src/backends')) {
  const scripts = join('src/backends', backend, 'scripts');
  try {
    cpSync(scripts, join('dist/backends', backend, 'scripts'), { recursive: true });
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
}
