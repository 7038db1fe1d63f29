/**
 * better-sqlite3 installed without its native addon (npm skipped or failed its install script):
 * opening the embedded store says how to build it, instead of only the paths `bindings` tried.
 */
import { describe, expect, it } from 'vitest';
import { addonHint } from '../../packages/fencelock/src/backends/sqlite/backend.js';

describe('addonHint', () => {
  it('names npm rebuild when the bindings file is missing', () => {
    const error = new Error(
      'Could not locate the bindings file. Tried:\n → /app/node_modules/better-sqlite3/build/better_sqlite3.node',
    );
    expect(addonHint(error)).toBe(
      " (better-sqlite3's native addon is not built: run npm rebuild better-sqlite3)",
    );
  });

  it('adds nothing to other open errors', () => {
    expect(addonHint(new Error('SQLITE_CANTOPEN: unable to open database file'))).toBe('');
    expect(addonHint('Could not locate the bindings file')).toBe('');
  });
});
