/**
 * `fencelock inspect <key>`: what the store says about a key right now: its holder (owner,
 * fencing token, remaining TTL) and the last fencing token issued. A read only: it takes no
 * lock and changes nothing on the engine.
 */
import type { Command } from 'commander';
import { createLocker, type LockInfo } from 'fencelock';
import { DEFAULT_CLI_STORE, parseKeyArgument, parseStoreOption } from '../usage.js';

/** Raw option values of `inspect`, as commander hands them over. */
interface InspectCliOptions {
  readonly store?: string;
  readonly json: boolean;
}

/**
 * The `--json` shape: one object on one line. Fencing tokens are decimal strings, since they are
 * `bigint`s that can pass 2^53 (JSON numbers would round them).
 */
export interface InspectJson {
  readonly key: string;
  readonly holder: {
    readonly owner: string;
    readonly fencingToken: string;
    /** Remaining engine TTL, ms. */
    readonly ttlMs: number;
  } | null;
  readonly lastFencingToken: string;
}

const HELP = `
Output: the holder (owner, fencing token, remaining TTL in ms) or "none", and the highest fencing
token the store can tell for the key: on Redis and Redlock the last one issued since the key
was last idle (0 once its counter expired, 5 s after the TTL of its last grant), on etcd and
ZooKeeper the newest contender's, on PostgreSQL and SQLite the holder's (0 when none). With --json, one object
on one line, tokens as decimal strings:
  {"key":"…","holder":{"owner":"…","fencingToken":"7","ttlMs":29875},"lastFencingToken":"7"}
  {"key":"…","holder":null,"lastFencingToken":"7"}

Exit status: 0 (held or not), 1 error (the store could not be reached), 2 bad usage.
`;

/** Add `inspect` to `program`. */
export function registerInspectCommand(program: Command): void {
  program
    .command('inspect')
    .description(
      'show the holder of <key> (owner, fencing token, TTL left) and its last fencing token',
    )
    .argument('<key>', 'lock key (1 to 1024 UTF-8 bytes)')
    .option(
      '--store <url>',
      `lock store URL, e.g. sqlite:<path>, redis://host:port, etcd://host:port (default: ${DEFAULT_CLI_STORE}, relative to the working directory)`,
    )
    .option('--json', 'print one JSON object (tokens as decimal strings)')
    .addHelpText('after', HELP)
    .action(async (rawKey: string, raw: InspectCliOptions) => {
      // Checked before the store is touched.
      const key = parseKeyArgument('<key>', rawKey);
      const store =
        raw.store === undefined ? DEFAULT_CLI_STORE : parseStoreOption('--store', raw.store);
      const locker = createLocker(store);
      let info: LockInfo;
      try {
        info = await locker.inspect(key);
      } finally {
        await locker.close();
      }
      process.stdout.write(raw.json ? `${JSON.stringify(toJson(info))}\n` : formatInfo(info));
    });
}

/** `LockInfo` in its `--json` shape. */
export function toJson(info: LockInfo): InspectJson {
  return {
    key: info.key,
    holder:
      info.holder === null
        ? null
        : {
            owner: info.holder.owner,
            fencingToken: info.holder.fencingToken.toString(),
            ttlMs: info.holder.ttlMs,
          },
    lastFencingToken: info.lastFencingToken.toString(),
  };
}

/** `LockInfo` as aligned text lines. */
function formatInfo(info: LockInfo): string {
  const holder =
    info.holder === null
      ? 'none'
      : `owner ${info.holder.owner}, fencing token ${info.holder.fencingToken}, TTL left ${info.holder.ttlMs} ms`;
  return [
    `key:                ${JSON.stringify(info.key)}`,
    `holder:             ${holder}`,
    `last fencing token: ${info.lastFencingToken}`,
    '',
  ].join('\n');
}
