/**
 * Helpers of the sidecar tests: a real sidecar process (`fencelock serve`, from the CLI compiled
 * into a private build of the sources, never a possibly stale `dist/`), an in-process sidecar for the
 * few tests that need the factory's objects, a small JSON HTTP client over `fetch`, and a
 * Prometheus text parser. Stores are real: the engines of `scripts/services.sh`, SQLite files,
 * and private `redis-server`s for fault tests.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { Redis } from 'ioredis';
import { vi } from 'vitest';
import {
  createSidecar,
  type Sidecar,
  type SidecarOptions,
} from '../../../packages/cli/src/server/index.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';
import { type PrivateRedis, startRedis } from '../../helpers/redis-server.js';
import { redisHarness } from '../handed/stores.js';

export { ROOT };

/** A token long enough for the sidecar (>= 16 characters). */
export const TOKEN = 'test-token-0123456789abcdef';

/** Hook timeout of `beforeAll(buildCli, …)`: the first build of a run compiles the workspaces. */
export const BUILD_TIMEOUT_MS = 180_000;

let cli: Promise<string> | undefined;

/**
 * The entry point of the CLI compiled from the current sources (a private build shared by every
 * test file of the run while the sources are unchanged). Call it in `beforeAll` with
 * `BUILD_TIMEOUT_MS`; `spawnServer` and `runCli` call it too.
 */
export function buildCli(): Promise<string> {
  cli ??= privateBuild('sidecar').then((build) => build.cli);
  cli.catch(() => {
    cli = undefined;
  });
  return cli;
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

/**
 * Request options: a JSON `body`, or `raw` text sent as is, with `contentType` (default
 * `application/json`; `null`: no Content-Type header at all).
 */
export interface CallOptions {
  readonly method?: string;
  readonly body?: unknown;
  readonly raw?: string | Uint8Array;
  readonly contentType?: string | null;
  readonly token?: string;
  readonly signal?: AbortSignal;
}

/** Send one request to `base + path` and read the whole answer. */
export async function call(base: string, path: string, options: CallOptions = {}): Promise<Answer> {
  const headers: Record<string, string> = {};
  let payload: string | Uint8Array | undefined;
  if (options.raw !== undefined) payload = options.raw;
  else if (options.body !== undefined) payload = JSON.stringify(options.body);
  if (payload !== undefined && options.contentType !== null) {
    headers['content-type'] = options.contentType ?? 'application/json';
  }
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const response = await fetch(`${base}${path}`, {
    method: options.method ?? (payload === undefined ? 'GET' : 'POST'),
    headers,
    // Bytes: fetch adds no Content-Type of its own (it would for a string).
    ...(payload === undefined
      ? {}
      : { body: typeof payload === 'string' ? new TextEncoder().encode(payload) : payload }),
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

/**
 * An in-process sidecar listening on a free loopback port. Only for tests that need the
 * factory's objects (its registry, `close()`, the process's own handles); the HTTP API is tested
 * against sidecar processes (`spawnServer`).
 */
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

/**
 * POST the headers of a body the sidecar refuses for its size, and read its answer. The sidecar
 * answers 413 from the declared Content-Length alone and closes the connection without reading
 * the body, so a client writing a body larger than the socket's buffers races that close (fetch
 * failed with EPIPE in CI run 40). This sends the headers only, and hangs up once answered.
 * Rejects when the connection fails before an answer.
 */
export function postTooLarge(
  base: string,
  path: string,
  body: unknown,
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON fields
): Promise<{ status: number; body: any }> {
  const length = Buffer.byteLength(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': length },
    });
    req.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => {
        req.destroy();
        resolve({
          status: response.statusCode ?? 0,
          body: JSON.parse(Buffer.concat(chunks).toString('utf8')),
        });
      });
      response.on('error', reject);
    });
    req.on('error', reject);
    req.flushHeaders();
  });
}

/** A sidecar process started from the built CLI. */
export interface ServerProcess {
  readonly child: ChildProcess;
  readonly url: string;
  /** `host:port` of the gRPC server, when started with `--grpc-port`. */
  readonly grpcAddress: string | undefined;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /** Send `signal` and resolve with the exit code once the process is gone. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Run `node <build>/packages/cli/dist/cli/main.js serve <args>` and wait until it listens (or exits). */
export async function spawnServer(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 20_000,
): Promise<ServerProcess> {
  const entry = await buildCli();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [entry, 'serve', ...args], {
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
      const m = /listening on (http:\/\/\S+)(?: and gRPC on (\S+))?/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolvePromise({
          child,
          url: m[1]!,
          grpcAddress: m[2],
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

/**
 * `fencelock serve --store <store> --port 0 <args>`: a sidecar process on a free loopback port,
 * with `env` added to its environment.
 */
export function serveStore(
  store: string,
  args: readonly string[] = [],
  env: NodeJS.ProcessEnv = {},
): Promise<ServerProcess> {
  return spawnServer(['--store', store, '--port', '0', ...args], env);
}

/** Run the built CLI to completion (for usage errors and --help). */
export async function runCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const entry = await buildCli();
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [entry, ...args], {
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

/**
 * A private `redis-server` (`startRedis`) that is surely the one this process started: its
 * `process_id` is checked, since a port found free a moment ago may have been taken meanwhile by
 * another test's server (which would then answer the readiness PING in its place).
 */
export async function startOwnRedis(): Promise<PrivateRedis> {
  for (let tries = 0; tries < 5; tries += 1) {
    const redis = await startRedis();
    const probe = new Redis(redis.url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
    probe.on('error', () => undefined);
    let info = '';
    try {
      info = await probe.info('server');
    } catch {
      // not answering: try another
    } finally {
      probe.disconnect();
    }
    if (new RegExp(`^process_id:${redis.pid}\\r?$`, 'm').test(info)) return redis;
    await redis.stop();
  }
  throw new Error('could not start a private redis-server of our own');
}

/** `GET /metrics`, parsed. */
export async function scrape(base: string, token?: string): Promise<Sample[]> {
  const answer = await call(base, '/metrics', token === undefined ? {} : { token });
  if (answer.status !== 200) throw new Error(`/metrics answered ${answer.status}: ${answer.text}`);
  return parsePrometheus(answer.text);
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

/**
 * The value of the sample `name` whose labels include `labels`, or undefined. Labels not named
 * (e.g. `store`, which names the one store a sidecar serves) do not matter, but must not tell
 * two samples apart: that throws.
 */
export function sampleValue(
  samples: readonly Sample[],
  name: string,
  labels: Readonly<Record<string, string>>,
): number | undefined {
  const want = Object.entries(labels);
  const found = samples.filter((s) => s.name === name && want.every(([k, v]) => s.labels[k] === v));
  if (found.length > 1) {
    throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  }
  return found[0]?.value;
}

/**
 * A Server-Sent Events stream read with fetch: the `data:` of each event as parsed JSON, in
 * `events`, and with its `event:` name (`message` when it has none) in `named`.
 */
export interface EventStream {
  readonly response: Response;
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary JSON fields
  readonly events: any[];
  // biome-ignore lint/suspicious/noExplicitAny: as `events`
  readonly named: { readonly event: string; readonly data: any }[];
  /** Resolves once the server ended the stream (or the client closed it). */
  readonly ended: Promise<void>;
  /** Hang up. */
  close(): Promise<void>;
}

export async function openEvents(
  base: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<EventStream> {
  const controller = new AbortController();
  const response = await fetch(`${base}${path}`, { signal: controller.signal, headers });
  // biome-ignore lint/suspicious/noExplicitAny: see EventStream
  const events: any[] = [];
  const named: EventStream['named'] = [];
  if (response.body === null) throw new Error('no body');
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  const ended = (async () => {
    let buffer = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const lines = block.split('\n');
          const data = lines
            .filter((line) => line.startsWith('data: '))
            .map((line) => line.slice('data: '.length))
            .join('\n');
          if (data === '') continue;
          const parsed = JSON.parse(data);
          events.push(parsed);
          const name = lines.find((line) => line.startsWith('event: '));
          named.push({ event: name?.slice('event: '.length) ?? 'message', data: parsed });
        }
      }
    } catch {
      // hung up
    }
  })();
  return {
    response,
    events,
    named,
    ended,
    close() {
      controller.abort();
      return ended;
    },
  };
}

/**
 * Track the interval timers started from now on with one of `periodsMs` (`setInterval` and
 * `clearInterval` spied on until `vi.restoreAllMocks()`).
 * @returns how many of them are still running.
 */
export function trackIntervals(periodsMs: readonly number[]): () => number {
  const timers: unknown[] = [];
  const cleared = new Set<unknown>();
  const { setInterval: realSet, clearInterval: realClear } = globalThis;
  vi.spyOn(globalThis, 'setInterval').mockImplementation(((fn: () => void, ms?: number) => {
    const timer = realSet(fn, ms);
    if (ms !== undefined && periodsMs.includes(ms)) timers.push(timer);
    return timer;
  }) as typeof setInterval);
  vi.spyOn(globalThis, 'clearInterval').mockImplementation(((timer) => {
    cleared.add(timer);
    realClear(timer);
  }) as typeof clearInterval);
  return () => timers.filter((t) => !cleared.has(t)).length;
}
