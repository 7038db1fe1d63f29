/**
 * The orchestrator's handle on one client process of the versions demo: fork it, send it one
 * command at a time and wait for the reply (`call`), and fault it — `crash()` (SIGKILL),
 * `pause()` (SIGSTOP), `resume()` (SIGCONT). Every process started here is tracked until it has
 * exited; `killAllClients()` SIGKILLs whatever is left (it works on a stopped process too), for
 * the orchestrator's `exit` hook.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ClientConfig, Command, Reply } from './protocol.js';

/** How long a client may take to start and to answer a command (beyond its own wait), ms. */
const ANSWER_TIMEOUT_MS = 15_000;
/** How long a client may take to exit after `close`, or after SIGTERM before SIGKILL, ms. */
const EXIT_GRACE_MS = 2_000;
/** How much of a client's stderr is kept for an error report, characters. */
const STDERR_TAIL = 4000;

/** Every client process not yet known to have exited. */
const running = new Set<ChildProcess>();

/** SIGKILL every client process still running (synchronous: usable in an `exit` handler). */
export function killAllClients(): void {
  for (const child of running) child.kill('SIGKILL');
}

interface Pending {
  readonly resolve: (reply: Reply) => void;
  readonly reject: (error: Error) => void;
}

/** One forked client. Build it with `ClientProcess.start`. */
export class ClientProcess {
  readonly name: string;
  readonly #child: ChildProcess;
  readonly #abort: AbortSignal;
  /** Settles when the process has exited (and its stdio closed). */
  readonly exited: Promise<void>;
  #pending: Pending | undefined;
  #stderr = '';
  #paused = false;
  #exitExpected = false;
  #exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;

  private constructor(name: string, config: ClientConfig, abort: AbortSignal) {
    this.name = name;
    this.#abort = abort;
    const workerPath = fileURLToPath(new URL('./worker.js', import.meta.url));
    const child = fork(workerPath, [JSON.stringify(config)], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'json',
    });
    this.#child = child;
    running.add(child);
    this.exited = new Promise((resolve) => {
      child.once('close', (code, signal) => {
        running.delete(child);
        this.#exit = { code, signal };
        if (!this.#exitExpected) this.#fail(new Error(`client ${name} ${this.#howItEnded()}`));
        resolve();
      });
    });
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (chunk: string) => {
      this.#stderr = (this.#stderr + chunk).slice(-STDERR_TAIL);
    });
    child.on('error', (error) => this.#fail(new Error(`client ${name}: ${error.message}`)));
    child.on('message', (reply: Reply) => {
      const pending = this.#pending;
      this.#pending = undefined;
      if (pending === undefined) return;
      if (reply.type === 'error') {
        pending.reject(new Error(`client ${name} failed: ${reply.message}`));
      } else {
        pending.resolve(reply);
      }
    });
  }

  /**
   * Fork a client and wait until it has reached Redis.
   * @throws Error when it fails to start or `abort` fires; the process is stopped by then.
   */
  static async start(config: ClientConfig, abort: AbortSignal): Promise<ClientProcess> {
    const client = new ClientProcess(config.name, config, abort);
    try {
      await client.#await('ready', ANSWER_TIMEOUT_MS);
    } catch (error) {
      await client.stop();
      throw error;
    }
    return client;
  }

  /** Process id. */
  get pid(): number {
    return this.#child.pid ?? -1;
  }

  /**
   * Send `command` and wait for its reply, of type `expected` (one of them).
   * @param extraMs added to the answer timeout (an acquire's own wait).
   * @throws Error on an error reply, an unexpected reply, the process's exit, a timeout or abort.
   */
  async call<T extends Reply['type']>(
    command: Command,
    expected: readonly T[],
    extraMs = 0,
  ): Promise<Extract<Reply, { type: T }>> {
    const answer = this.#await(expected, ANSWER_TIMEOUT_MS + extraMs);
    this.#child.send(command);
    return answer;
  }

  /** SIGSTOP the process: its timers, watchdog included, stop with it. */
  pause(): void {
    this.#paused = true;
    this.#child.kill('SIGSTOP');
  }

  /** SIGCONT the process. */
  resume(): void {
    this.#paused = false;
    this.#child.kill('SIGCONT');
  }

  /** SIGKILL the process (`kill -9`) and wait until it is gone. */
  async crash(): Promise<NodeJS.Signals | null> {
    this.#exitExpected = true;
    this.#child.kill('SIGKILL');
    await this.exited;
    return this.#exit?.signal ?? null;
  }

  /** Ask the process to close its connections and exit; stop it if it does not. */
  async close(): Promise<void> {
    if (this.#exit !== undefined) return;
    if (this.#paused) this.resume();
    try {
      this.#exitExpected = true;
      const closed = this.call({ type: 'close' }, ['closed']);
      closed.catch(() => undefined);
      await Promise.race([closed, this.exited]);
      await this.#within(this.exited, EXIT_GRACE_MS);
    } catch {
      // Stopped below.
    }
    await this.stop();
  }

  /** Stop the process if it still runs (SIGCONT, SIGTERM, then SIGKILL) and wait for its exit. */
  async stop(): Promise<void> {
    this.#exitExpected = true;
    if (this.#exit !== undefined) return;
    this.#child.kill('SIGCONT');
    this.#child.kill('SIGTERM');
    const escalate = setTimeout(() => this.#child.kill('SIGKILL'), EXIT_GRACE_MS);
    await this.exited;
    clearTimeout(escalate);
  }

  /** Wait for the next reply, which must be of a type in `expected`. */
  #await<T extends Reply['type']>(
    expected: T | readonly T[],
    timeoutMs: number,
  ): Promise<Extract<Reply, { type: T }>> {
    const types: readonly string[] = typeof expected === 'string' ? [expected] : expected;
    if (this.#pending !== undefined) {
      return Promise.reject(new Error(`client ${this.name}: a command is already under way`));
    }
    if (this.#exit !== undefined) {
      return Promise.reject(new Error(`client ${this.name} ${this.#howItEnded()}`));
    }
    if (this.#abort.aborted) return Promise.reject(this.#abort.reason as Error);
    return new Promise((resolve, reject) => {
      const onAbort = () => this.#fail(this.#abort.reason as Error);
      const timer = setTimeout(
        () => this.#fail(new Error(`client ${this.name} did not answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.#abort.addEventListener('abort', onAbort, { once: true });
      const settle = () => {
        clearTimeout(timer);
        this.#abort.removeEventListener('abort', onAbort);
      };
      this.#pending = {
        resolve: (reply) => {
          settle();
          if (types.includes(reply.type)) resolve(reply as Extract<Reply, { type: T }>);
          else reject(new Error(`client ${this.name} answered ${reply.type}, not ${types}`));
        },
        reject: (error) => {
          settle();
          reject(error);
        },
      };
    });
  }

  #fail(error: Error): void {
    const pending = this.#pending;
    this.#pending = undefined;
    pending?.reject(error);
  }

  async #within(promise: Promise<unknown>, ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('too late')), ms);
    });
    try {
      await Promise.race([promise, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  #howItEnded(): string {
    const exit = this.#exit;
    const how =
      exit === undefined
        ? 'ended'
        : exit.signal
          ? `was killed by ${exit.signal}`
          : `exited with code ${exit.code}`;
    const tail = this.#stderr.trim();
    return `${how}${tail ? `:\n${tail}` : ''}`;
  }
}
