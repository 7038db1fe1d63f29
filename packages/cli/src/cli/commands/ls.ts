/**
 * `fencelock ls [prefix]`: the held keys of a store under a prefix (`locker.list`), one line per
 * key, printed as the pages come in. It takes no lock; like any first use of a store, it sets up
 * a store that was never used (the SQLite file, the PostgreSQL schema).
 */
import type { Command } from 'commander';
import { createLocker, type ListedLock, MAX_LIST_PAGE_SIZE } from 'fencelock';
import { listedLockJson } from '../../listed-lock-json.js';
import {
  DEFAULT_CLI_STORE,
  parseIntegerOption,
  parseKeyArgument,
  parseStoreOption,
} from '../usage.js';

/** Raw option values of `ls`, as commander hands them over. */
interface LsCliOptions {
  readonly store?: string;
  readonly json: boolean;
  readonly limit?: string;
  readonly pageSize?: string;
}

const HELP = `
Output: one line per held key: the key, its mode (write, read, or permits/N for a semaphore of N
permits), how many wait, then each holder's owner, fencing token and TTL left (ms). A lock and a
semaphore of one name are two lines. With --json, one JSON object per line (JSON Lines), tokens as
decimal strings:
  {"key":"jobs:a","mode":"write","holders":[{"owner":"…","fencingToken":"7","ttlMs":29875}],"waiters":1}

Every store lists but PostgreSQL's advisory mode, which exits 1 saying so.
Exit status: 0 (whatever was found, nothing included), 1 error, 2 bad usage.
`;

/** Add `ls` to `program`. */
export function registerLsCommand(program: Command): void {
  program
    .command('ls')
    .description('list the held locks under [prefix]: mode, holders (owner, token, TTL), waiters')
    .argument('[prefix]', 'only keys that start with it, taken literally (default: every key)')
    .option(
      '--store <url>',
      `lock store URL, e.g. sqlite:<path>, postgres://host/db (default: ${DEFAULT_CLI_STORE}, relative to the working directory)`,
    )
    .option('--json', 'print one JSON object per key (JSON Lines; tokens as decimal strings)')
    .option('--limit <n>', 'stop after n keys')
    .option('--page-size <n>', `keys read per request to the store (1 to ${MAX_LIST_PAGE_SIZE})`)
    .addHelpText('after', HELP)
    .action(async (rawPrefix: string | undefined, raw: LsCliOptions) => {
      // Checked before the store is touched.
      const prefix =
        rawPrefix === undefined || rawPrefix === '' ? '' : parseKeyArgument('[prefix]', rawPrefix);
      const store =
        raw.store === undefined ? DEFAULT_CLI_STORE : parseStoreOption('--store', raw.store);
      const limit =
        raw.limit === undefined
          ? undefined
          : parseIntegerOption('--limit', raw.limit, 1, Number.MAX_SAFE_INTEGER);
      const pageSize =
        raw.pageSize === undefined
          ? undefined
          : parseIntegerOption('--page-size', raw.pageSize, 1, MAX_LIST_PAGE_SIZE);
      const locker = createLocker(store);
      try {
        const listing = locker.list({
          prefix,
          ...(limit === undefined ? {} : { limit }),
          ...(pageSize === undefined ? {} : { pageSize }),
        });
        for await (const entry of listing) {
          process.stdout.write(
            raw.json ? `${JSON.stringify(listedLockJson(entry))}\n` : formatEntry(entry),
          );
        }
      } finally {
        await locker.close();
      }
    });
}

/** One held key as a text line (the key JSON-quoted: it may hold spaces or newlines). */
function formatEntry(entry: ListedLock): string {
  const mode = entry.mode === 'permits' ? `permits/${entry.permits}` : entry.mode;
  const holders = entry.holders
    .map((h) => `${h.owner} token ${h.fencingToken} ttl ${h.ttlMs} ms`)
    .join(', ');
  return `${JSON.stringify(entry.key)} ${mode} waiters ${entry.waiters}: ${holders}\n`;
}
