/** The version of @fencelock/cli, read from its package.json (one level up from src or dist). */
import { readFileSync } from 'node:fs';

/** The package's version, e.g. `0.1.0`. */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  return String((pkg as { version?: unknown }).version ?? '0.0.0');
}
