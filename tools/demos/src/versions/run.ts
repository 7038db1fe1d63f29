/**
 * The versions demo's orchestrator: five lock designs, one after the other, on one Redis, each in
 * its own key namespace `fencelock:demo-versions:<run id>:<version>`, each under the fault that
 * breaks it (see `scenarios.ts`). Every key the run made is deleted and every client process has
 * exited when `runVersionsDemo` settles, also when it fails or is interrupted; an `exit` hook
 * SIGKILLs clients should the orchestrator itself end abruptly.
 */
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { parseRedisUrl } from 'fencelock/redis';
import { Redis } from 'ioredis';
import { killAllClients } from './clients.js';
import { VERSION_IDS } from './defaults.js';
import type { VersionResult, VersionsResult } from './report.js';
import { countKeys, deleteKeys, runVersion, type ScenarioContext } from './scenarios.js';

/** Options of one run; the CLI validates them. */
export interface VersionsOptions {
  /** `redis://…` or `rediss://…` of a single Redis node. */
  readonly store: string;
  /** Lease length of v2–v5, ms. */
  readonly ttlMs: number;
  /** Called once Redis has answered, before the first version starts. */
  readonly onStart?:
    | ((info: { readonly store: string; readonly namespace: string }) => void)
    | undefined;
  /** Called with each version's result as soon as it is done. */
  readonly onVersion?: ((result: VersionResult) => void) | undefined;
}

/** The run was interrupted (SIGINT / SIGTERM); clients were stopped and keys deleted. */
export class VersionsInterrupted extends Error {
  readonly signal: NodeJS.Signals;
  constructor(signal: NodeJS.Signals) {
    super(`interrupted by ${signal}`);
    this.name = 'VersionsInterrupted';
    this.signal = signal;
  }
}

/**
 * Run the five versions and return their figures.
 * @throws Error when Redis cannot be reached, a client fails, or the run is interrupted
 *   (`VersionsInterrupted`); every client has exited and the run's keys are deleted by then.
 */
export async function runVersionsDemo(options: VersionsOptions): Promise<VersionsResult> {
  const { url } = parseRedisUrl(new URL(options.store));
  const redisUrl = url!;
  const namespace = `fencelock:demo-versions:${randomBytes(4).toString('hex')}`;
  const startedAt = performance.now();
  const redis = new Redis(redisUrl, {
    lazyConnect: true,
    maxRetriesPerRequest: 2,
    connectTimeout: 5000,
    retryStrategy: (times) => (times > 3 ? null : 200),
  });
  // Commands report their own failures; without a listener ioredis would log each reconnect.
  let connectionError: Error | undefined;
  redis.on('error', (error: Error) => {
    connectionError = error;
  });
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    const cause = connectionError ?? (error as Error);
    throw new Error(`cannot reach Redis at ${redisUrl}: ${cause.message}`, { cause });
  }

  options.onStart?.({ store: redisUrl, namespace });
  const abort = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => abort.abort(new VersionsInterrupted(signal));
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  process.on('exit', killAllClients);
  const ctx: ScenarioContext = {
    redis,
    redisUrl,
    namespace,
    ttlMs: options.ttlMs,
    abort: abort.signal,
  };
  const versions: VersionResult[] = [];
  let keysLeft = 0;
  let failure: { error: unknown } | undefined;
  try {
    for (const version of VERSION_IDS) {
      const result = await runVersion(ctx, version);
      versions.push(result);
      options.onVersion?.(result);
    }
  } catch (error) {
    failure = { error };
  }
  try {
    // Each version deletes its own keys; this catches whatever a failed one left.
    await deleteKeys(redis, `${namespace}:*`);
    keysLeft = await countKeys(redis, `${namespace}:*`);
  } catch (error) {
    // A failed clean-up must not hide the run's own error.
    failure ??= { error };
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    process.off('exit', killAllClients);
    await redis.quit().catch(() => redis.disconnect());
  }
  if (failure !== undefined) throw failure.error;
  return {
    store: redisUrl,
    ttlMs: options.ttlMs,
    namespace,
    versions,
    keysLeft,
    elapsedMs: Math.round(performance.now() - startedAt),
    ok: keysLeft === 0 && versions.every((r) => r.reproduced),
  };
}
