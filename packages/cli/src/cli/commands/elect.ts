/**
 * `fencelock elect <name> -- <command> [args…]`: campaign in the leader election `<name>`, run a
 * command while leading, and resign when it ends, so the next candidate leads at once. The shape
 * of `etcdctl elect`, with `run`'s supervision of the command: the command gets the term (the
 * leadership's fencing token) in its environment and is stopped when the leadership is lost.
 * `--observe` prints each change of leader until stopped, `--leader` the current one.
 *
 * The command is started, watched and stopped by `run`'s code (`runWhileHeld`), with a
 * leadership in place of a lease; the election goes through the public Locker API only
 * (`locker.election(name)`: `campaign`, `leader`, `observe`).
 */
import { hostname } from 'node:os';
import type { Command } from 'commander';
import {
  createLocker,
  type ElectionLeader,
  InvalidArgumentError,
  MAX_ELECTION_VALUE_BYTES,
  MAX_TIMER_MS,
  MIN_TTL_MS,
} from 'fencelock';
import {
  DEFAULT_CLI_STORE,
  parseElectionValue,
  parseIntegerOption,
  parseKeyArgument,
  parseStoreOption,
  UsageError,
} from '../usage.js';
import {
  type HeldCommandOptions,
  LOCK_DELAY_HELP,
  parseLockDelayOption,
  RUN_DEFAULTS,
  RUN_EXIT_CODES,
  runWhileHeld,
} from './run.js';
import { leadershipHolding } from './run-hold.js';

/**
 * Exit codes of `elect` besides the command's own: `run`'s for the same outcomes (124, 125,
 * 126, 127), and 3 for `--leader` when nobody leads. 1 (error) and 2 (usage) keep their CLI-wide
 * meaning.
 */
export const ELECT_EXIT_CODES = Object.freeze({
  /** `--leader`: nobody leads the election (`null` was printed). */
  noLeader: 3,
  /** `--wait` ran out before this candidate led; the command did not run. */
  waitTimeout: RUN_EXIT_CODES.waitTimeout,
  /** The leadership was lost while the command ran; the command was stopped. */
  leadershipLost: RUN_EXIT_CODES.leaseLost,
});

/** A campaign that runs a command while leading. */
export interface CampaignRun extends HeldCommandOptions {
  readonly mode: 'campaign';
  readonly name: string;
  /** The value the leader publishes. */
  readonly value: string;
  readonly ttlMs: number;
  /** `--lock-delay`, ms (0: none). */
  readonly lockDelayMs: number;
}

/** `--observe` or `--leader`: who leads. */
export interface LeaderWatch {
  readonly mode: 'observe' | 'leader';
  readonly name: string;
  readonly store: string;
  readonly json: boolean;
}

/** What one `elect` does. */
export type ElectOptions = CampaignRun | LeaderWatch;

/** Raw option values of `elect`, as commander hands them over. */
interface ElectCliOptions {
  readonly store?: string;
  readonly value?: string;
  readonly ttl: string;
  readonly wait?: string;
  readonly grace: string;
  readonly lockDelay?: string;
  readonly observe?: boolean;
  readonly leader?: boolean;
  readonly json?: boolean;
}

/** Options that only a campaign takes: commander's attribute name → the flag. */
const CAMPAIGN_ONLY = {
  value: '--value',
  ttl: '--ttl',
  wait: '--wait',
  grace: '--grace',
  lockDelay: '--lock-delay',
} as const;

const HELP = `
Forms:
  fencelock elect [options] <name> -- <command> [args...]
      campaign (wait in line until leader), run the command while leading, then resign
  fencelock elect [options] <name> --observe [--json]
      print the leader, then each change of leader, until SIGINT or SIGTERM (exit 0)
  fencelock elect [options] <name> --leader [--json]
      print the current leader once

The command's environment gets FENCELOCK_ELECTION (the name), FENCELOCK_TERM (the term: the
leadership's fencing token, decimal, greater than every earlier leader's; also as
FENCELOCK_TOKEN) and FENCELOCK_LEADER_VALUE (--value). It is run and stopped as by
"fencelock run": in its own process group, sent SIGTERM (SIGKILL after --grace ms) when the
leadership is lost; SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to it. When it exits, the
candidate resigns and the next one in line leads at once.

Output of --observe and --leader: one line per leader, "<term> <value>" (the value JSON-quoted
when it is empty, starts with a double quote or holds a control character such as a line
break), or "null" when nobody leads. With --json: {"term":"7","value":"…","owner":"…"} (the term
as a decimal string) or null.

Exit status:
  the command's own   the command ran while leading to its end (killed by signal n: 128+n)
  0                   --observe stopped by SIGINT or SIGTERM; --leader found a leader
  ${ELECT_EXIT_CODES.noLeader}                   --leader: nobody leads ("null" was printed)
  ${ELECT_EXIT_CODES.waitTimeout}                 --wait ran out before this candidate led; the command did not run
  ${ELECT_EXIT_CODES.leadershipLost}                 the leadership was lost while the command ran; it was sent SIGTERM
                      (SIGKILL after --grace ms), or it finished without a valid leadership
  ${RUN_EXIT_CODES.cannotExecute} / ${RUN_EXIT_CODES.commandNotFound}           the command could not be started / was not found
  1                   error (the store could not be reached, …)
  2                   bad usage (unknown option, bad value, a store without elections)
  128+n               interrupted by signal n while campaigning

Examples:
  fencelock elect --store redis://127.0.0.1:6379 --value "$(hostname)" scheduler -- ./scheduler.sh
  fencelock elect --store redis://127.0.0.1:6379 scheduler --observe --json
  fencelock elect --store redis://127.0.0.1:6379 scheduler --leader
`;

/** Add `elect` to `program`. */
export function registerElectCommand(program: Command): void {
  program
    .command('elect')
    .description(
      'campaign in the leader election <name> and run a command while leading (FENCELOCK_TERM is the fencing token), or watch its leader',
    )
    .usage('[options] <name> [-- [command] [args...]]')
    .argument('<name>', 'election name (1 to 1024 UTF-8 bytes)')
    .argument(
      '[command]',
      'command to run while leading (put -- before it); none with --observe or --leader',
    )
    .argument('[args...]', 'arguments of the command')
    .option(
      '--store <url>',
      `lock store URL, e.g. sqlite:<path>, redis://host:port, etcd://host:port (default: ${DEFAULT_CLI_STORE}, relative to the working directory)`,
    )
    .option(
      '--value <value>',
      `value the leader publishes (at most ${MAX_ELECTION_VALUE_BYTES} UTF-8 bytes) (default: <host name>:<pid>)`,
    )
    .option(
      '--ttl <ms>',
      `leadership lease length in ms (>= ${MIN_TTL_MS}); renewed every ttl/3 while the command runs`,
      String(RUN_DEFAULTS.ttlMs),
    )
    .option(
      '--wait <ms>',
      'give up campaigning after this many ms (0: a single attempt) (default: wait until leader)',
    )
    .option('--lock-delay <ms>', LOCK_DELAY_HELP.replace('the key', 'the leadership'))
    .option(
      '--grace <ms>',
      'after the leadership is lost, ms between SIGTERM and SIGKILL to the command (0: SIGKILL at once)',
      String(RUN_DEFAULTS.graceMs),
    )
    .option('--observe', 'print the leader and each change of leader until SIGINT or SIGTERM')
    .option(
      '--leader',
      `print the current leader once (exit ${ELECT_EXIT_CODES.noLeader} when nobody leads)`,
    )
    .option('--json', 'with --observe or --leader: one JSON object per line (term as a string)')
    .addHelpText('after', HELP)
    .action(
      async (
        name: string,
        command: string | undefined,
        args: string[],
        raw: ElectCliOptions,
        self: Command,
      ) => {
        // Everything is checked before the store is touched.
        const options = parseElectOptions(name, command, args, raw, self);
        process.exitCode =
          options.mode === 'campaign'
            ? await campaignAndRun(options)
            : options.mode === 'observe'
              ? await observeLeaders(options)
              : await printLeader(options);
      },
    );
}

/**
 * Check `elect`'s operands and options.
 * @throws UsageError naming the first bad one.
 */
function parseElectOptions(
  rawName: string,
  command: string | undefined,
  args: readonly string[],
  raw: ElectCliOptions,
  self: Command,
): ElectOptions {
  const name = parseKeyArgument('<name>', rawName);
  const store =
    raw.store === undefined ? DEFAULT_CLI_STORE : parseStoreOption('--store', raw.store);
  if (raw.observe === true && raw.leader === true) {
    throw new UsageError('--observe', 'invalid --observe: not with --leader');
  }
  const watch = raw.observe === true ? '--observe' : raw.leader === true ? '--leader' : undefined;
  if (watch !== undefined) {
    if (command !== undefined) {
      throw new UsageError(
        watch,
        `invalid ${watch}: it runs no command (received ${JSON.stringify(command)})`,
      );
    }
    const given = Object.entries(CAMPAIGN_ONLY).find(
      ([attribute]) => self.getOptionValueSource(attribute) === 'cli',
    );
    if (given !== undefined) {
      const [, flag] = given;
      throw new UsageError(flag, `invalid ${flag}: it is for a campaign, not with ${watch}`);
    }
    return {
      mode: watch === '--observe' ? 'observe' : 'leader',
      name,
      store,
      json: raw.json === true,
    };
  }
  if (raw.json === true) {
    throw new UsageError('--json', 'invalid --json: only with --observe or --leader');
  }
  if (command === undefined || command === '') {
    throw new UsageError(
      '<command>',
      `invalid <command>: expected a command after --, or --observe or --leader, received ${JSON.stringify(command ?? '')}`,
    );
  }
  return {
    mode: 'campaign',
    name,
    value:
      raw.value === undefined
        ? `${hostname()}:${process.pid}`
        : parseElectionValue('--value', raw.value),
    store,
    ttlMs: parseIntegerOption('--ttl', raw.ttl, MIN_TTL_MS, MAX_TIMER_MS),
    lockDelayMs: parseLockDelayOption(raw.lockDelay),
    waitMs:
      raw.wait === undefined
        ? Number.POSITIVE_INFINITY
        : parseIntegerOption('--wait', raw.wait, 0, MAX_TIMER_MS),
    graceMs: parseIntegerOption('--grace', raw.grace, 0, MAX_TIMER_MS),
    command,
    args,
  };
}

/**
 * Campaign, run the command while leading, resign once it has ended.
 * @returns the exit code (the command's, or one of `ELECT_EXIT_CODES`).
 */
function campaignAndRun(options: CampaignRun): Promise<number> {
  return runWhileHeld(
    options,
    `leadership of election ${JSON.stringify(options.name)}`,
    async (locker, signal) =>
      leadershipHolding(
        await locker.election(options.name).campaign(options.value, {
          ttlMs: options.ttlMs,
          lockDelayMs: options.lockDelayMs,
          waitMs: options.waitMs,
          autoRenew: true,
          signal,
        }),
      ),
  );
}

/**
 * Print the current leader, then each change, until SIGINT or SIGTERM.
 * @returns 0 once stopped by one of them.
 * @throws UsageError on a store without elections; BackendError when the store fails.
 */
async function observeLeaders(options: LeaderWatch): Promise<number> {
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const locker = createLocker(options.store);
  try {
    const leaders = locker.election(options.name).observe({ signal: stop.signal });
    for await (const leader of leaders)
      process.stdout.write(`${leaderLine(leader, options.json)}\n`);
    return 0;
  } catch (error) {
    throw asUsageError(error);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await locker.close();
  }
}

/**
 * Print the current leader once.
 * @returns 0 when there is one, `ELECT_EXIT_CODES.noLeader` when nobody leads.
 * @throws UsageError on a store without elections; BackendError when the store fails.
 */
async function printLeader(options: LeaderWatch): Promise<number> {
  const locker = createLocker(options.store);
  try {
    const leader = await locker.election(options.name).leader();
    process.stdout.write(`${leaderLine(leader, options.json)}\n`);
    return leader === null ? ELECT_EXIT_CODES.noLeader : 0;
  } catch (error) {
    throw asUsageError(error);
  } finally {
    await locker.close();
  }
}

/** A store without elections (the library's InvalidArgumentError) is bad usage of `--store`. */
function asUsageError(error: unknown): unknown {
  if (!(error instanceof InvalidArgumentError)) return error;
  return new UsageError(error.argument, error.message.replace(/^fencelock: /, ''));
}

/** A value shown as is, unless it could not be read back from `<term> <value>` on one line. */
const QUOTED_VALUE = /^$|^"|\p{Cc}|[\u2028\u2029]/u;

/**
 * One line of `--observe` / `--leader`: `<term> <value>`, or its JSON (with the owner and the
 * count of candidates); `null` when nobody leads.
 */
export function leaderLine(leader: ElectionLeader | null, json: boolean): string {
  if (leader === null) return 'null';
  if (json) {
    return JSON.stringify({
      term: leader.term.toString(),
      value: leader.value,
      owner: leader.owner,
      candidates: leader.candidates,
    });
  }
  const value = QUOTED_VALUE.test(leader.value) ? JSON.stringify(leader.value) : leader.value;
  return `${leader.term} ${value}`;
}
