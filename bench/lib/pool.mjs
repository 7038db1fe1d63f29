// Worker processes as seen from the parent: a Node worker (bench/lib/worker.mjs, over IPC) or the
// Curator worker (Java, JSON lines over stdio), behind the same request/reply interface.
import { fork, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const WORKER = fileURLToPath(new URL('./worker.mjs', import.meta.url));

export class Worker {
  #child;
  #replies = [];
  #waiting;
  #exited;
  #stderr = '';
  /** Warnings the worker reported (peers' late rejections, for example). */
  warnings = [];

  /**
   * Start a worker for `contender` and initialise it with `ctx`.
   * @param options.java the command of the Curator worker, for Java contenders.
   * @param options.execArgv extra Node flags (`--cpu-prof …`) for Node workers.
   */
  static async start(contender, ctx, { java, execArgv = [] } = {}) {
    const worker = new Worker(contender, java, execArgv);
    await worker.request({ type: 'init', contender: contender.id, ctx }, 30_000);
    return worker;
  }

  constructor(contender, java, execArgv) {
    if (contender.kind === 'java') {
      if (!java) throw new Error(`${contender.id}: no Java worker`);
      this.#child = spawn(java[0], java.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
      createInterface({ input: this.#child.stdout }).on('line', (line) => {
        if (line.startsWith('{')) this.#deliver(JSON.parse(line));
      });
      this.#child.stdin.on('error', () => undefined);
    } else {
      this.#child = fork(WORKER, [], {
        execArgv: ['--expose-gc', ...execArgv],
        serialization: 'advanced',
        stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
      });
      this.#child.on('message', (message) => this.#deliver(message));
    }
    this.#child.stderr.on('data', (chunk) => {
      this.#stderr = (this.#stderr + chunk).slice(-4000);
    });
    this.#exited = new Promise((resolve) => this.#child.once('exit', resolve));
    void this.#exited.then((code) => {
      const waiting = this.#waiting;
      this.#waiting = undefined;
      waiting?.reject(new Error(`worker exited (${code}) before answering${this.#stderrTail()}`));
    });
  }

  get pid() {
    return this.#child.pid;
  }

  #stderrTail() {
    const tail = this.#stderr.trim().split('\n').slice(-6).join('\n');
    return tail ? `: ${tail}` : '';
  }

  #deliver(message) {
    if (message.type === 'warning') {
      if (this.warnings.length < 20) this.warnings.push(message.message);
      this.onWarning?.(message.message);
      return;
    }
    if (this.#waiting) {
      const { resolve } = this.#waiting;
      this.#waiting = undefined;
      resolve(message);
    } else {
      this.#replies.push(message);
    }
  }

  send(message) {
    if (this.#child.send) this.#child.send(message);
    else this.#child.stdin.write(`${JSON.stringify(message)}\n`);
  }

  /** The next reply; a worker that answers with an error, dies or is late rejects. */
  next(timeoutMs) {
    const queued = this.#replies.shift();
    const reply = queued
      ? Promise.resolve(queued)
      : new Promise((resolve, reject) => {
          this.#waiting = { resolve, reject };
        });
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => {
        this.#waiting = undefined;
        reject(new Error(`no answer within ${timeoutMs} ms${this.#stderrTail()}`));
      }, timeoutMs);
    });
    return Promise.race([reply, late])
      .then((message) => {
        if (message.type === 'error') throw new Error(message.message);
        return message;
      })
      .finally(() => clearTimeout(timer));
  }

  request(message, timeoutMs) {
    this.send(message);
    return this.next(timeoutMs);
  }

  /** Ask the worker to close its clients and exit; kill it if it has not within `timeoutMs`. */
  async close(timeoutMs = 10_000) {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    try {
      await this.request({ type: 'close' }, timeoutMs);
      await Promise.race([this.#exited, new Promise((r) => setTimeout(r, 2000))]);
    } catch {
      // Closed or not, it goes.
    }
    this.kill();
  }

  /** SIGKILL this worker (a process the bench started), if it still runs. */
  kill() {
    if (this.#child.exitCode === null && this.#child.signalCode === null) {
      this.#child.kill('SIGKILL');
    }
  }
}
