/**
 * Helpers of the sidecar tests: an in-process sidecar on a loopback port (the factory
 * `createSidecar`, listening on port 0), a real sidecar process (the built CLI,
 * `node dist/cli/main.js serve …`), a small JSON HTTP client over `fetch`, and a Prometheus
 * text parser. Stores are real: the Redis of `scripts/services.sh` and SQLite files.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSidecar, type Sidecar, type SidecarOptions } from '../../../src/server/index.js';
import { redisHarness } from '../handed/stores.js';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const CLI = join(ROOT, 'dist/cli/main.js');

/** A token long enough for the sidecar (>= 16 characters). */
export const TOKEN = 'test-token-0123456789abcdef';

/** Build dist/ if the built CLI has no `serve` command yet (as the flash-sale test does). */
export function ensureBuilt(): void {
  if (!existsSync(join(ROOT, 'dist/cli/commands/serve.js'))) {
    execFileSync('npm', ['run', 'build'], { cwd: ROOT, stdio: 'inherit' });
  }
}

/** Keys made by `uniqueKey`, for `dropRedisKeys`. */
const usedKeys = new Set<string>();

/** A key no other test (or engineer sharing the engine) uses. */
export function uniqueKey(tag: string): string {
  const key = `sidecar-test:${tag}:${randomUUID()}`;
  usedKeys.add(key);
  return key;
}

/** Delete the lock and fencing-counter keys of every `uniqueKey` from the shared Redis. */
export async function dropRedisKeys(): Promise<void> {
  const harness = redisHarness();
  for (const key of usedKeys) harness.keysOf(key);
  usedKeys.clear();
  await harness.close();
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An answer: status, headers and the JSON body (or the text when it is not JSON). */
export interface Answer {
  readonly status: number;
  readonly headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON fields
  readonly body: any;
  readonly text: string;
}

/** Request options: a JSON `body`, or `raw` text sent as is with `contentType`. */
export interface CallOptions {
  readonly method?: string;
  readonly body?: unknown;
  readonly raw?: string;
  readonly contentType?: string;
  readonly token?: string;
  readonly signal?: AbortSignal;
}

/** Send one request to `base + path` and read the whole answer. */
export async function call(base: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  let payload: string | undefined;
  if (options.raw !== undefined) payload = options.raw;
  else if (options.body !== undefined) payload = JSON.stringify(options.body);
  if (payload !== undefined) headers['content-type'] = options.contentType ?? 'application/json';
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const response = await fetch(`${base}${path}`, {
    method: options.method ?? (payload === undefined ? 'GET' : 'POST'),
    headers,
    ...(payload === undefined ? {} : { body: payload }),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: response.status, headers: response.headers, body, text };
}

/** `/v1/locks/<key>` with the key URL-encoded. */
export function lockPath(key: string, action?: string): string {
  return `/v1/locks/${encodeURIComponent(key)}${action ? `/${action}` : ''}`;
}

/** An in-process sidecar listening on a free loopback port. */
export async function startInProcess(
  options: SidecarOptions,
): Promise<{ sidecar: Sidecar; url: string }> {
  const sidecar = createSidecar(options);
  try {
    const url = await sidecar.listen({ host: '127.0.0.1', port: 0 });
    return { sidecar, url };
  } catch (error) {
    await sidecar.close();
    throw error;
  }
}

/** A sidecar process started from the built CLI. */
export interface ServerProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /** Send `signal` and resolve with the exit code once the process is gone. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Run `node dist/cli/main.js serve <args>` and wait until it listens (or exits). */
export function spawnServer(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 20_000,
): Promise<ServerProcess> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [CLI, 'serve', ...args], {
      cwd: ROOT,
      env: { ...process.env, FENCELOCK_SERVER_TOKEN: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    let exitCode: number | null | undefined;
    const exited = new Promise<number | null>((done) => {
      child.on('exit', (code) => {
        exitCode = code;
        done(code);
      });
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve ${args.join(' ')} did not listen in ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.stdout.resume();
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolvePromise({
          child,
          url: m[1]!,
          stderr: () => stderr,
          stop: async (signal = 'SIGTERM') => {
            if (exitCode === undefined) child.kill(signal);
            return exited;
          },
        });
      }
    });
    child.on('error', reject);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`serve ${args.join(' ')} exited with ${code} before listening\n${stderr}`));
    });
  });
}

/** Run the built CLI to completion (for usage errors and --help). */
export function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      cwd: ROOT,
      env: { ...process.env, FENCELOCK_SERVER_TOKEN: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}

/** One sample of the Prometheus text format. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Parse Prometheus text (no escapes in label values are needed by these tests). */
export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (m === null) throw new Error(`not a Prometheus sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)) labels[k!] = v!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return samples;
}

/** The value of the sample `name` whose labels are exactly `labels`, or undefined. */
export function sampleValue(
  samples: readonly Sample[],
  name: string,
  labels: Readonly<Record<string, string>>,
): number | undefined {
  const want = Object.entries(labels);
  return samples.find(
    (s) =>
      s.name === name &&
      Object.keys(s.labels).length === want.length &&
      want.every(([k, v]) => s.labels[k] === v),
  )?.value;
}
