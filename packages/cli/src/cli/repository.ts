/**
 * Files of the fencelock repository that are not published (the bench, the demos, the torture
 * harness's `scripts/services.sh`), found from a module that runs inside a clone.
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * The nearest `relativePath` above `fromDir` (that folder included) whose folder also holds a
 * `package.json`, as an absolute path; undefined when there is none (a published install).
 */
export function findInRepository(fromDir: string, relativePath: string): string | undefined {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, relativePath);
    if (existsSync(candidate) && existsSync(join(dir, 'package.json'))) return candidate;
    if (dirname(dir) === dir) return undefined;
  }
}
