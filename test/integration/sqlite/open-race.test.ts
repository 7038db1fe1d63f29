/**
 * Several processes opening the same new SQLite file at once. Switching a fresh file to WAL can
 * answer SQLITE_BUSY without waiting for the busy timeout; the backend must retry its set-up
 * instead of failing with "database is locked" (seen in the flash-sale demo's workers).
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '../../..');
const dir = mkdtempSync(join(tmpdir(), 'fencelock-open-race-'));

const child = `
import { createSqliteBackend } from ${JSON.stringify(join(root, 'packages/fencelock/dist/backends/sqlite/index.js'))};
const [dir, start, files] = process.argv.slice(1);
let failures = 0;
for (let i = 0; i < Number(files); i++) {
  while (Date.now() < Number(start) + i * 40) {}
  try {
    const backend = createSqliteBackend({ path: dir + '/f' + i + '/locks.db' });
    await backend.inspect('k');
    await backend.close();
  } catch (error) {
    failures += 1;
    console.error(error.message);
  }
}
console.log(failures);
`;

function run(start: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [
      '--input-type=module',
      '-e',
      child,
      dir,
      String(start),
      '40',
    ]);
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
    });
    p.on('error', reject);
    p.on('exit', () => resolve(Number(out.trim())));
  });
}

beforeAll(async () => {
  if (!existsSync(join(root, 'packages/fencelock/dist/backends/sqlite/index.js'))) {
    throw new Error(
      'run `npm run build` first (the test spawns processes that load packages/fencelock/dist/)',
    );
  }
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('sqlite open race', () => {
  it('opens a new file from 4 processes at once, 40 times, without "database is locked"', async () => {
    const start = Date.now() + 700;
    const failures = await Promise.all([run(start), run(start), run(start), run(start)]);
    expect(failures).toEqual([0, 0, 0, 0]);
  });
});
