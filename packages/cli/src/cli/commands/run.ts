/**
 * `fencelock run <key> -- <command> [args…]`: hold a lock for as long as a command runs, in the
 * manner of `etcdctl lock`, `consul lock` and `flock`. The command gets the key and the lease's
 * fencing token in its environment, so it can hand the token to the resource it writes.
 *
 * Unlike `etcdctl lock`, the lease is watched while the command runs: when it is lost, the
 * command is stopped (SIGTERM, then SIGKILL after the grace period) and `run` exits with its own
 * code, so a caller never mistakes unprotected work for protected work.
 *
 * As GNU `timeout(1)` does, the command runs in its own process group (and session: Node's
 * `detached`), and the signals go to the whole group: a shell script's children and background
 * jobs are stopped with it, not left running without a lease. `run` waits, up to the grace
 * period, until none of the group is left before it exits. SIGINT, SIGTERM, SIGHUP and SIGQUIT
 * sent to fencelock are forwarded to the group. A terminal's Ctrl-C (and Ctrl-\) reaches only
 * fencelock, since the command is not in the terminal's foreground group: fencelock forwards
 * it, so the command sees it once. Ctrl-Z (SIGTSTP) stops the group with SIGSTOP, then fencelock
 * itself; SIGCONT (`fg`) and SIGWINCH are passed on. The command keeps fencelock's stdin, stdout
 * and stderr, but has no controlling terminal (it cannot open /dev/tty).
 *
 * The lock itself goes through the public Locker API only (acquire with watchdog renewal,
 * `lease.signal`, `release`, `close`); this file only parses options and looks after the child.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { constants } from 'node:os';
import type { Command } from 'commander';
import {
  createLocker,
  DEFAULTS,
  InvalidArgumentError,
  type Locker,
  LockTimeoutError,
  MAX_LOCK_DELAY_MS,
  MAX_PERMITS,
  MAX_TIMER_MS,
  MIN_TTL_MS,
  type ReleaseOutcome,
  redactStoreUrlsIn,
} from 'fencelock';
import {
  DEFAULT_CLI_STORE,
  parseIntegerOption,
  parseKeyArgument,
  parseStoreOption,
  UsageError,
} from '../usage.js';
import { acquireHold, type Holding, holdLabel } from './run-hold.js';

/**
 * Exit codes of `run` besides the command's own. They sit next to the shell's 126/127 and
 * follow GNU `timeout(1)`: 124 "timed out" (the command never started), 125 "the wrapper itself
 * stopped the command". 1 (error) and 2 (usage) keep their CLI-wide meaning; 128 + n is a
 * command killed by signal n (or `run` interrupted by signal n while waiting).
 */
export const RUN_EXIT_CODES = Object.freeze({
  /** `--wait` ran out before the lock was granted; the command did not run. */
  waitTimeout: 124,
  /** The lease was lost while the command ran; the command was stopped. */
  leaseLost: 125,
  /** The command was found but could not be started (not executable, …). */
  cannotExecute: 126,
  /** The command was not found. */
  commandNotFound: 127,
});

/** Defaults of `run`'s options. */
export const RUN_DEFAULTS = Object.freeze({
  /** Lease length, ms (the library's default). */
  ttlMs: DEFAULTS.ttlMs,
  /**
   * Time between SIGTERM and SIGKILL after the lease is lost, ms. Short on purpose: once the
   * lease is gone another owner may already hold the key, and the command runs unprotected.
   */
  graceMs: 5000,
});

/** The help line of `--lock-delay` (`run` and `elect`). */
export const LOCK_DELAY_HELP = `after the lease ends without a release (this process killed, paused or cut off), grant the key to nobody for this many ms (0 to ${MAX_LOCK_DELAY_MS}; stores with lock-delay)`;

/**
 * `--lock-delay`'s value, ms: 0 when not given.
 * @throws UsageError when it is not a whole number in [0, MAX_LOCK_DELAY_MS].
 */
export function parseLockDelayOption(raw: string | undefined): number {
  return raw === undefined ? 0 : parseIntegerOption('--lock-delay', raw, 0, MAX_LOCK_DELAY_MS);
}

/** Signals `run` forwards to the command (and that cancel the wait before it starts). */
const FORWARDED_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;
type ForwardedSignal = (typeof FORWARDED_SIGNALS)[number];

/**
 * Terminal and job-control signals passed on to the command's group while it runs; they never
 * cancel the wait. (SIGTSTP is handled apart: it stops the group, then fencelock.)
 */
const PASSED_SIGNALS = ['SIGCONT', 'SIGWINCH'] as const;

/** How often `run` looks whether the command's process group is gone after a lease loss, ms. */
const GROUP_POLL_MS = 25;

/** Checked options of one `run`. */
export interface RunOptions {
  /** The keys (at least one); several are held all or none. */
  readonly keys: readonly string[];
  /** `--permits`: take one permit of a semaphore with this many (one key only). */
  readonly permits: number | undefined;
  /** `--read`: a shared read lock. */
  readonly mode: 'write' | 'read';
  readonly store: string;
  readonly ttlMs: number;
  /** `--lock-delay`, ms (0: none); write locks only. */
  readonly lockDelayMs: number;
  /** `Infinity`: wait until granted. */
  readonly waitMs: number;
  readonly graceMs: number;
  readonly command: string;
  readonly args: readonly string[];
}

/** Raw option values of `run`, as commander hands them over. */
interface RunCliOptions {
  readonly store?: string;
  readonly permits?: string;
  readonly read?: boolean;
  readonly ttl: string;
  readonly wait?: string;
  readonly grace: string;
  readonly lockDelay?: string;
}

const EXIT_CODE_HELP = `
Exit status:
  the command's own   the command ran under the lease to its end (killed by signal n: 128+n)
  ${RUN_EXIT_CODES.waitTimeout}                 --wait ran out before the lock was granted; the command did not run
  ${RUN_EXIT_CODES.leaseLost}                 the lease was lost while the command ran; it was sent SIGTERM
                      (SIGKILL after --grace ms), or it finished without a valid lease
  ${RUN_EXIT_CODES.cannotExecute} / ${RUN_EXIT_CODES.commandNotFound}           the command could not be started / was not found
  1                   error (the store could not be reached, …)
  2                   bad usage (unknown option, bad value); nothing was locked
  128+n               interrupted by signal n while waiting for the lock

The command's environment gets FENCELOCK_KEY (the key) and FENCELOCK_TOKEN (the lease's fencing
token, decimal): pass the token to the resource with every write. With several keys it gets
FENCELOCK_KEYS (a JSON array of the keys, sorted) and FENCELOCK_TOKENS (a JSON array of their
tokens as decimal strings, in the same order) instead. The command runs in its own
process group: on lease loss the whole group (the command and whatever it started) gets SIGTERM,
then SIGKILL. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to fencelock (a terminal's Ctrl-C reaches
fencelock only) are forwarded to the group; the lock is released once the command has exited.

Examples:
  fencelock run --store redis://127.0.0.1:6379 --wait 10000 nightly-report -- ./report.sh --full
  fencelock run --store redis://127.0.0.1:6379 --permits 3 exports -- ./export.sh
  fencelock run --store redis://127.0.0.1:6379 stock:a stock:b -- ./move-stock.sh
  fencelock run --store redis://127.0.0.1:6379 --lock-delay 10000 ledger -- ./post-ledger.sh
`;

/** Add `run` to `program`. */
export function registerRunCommand(program: Command): void {
  program
    .command('run')
    .description(
      'hold a lock on <key> while a command runs; the command gets FENCELOCK_KEY and FENCELOCK_TOKEN',
    )
    .usage('[options] <key> [more keys...] -- <command> [args...]')
    .argument(
      '<key>',
      'lock key (1 to 1024 UTF-8 bytes); several keys before -- are locked all or none',
    )
    .argument('<command>', 'command to run while the lock is held (put -- before it)')
    .argument('[args...]', 'arguments of the command')
    .option(
      '--store <url>',
      `lock store URL, e.g. sqlite:<path>, redis://host:port, etcd://host:port (default: ${DEFAULT_CLI_STORE}, relative to the working directory)`,
    )
    .option(
      '--ttl <ms>',
      `lease length in ms (>= ${MIN_TTL_MS}); renewed every ttl/3 while the command runs`,
      String(RUN_DEFAULTS.ttlMs),
    )
    .option(
      '--wait <ms>',
      'give up waiting for the lock after this many ms (0: a single attempt) (default: wait until granted)',
    )
    .option(
      '--permits <n>',
      `take one permit of a semaphore of <key> with n permits (1 to ${MAX_PERMITS}) instead of the lock`,
    )
    .option('--read', 'take a shared read lock (stores with read locks)')
    .option('--lock-delay <ms>', `${LOCK_DELAY_HELP}; not with --read or --permits`)
    .option(
      '--grace <ms>',
      'after the lease is lost, ms between SIGTERM and SIGKILL to the command (0: SIGKILL at once)',
      String(RUN_DEFAULTS.graceMs),
    )
    .addHelpText('after', EXIT_CODE_HELP)
    .action(async (_key: string, _command: string, _args: string[], raw: RunCliOptions) => {
      // Everything is checked before the store is touched.
      const { keys, command, args } = splitOperands(program);
      const permits =
        raw.permits === undefined
          ? undefined
          : parseIntegerOption('--permits', raw.permits, 1, MAX_PERMITS);
      if (permits !== undefined && (keys.length > 1 || raw.read === true)) {
        throw new UsageError(
          '--permits',
          'invalid --permits: a semaphore permit is taken on one key, without --read',
        );
      }
      const lockDelayMs = parseLockDelayOption(raw.lockDelay);
      if (lockDelayMs > 0 && (permits !== undefined || raw.read === true)) {
        throw new UsageError(
          '--lock-delay',
          `invalid --lock-delay: only a write lock carries it, not with ${permits === undefined ? '--read' : '--permits'}`,
        );
      }
      const options: RunOptions = {
        keys: keys.map((key) => parseKeyArgument('<key>', key)),
        permits,
        mode: raw.read === true ? 'read' : 'write',
        store: raw.store === undefined ? DEFAULT_CLI_STORE : parseStoreOption('--store', raw.store),
        ttlMs: parseIntegerOption('--ttl', raw.ttl, MIN_TTL_MS, MAX_TIMER_MS),
        lockDelayMs,
        waitMs:
          raw.wait === undefined
            ? Number.POSITIVE_INFINITY
            : parseIntegerOption('--wait', raw.wait, 0, MAX_TIMER_MS),
        graceMs: parseIntegerOption('--grace', raw.grace, 0, MAX_TIMER_MS),
        command: parseCommand(command),
        args,
      };
      process.exitCode = await runUnderLock(options);
    });
}

function parseCommand(raw: string): string {
  if (raw === '') {
    throw new UsageError(
      '<command>',
      'invalid <command>: expected a command name or path, received ""',
    );
  }
  return raw;
}

/**
 * The operands of `run`: the keys before `--`, then the command and its arguments. commander
 * drops the `--` from the operands, so where it stood is read from the program's raw arguments
 * (its own record of argv). Without `--`, the first operand is the key (one key).
 * @throws UsageError when no command follows the keys.
 */
function splitOperands(program: Command): {
  keys: string[];
  command: string;
  args: string[];
} {
  const run = program.commands.find((c) => c.name() === 'run');
  const operands = run?.args ?? [];
  const raw = (program as unknown as { rawArgs?: unknown }).rawArgs;
  const rawArgs = Array.isArray(raw) ? (raw as string[]) : [];
  const separator = rawArgs.indexOf('--');
  const after = separator === -1 ? operands.length - 1 : rawArgs.length - separator - 1;
  const keyCount = Math.max(1, operands.length - after);
  const [command = '', ...args] = operands.slice(keyCount);
  return { keys: operands.slice(0, keyCount), command, args };
}

/**
 * Acquire the keys (or a permit), run the command while they are held, release, close the locker.
 * @returns the exit code `run` should end with (see `RUN_EXIT_CODES`).
 * @throws UsageError when the store refuses an option (e.g. a TTL above its maximum).
 * @throws BackendError / QuorumError when the store cannot be reached (exit code 1).
 */
export function runUnderLock(options: RunOptions): Promise<number> {
  return runWhileHeld(options, holdLabel(options), (locker, signal) =>
    acquireHold(locker, { ...options, signal }),
  );
}

/** What `runWhileHeld` needs besides the way to hold: the store, the wait, the command. */
export interface HeldCommandOptions {
  readonly store: string;
  /** `Infinity`: wait until granted. Only for messages: `acquire` applies it. */
  readonly waitMs: number;
  readonly graceMs: number;
  readonly command: string;
  readonly args: readonly string[];
}

/**
 * Open the store, wait for what `acquire` holds (a lock, a permit, several keys, a leadership),
 * run the command while it is held, stopping it when it is lost, release it once the command has
 * ended, close the store. Signals sent meanwhile cancel the wait, or go to the command.
 * @param label what is waited for, for messages: `lock "k"`.
 * @param acquire waits as long as its options allow; `signal` aborts when fencelock is sent a
 *   signal before the command starts.
 * @returns the exit code (see `RUN_EXIT_CODES`).
 * @throws UsageError when the store refuses an option (e.g. a TTL above its maximum).
 * @throws BackendError / QuorumError when the store cannot be reached (exit code 1).
 */
export async function runWhileHeld(
  options: HeldCommandOptions,
  label: string,
  acquire: (locker: Locker, signal: AbortSignal) => Promise<Holding>,
): Promise<number> {
  const watcher = new SignalWatcher();
  const locker = createLocker(options.store);
  try {
    const holding = await acquireOrExit(() => acquire(locker, watcher.cancelWait), {
      label,
      waitMs: options.waitMs,
      watcher,
    });
    if (typeof holding === 'number') return holding;
    try {
      if (watcher.received !== undefined) return exitOnSignal(watcher.received, label);
      return await superviseCommand(holding, options, label, watcher);
    } finally {
      // superviseCommand releases on its normal path; this covers an early return or a throw.
      if (holding.held) await holding.release().catch(() => undefined);
    }
  } finally {
    watcher.stop();
    await locker.close();
  }
}

/** What was asked for, or the exit code when waiting ended without it (timeout, signal). */
async function acquireOrExit(
  acquire: () => Promise<Holding>,
  { label, waitMs, watcher }: { label: string; waitMs: number; watcher: SignalWatcher },
): Promise<Holding | number> {
  try {
    return await acquire();
  } catch (error) {
    if (watcher.received !== undefined) return exitOnSignal(watcher.received, label);
    if (error instanceof LockTimeoutError) {
      stderrLine(
        error.sawHolder
          ? `${label} is held by another owner: gave up after waiting ${waitMs} ms (--wait)`
          : error.engineAnswered
            ? `${label} was not granted within ${waitMs} ms (--wait): ${withoutPrefix(error.message)}`
            : `${label}: the store answered no attempt within ${waitMs} ms (--wait); is it reachable?`,
      );
      return RUN_EXIT_CODES.waitTimeout;
    }
    if (error instanceof InvalidArgumentError) {
      // The store's own limits (e.g. a TTL above its maximum) are usage errors too.
      throw new UsageError(error.argument, withoutPrefix(error.message));
    }
    throw error;
  }
}

/** The command ran and exited (`signal`: the signal that killed it). */
interface CommandExit {
  readonly kind: 'exited';
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

/** How the command ended: it exited, or it could not be started at all. */
type CommandEnd =
  | CommandExit
  | { readonly kind: 'not-started'; readonly error: NodeJS.ErrnoException };

/**
 * Run the command while `holding` is held; stop it when it is lost; release it once the command
 * has ended. @returns the exit code.
 */
async function superviseCommand(
  holding: Holding,
  options: HeldCommandOptions,
  label: string,
  watcher: SignalWatcher,
): Promise<number> {
  if (holding.signal.aborted) {
    await holding.release().catch(() => undefined);
    stderrLine(`${withoutPrefix(lostMessage(holding))}; the command was not started`);
    return RUN_EXIT_CODES.leaseLost;
  }
  // Its own process group (and session), so that signals reach everything it starts; stdio is
  // inherited all the same. (Windows has no process groups to signal; there `detached` would
  // only give the command a console of its own.)
  const child = spawn(options.command, [...options.args], {
    stdio: 'inherit',
    detached: process.platform !== 'win32',
    env: {
      ...process.env,
      ...holding.env,
    },
  });
  let lossReported = false;
  let killTimer: NodeJS.Timeout | undefined;
  /** `performance.now()` when the group gets (or got) SIGKILL after a lease loss. */
  let killAt = Number.POSITIVE_INFINITY;
  const onLost = () => {
    lossReported = true;
    const stop =
      options.graceMs === 0
        ? 'sending SIGKILL to the command'
        : `sending SIGTERM to the command (SIGKILL after ${options.graceMs} ms)`;
    stderrLine(`${withoutPrefix(lostMessage(holding))}; ${stop}`);
    killAt = performance.now() + options.graceMs;
    if (options.graceMs === 0) {
      signalGroup(child, 'SIGKILL');
      return;
    }
    signalGroup(child, 'SIGTERM');
    // A stopped process (Ctrl-Z) acts on SIGTERM only once continued (as `timeout` does).
    signalGroup(child, 'SIGCONT');
    killTimer = setTimeout(() => signalGroup(child, 'SIGKILL'), options.graceMs);
  };
  holding.signal.addEventListener('abort', onLost, { once: true });
  watcher.forwardTo(child);

  let end: CommandEnd;
  try {
    end = await commandEnd(child);
    // After a loss, what the command started may outlive it: give it the rest of the grace
    // period (the SIGKILL timer still runs), so that nothing of it runs on once `run` has exited.
    if (lossReported && end.kind === 'exited') await groupGone(child, killAt);
  } finally {
    watcher.forwardTo(undefined);
    holding.signal.removeEventListener('abort', onLost);
    clearTimeout(killTimer);
  }

  let outcome: ReleaseOutcome | undefined;
  let releaseError: unknown;
  try {
    outcome = await holding.release();
  } catch (error) {
    releaseError = error;
  }

  if (end.kind === 'not-started') {
    const notFound = end.error.code === 'ENOENT';
    stderrLine(
      `cannot run ${JSON.stringify(options.command)}: ${notFound ? 'command not found' : end.error.message}`,
    );
    return notFound ? RUN_EXIT_CODES.commandNotFound : RUN_EXIT_CODES.cannotExecute;
  }
  if (holding.signal.aborted || (outcome !== undefined && outcome !== 'released')) {
    if (!lossReported) {
      const why = holding.signal.aborted
        ? withoutPrefix(lostMessage(holding))
        : `${holding.description} was no longer held at release (${outcome})`;
      stderrLine(`${why}; the command ran without a valid lease to its end (${describeEnd(end)})`);
    }
    return RUN_EXIT_CODES.leaseLost;
  }
  if (releaseError !== undefined) {
    // The command finished while the lease was valid; only the clean-up failed.
    stderrLine(
      `release of ${label} failed (${withoutPrefix(messageOf(releaseError))}); the lease ends by its TTL`,
    );
  }
  return exitCodeOf(end);
}

/** Settles once the command has exited, or failed to start. Never rejects. */
function commandEnd(child: ChildProcess): Promise<CommandEnd> {
  return new Promise((resolve) => {
    let started = false;
    child.once('spawn', () => {
      started = true;
    });
    // After a successful start, 'error' only reports a failed kill(): the exit still comes.
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (!started) resolve({ kind: 'not-started', error });
    });
    child.once('exit', (code, signal) => resolve({ kind: 'exited', code, signal }));
  });
}

function exitCodeOf(end: CommandExit): number {
  if (end.code !== null) return end.code;
  const number = end.signal === null ? undefined : signalNumber(end.signal);
  return number === undefined ? 1 : 128 + number;
}

function describeEnd(end: CommandExit): string {
  return end.code !== null ? `exit code ${end.code}` : `killed by ${end.signal}`;
}

function signalNumber(signal: string): number | undefined {
  return (constants.signals as Record<string, number | undefined>)[signal];
}

/** Whether the command (the leader of its process group) is still running. */
function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/**
 * Send `signal` to the command's process group: the command and everything it started that
 * stayed in the group (a shell's children and background jobs). Falls back to the command alone
 * when the group cannot be signalled.
 */
function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch (error) {
    // ESRCH: nothing of the group is left. EPERM: none of it may be signalled by us.
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH' && isRunning(child)) child.kill(signal);
  }
}

/**
 * Resolves once no live process is left in the command's process group, or once the group has
 * had its SIGKILL (sent here too when `killAt`, ms on `performance.now()`, has passed and the
 * timer has not fired yet) and one more poll for it to take effect.
 */
async function groupGone(child: ChildProcess, killAt: number): Promise<void> {
  const pgid = child.pid;
  if (pgid === undefined) return;
  let killed = false;
  while (groupHasLiveMembers(pgid)) {
    if (killed) return;
    if (performance.now() >= killAt) {
      signalGroup(child, 'SIGKILL');
      killed = true;
    }
    await new Promise((resolve) => setTimeout(resolve, GROUP_POLL_MS));
  }
}

/**
 * Whether process group `pgid` has a member that is not a zombie. `kill(-pgid, 0)` answers for
 * every member, zombies included (an orphan that died is a zombie until its new parent reaps
 * it, which a container's PID 1 may never do); on Linux, /proc tells the zombies apart.
 */
function groupHasLiveMembers(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch {
    // ESRCH: no member; EPERM: members we may not signal, hence cannot stop: not ours to wait for.
    return false;
  }
  if (process.platform !== 'linux') return true;
  try {
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      } catch {
        continue; // exited meanwhile
      }
      // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') return true;
    }
    return false;
  } catch {
    return true;
  }
}

function exitOnSignal(signal: ForwardedSignal, label: string): number {
  stderrLine(`interrupted by ${signal} before the command started (${label})`);
  return 128 + (signalNumber(signal) ?? 0);
}

function lostMessage(holding: Holding): string {
  return messageOf(holding.signal.reason);
}

/**
 * Installs handlers for the forwarded signals (so they do not kill fencelock with the lease
 * still on the engine). Before the command starts, the first signal cancels the wait; while it
 * runs, every signal is passed on to its process group; after it has exited, signals are ignored
 * until the lease is released and the store closed.
 *
 * The command is not in the terminal's foreground process group, so the terminal's signals reach
 * fencelock only: Ctrl-C / Ctrl-\ (forwarded above), SIGWINCH and SIGCONT (passed on while the
 * command runs), and Ctrl-Z (SIGTSTP), which stops the command's group with SIGSTOP (a group
 * outside the terminal's session ignores SIGTSTP) and then fencelock itself, as a shell would.
 */
class SignalWatcher {
  #received: ForwardedSignal | undefined;
  #child: ChildProcess | undefined;
  #started = false;
  readonly #cancel = new AbortController();
  readonly #handler = (signal: NodeJS.Signals) => this.#on(signal as ForwardedSignal);
  readonly #pass = (signal: NodeJS.Signals) => {
    if (this.#child !== undefined && isRunning(this.#child)) signalGroup(this.#child, signal);
  };
  readonly #stop = () => {
    if (this.#child !== undefined && isRunning(this.#child)) signalGroup(this.#child, 'SIGSTOP');
    // What SIGTSTP would have done to fencelock without a handler.
    process.kill(process.pid, 'SIGSTOP');
  };

  constructor() {
    for (const signal of FORWARDED_SIGNALS) process.on(signal, this.#handler);
    for (const signal of PASSED_SIGNALS) process.on(signal, this.#pass);
    process.on('SIGTSTP', this.#stop);
  }

  /** The signal that arrived before the command started, if any. */
  get received(): ForwardedSignal | undefined {
    return this.#received;
  }

  /** Aborted by the first signal that arrives before the command starts. */
  get cancelWait(): AbortSignal {
    return this.#cancel.signal;
  }

  /** Forward signals to `child` from now on (undefined: it has exited). */
  forwardTo(child: ChildProcess | undefined): void {
    this.#started = true;
    this.#child = child;
  }

  stop(): void {
    for (const signal of FORWARDED_SIGNALS) process.off(signal, this.#handler);
    for (const signal of PASSED_SIGNALS) process.off(signal, this.#pass);
    process.off('SIGTSTP', this.#stop);
  }

  #on(signal: ForwardedSignal): void {
    if (this.#child !== undefined) {
      if (isRunning(this.#child)) signalGroup(this.#child, signal);
      return;
    }
    if (this.#started || this.#received !== undefined) return;
    this.#received = signal;
    this.#cancel.abort(new Error(`interrupted by ${signal}`));
  }
}

function stderrLine(message: string): void {
  // An engine's error may echo the store URL: never its password.
  process.stderr.write(`fencelock: ${redactStoreUrlsIn(message)}\n`);
}

function withoutPrefix(message: string): string {
  return message.replace(/^fencelock: /, '');
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
