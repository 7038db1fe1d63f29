/** The embedded store opens (and creates) its file on the first operation, not at createLocker. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { createLocker } from '../../../packages/fencelock/src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'fencelock-lazy-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

it('creates no file before the first operation', async () => {
  const path = join(dir, 'sub', 'locks.db');
  const locker = createLocker(`sqlite:${path}`);
  expect(existsSync(path)).toBe(false);
  await locker.inspect('k');
  expect(existsSync(path)).toBe(true);
  await locker.close();
});

it('closes without ever opening when unused', async () => {
  const path = join(dir, 'unused', 'locks.db');
  await createLocker(`sqlite:${path}`).close();
  expect(existsSync(path)).toBe(false);
});
