/**
 * `fencelock demo <name>`: runnable demonstrations. `demo flash-sale` forks worker processes that
 * buy from one shared stock under `locker.withLock`, and shows that the lock plus fencing tokens
 * keep it from overselling (and that `--no-lock` does oversell). `demo versions` runs five lock
 * designs, from SETNX to fencing tokens, on a real Redis under the fault that breaks each one.
 */

import { parseIntegerOption, parseStoreOption, UsageError } from '@fencelock/cli/tooling';
import type { Command } from 'commander';
import { MIN_TTL_MS, redactStoreUrl } from 'fencelock';
import { FLASH_SALE_DEFAULTS, FLASH_SALE_LIMITS } from './flash-sale/defaults.js';
import { VERSIONS_DEFAULTS, VERSIONS_TTL_LIMITS } from './versions/defaults.js';

/** Raw option values of `demo flash-sale`, as commander hands them over. */
interface FlashSaleCliOptions {
  readonly store?: string;
  readonly workers: string;
  readonly stock: string;
  readonly attempts: string;
  readonly ttl: string;
  readonly lock: boolean;
  readonly json: boolean;
}

/** Raw option values of `demo versions`. */
interface VersionsCliOptions {
  readonly store: string;
  readonly ttl: string;
  readonly json: boolean;
}

/** Add `demo` and its subcommands to `program`. */
export function registerDemoCommand(program: Command): void {
  const demo = program.command('demo').description('run a demonstration (see the subcommands)');

  demo
    .command('flash-sale')
    .description(
      'forked workers buy from one shared stock under a lock with fencing tokens; reports oversold (must be 0)',
    )
    .option(
      '--store <url>',
      'lock store: any store URL, e.g. sqlite:<path>, redis://host:port or postgres://user@host/db; the stock is kept in Redis or PostgreSQL for those, else in SQLite (default: an embedded sqlite store in a temp folder, deleted afterwards)',
    )
    .option('--workers <n>', 'worker processes', String(FLASH_SALE_DEFAULTS.workers))
    .option('--stock <n>', 'initial stock', String(FLASH_SALE_DEFAULTS.stock))
    .option(
      '--attempts <n>',
      'purchase attempts in all, split across the workers',
      String(FLASH_SALE_DEFAULTS.attempts),
    )
    .option(
      '--ttl <ms>',
      `lease length in milliseconds (>= ${MIN_TTL_MS})`,
      String(FLASH_SALE_DEFAULTS.ttlMs),
    )
    .option('--no-lock', 'no locking at all and unfenced writes: shows the overselling')
    .option('--json', 'print the final figures as one JSON object on the last line of stdout')
    .action(async (raw: FlashSaleCliOptions) => {
      // Validate everything before any file, process or connection is made.
      const options = {
        store: raw.store === undefined ? undefined : parseStoreOption('--store', raw.store),
        workers: parseIntegerOption('--workers', raw.workers, 1, FLASH_SALE_LIMITS.workers),
        stock: parseIntegerOption('--stock', raw.stock, 1, FLASH_SALE_LIMITS.stock),
        attempts: parseIntegerOption('--attempts', raw.attempts, 1, FLASH_SALE_LIMITS.attempts),
        ttlMs: parseIntegerOption('--ttl', raw.ttl, MIN_TTL_MS, FLASH_SALE_LIMITS.ttlMs),
        lock: raw.lock,
      };
      const { runFlashSale, formatTable, verdict } = await loadFlashSale();
      const showProgress = !raw.json && process.stderr.isTTY === true;
      const run = await runFlashSale({
        ...options,
        progressStream: showProgress ? process.stderr : undefined,
      });
      // The report shows the store URL: without its password.
      const result = { ...run, store: redactStoreUrl(run.store) };
      const line = verdict(result);
      if (raw.json) {
        process.stderr.write(`${line}\n`);
        process.stdout.write(`${JSON.stringify(result)}\n`);
      } else {
        process.stdout.write(`fencelock flash-sale demo\n${formatTable(result)}${line}\n`);
      }
      if (!result.ok) process.exitCode = 1;
    });

  demo
    .command('versions')
    .description(
      'five lock designs (SETNX → SET NX PX → owner check → watchdog → fencing token) run live on Redis under the fault that breaks each; only v5 accepts no stale write',
    )
    .option(
      '--store <url>',
      'a single Redis node: redis://host:port[/db] or rediss://…',
      VERSIONS_DEFAULTS.store,
    )
    .option(
      '--ttl <ms>',
      `lease length of v2–v5 in milliseconds (${VERSIONS_TTL_LIMITS.minMs}–${VERSIONS_TTL_LIMITS.maxMs})`,
      String(VERSIONS_DEFAULTS.ttlMs),
    )
    .option('--json', 'print the figures as one JSON object on the last line of stdout')
    .action(async (raw: VersionsCliOptions) => {
      // Validate everything before any process or connection is made.
      const store = parseSingleRedisOption('--store', raw.store);
      const ttlMs = parseIntegerOption(
        '--ttl',
        raw.ttl,
        VERSIONS_TTL_LIMITS.minMs,
        VERSIONS_TTL_LIMITS.maxMs,
      );
      const { runVersionsDemo, formatVersion, formatTable, verdict } = await loadVersions();
      const run = await runVersionsDemo({
        store,
        ttlMs,
        onStart: raw.json
          ? undefined
          : (started) =>
              process.stdout.write(
                `fencelock versions demo: five lock designs on ${redactStoreUrl(started.store)}, ttl ${ttlMs} ms\n\n`,
              ),
        onVersion: raw.json ? undefined : (r) => process.stdout.write(`${formatVersion(r)}\n`),
      });
      // The report shows the store URL: without its password.
      const result = { ...run, store: redactStoreUrl(run.store) };
      const line = verdict(result);
      if (raw.json) {
        process.stderr.write(`${line}\n`);
        process.stdout.write(`${JSON.stringify(result)}\n`);
      } else {
        process.stdout.write(`${formatTable(result)}${line}\n`);
      }
      if (!result.ok) process.exitCode = 1;
    });
}

/**
 * A store URL naming one Redis node (`redis://`, `rediss://`): the naive designs of the versions
 * demo talk to it with plain commands.
 * @throws UsageError naming `option`.
 */
function parseSingleRedisOption(option: string, raw: string): string {
  parseStoreOption(option, raw);
  if (!/^rediss?:\/\//i.test(raw)) {
    throw new UsageError(
      option,
      `invalid ${option}: expected a single Redis node, redis://host:port[/db] or rediss://…, received ${JSON.stringify(redactStoreUrl(raw))}`,
    );
  }
  return raw;
}

/** Load the versions demo on first use: it needs ioredis, an optional peer dependency. */
async function loadVersions() {
  try {
    const [run, report] = await Promise.all([
      import('./versions/run.js'),
      import('./versions/report.js'),
    ]);
    return { runVersionsDemo: run.runVersionsDemo, ...report };
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new Error(
        `the versions demo needs ioredis (npm install ioredis): ${(error as Error).message}`,
      );
    }
    throw error;
  }
}

/** Load the demo on first use: it needs better-sqlite3, an optional peer dependency. */
async function loadFlashSale() {
  try {
    const [run, report] = await Promise.all([
      import('./flash-sale/run.js'),
      import('./flash-sale/report.js'),
    ]);
    return { runFlashSale: run.runFlashSale, ...report };
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new Error(
        `the flash-sale demo needs better-sqlite3 (npm install better-sqlite3): ${(error as Error).message}`,
      );
    }
    throw error;
  }
}
