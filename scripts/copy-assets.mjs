// Copy non-TypeScript runtime files (Lua scripts) from src/ into dist/ after tsc, and mark the bin executable.
import { chmodSync, cpSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

for (const backend of readdirSync('src/backends')) {
  const scripts = join('src/backends', backend, 'scripts');
  try {
    cpSync(scripts, join('dist/backends', backend, 'scripts'), { recursive: true });
  } catch (error) {
    if (error.code !== 'ENOENT') throw error;
  }
}

// The `fencelock` bin must be executable when run directly from dist/.
chmodSync('dist/cli/main.js', 0o755);
