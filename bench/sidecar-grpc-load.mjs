// Bounded load test of the sidecar's gRPC server (`fencelock serve --grpc-port`), the gRPC
// counterpart of sidecar-load.mjs: a real sidecar process over a real store, driven for a fixed
// time by `--connections` concurrent callers (one @grpc/grpc-js channel each, clients built by
// @grpc/proto-loader from the shipped packages/cli/proto/fencelock/v1/locks.proto). Each caller
// loops fencelock.v1.Locks Acquire → Release on a few shared keys. Checked, as over HTTP:
//   - no call fails with another status than ABORTED / DEADLINE_EXCEEDED (not granted);
//   - no duplicated grant: a fencing token is never granted twice for one key, and no grant is
//     seen while another holder of the key has not yet sent its release;
//   - fencing tokens strictly increase per key, in the order the grants were answered;
//   - no lost grant: every Release succeeds (no NOT_FOUND / FAILED_PRECONDITION);
//   - the sidecar got no grant nobody saw: the grants its locker counted (`GET /metrics`) equal
//     the grants seen (every call is awaited before the run ends, so none is cut);
//   - afterwards, no key is held.
// Prints calls/s, latency percentiles and the checks (`--json`: one JSON object on stdout);
// exits 1 if a check fails or the run does not finish in time, 2 on bad usage. The sidecar is
// stopped on every way out.
//
// Usage: npm run bench:sidecar-grpc -- [options]   (or, after `npm run build`:
//        node bench/sidecar-grpc-load.mjs [options])
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { credentials, loadPackageDefinition, status } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { redactStoreUrl } from 'fencelock';
import { guardRun, integerOptions, running, usageError } from './lib/load-run.mjs';
import { grantsCountedBySidecar } from './lib/sidecar-metrics.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
/** Time allowed beyond `--duration` for start, drain, checks and shutdown, seconds. */
const DEADLINE_MARGIN_S = 60;
/** Longest wait for the sidecar to listen, ms. */
const START_TIMEOUT_MS = 20_000;
/** Longest wait for the sidecar to exit after SIGTERM before it gets SIGKILL, ms. */
const STOP_TIMEOUT_MS = 5_000;
/** Deadline of each call, ms: a call that takes longer counts as a timeout. */
const CALL_DEADLINE_MS = 30_000;

const HELP = `Usage: npm run bench:sidecar-grpc -- [options]
  --store <url>        store of the sidecar (default: redis://127.0.0.1:$FENCELOCK_REDIS_PORT or 6390)
  --duration <s>       length of the run, 1 to 60 seconds (default 10)
  --connections <n>    concurrent callers, one gRPC channel each (default 32)
  --keys <n>           keys shared by the callers (default 8)
  --wait-ms <ms>       waitMs of each Acquire; 0: busy answers at once (default 0)
  --ttl-ms <ms>        ttlMs of each grant (default 10000)
  --json               print the figures as one JSON object on stdout
  -h, --help           this text`;

let values;
try {
  ({ values } = parseArgs({
    options: {
      store: {
        type: 'string',
        default: `redis://127.0.0.1:${process.env.FENCELOCK_REDIS_PORT ?? 6390}`,
      },
      duration: { type: 'string', default: '10' },
      connections: { type: 'string', default: '32' },
      keys: { type: 'string', default: '8' },
      'wait-ms': { type: 'string', default: '0' },
      'ttl-ms': { type: 'string', default: '10000' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  }));
} catch (error) {
  usageError('sidecar-grpc-load', error.message);
}
if (values.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}

const integerOption = integerOptions('sidecar-grpc-load', values);

const duration = integerOption('duration', 1, 60);
const connections = integerOption('connections', 1, 1000);
const keyCount = integerOption('keys', 1, 10_000);
const waitMs = integerOption('wait-ms', 0, 60_000);
const ttlMs = integerOption('ttl-ms', 100, 3_600_000);
/** The store URL without its password, for what this script prints. */
const storeShown = redactStoreUrl(values.store);

/** The sidecar process, once spawned (stopped on every way out). */
let child;
const deadline = guardRun('sidecar-grpc-load', () => child, duration + DEADLINE_MARGIN_S, '');

/**
 * Start `fencelock serve --grpc-port 0`; resolves with its HTTP base URL (for `/metrics`) and its
 * gRPC address once it listens.
 */
function startServer() {
  return new Promise((resolve, reject) => {
    child = spawn(
      process.execPath,
      [
        join(ROOT, 'packages/cli/dist/cli/main.js'),
        'serve',
        '--store',
        values.store,
        '--port',
        '0',
        '--grpc-port',
        '0',
        '--max-wait',
        String(Math.max(waitMs, 1000)),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FENCELOCK_SERVER_TOKEN: '' } },
    );
    const timer = setTimeout(
      () => reject(new Error(`serve did not listen within ${START_TIMEOUT_MS} ms\n${stderr}`)),
      START_TIMEOUT_MS,
    );
    let stderr = '';
    child.stdout.resume();
    child.stderr.setEncoding('utf8').on('data', (chunk) => {
      stderr += chunk;
      const m = /listening on (\S+) and gRPC on (\S+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve({ httpUrl: m[1], address: m[2] });
      }
    });
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code ?? signal}\n${stderr}`));
    });
  });
}

async function stopServer() {
  if (!running(child)) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(killer);
}

const Locks = loadPackageDefinition(
  loadSync('fencelock/v1/locks.proto', {
    includeDirs: [join(ROOT, 'packages/cli/proto')],
    longs: String,
    enums: Number,
    defaults: true,
    oneofs: true,
  }),
).fencelock.v1.Locks;

/** One unary call: resolves `{ response }` or `{ error }`, and its latency in ms. */
function call(client, method, request) {
  const started = performance.now();
  return new Promise((resolve) => {
    client[method](request, { deadline: Date.now() + CALL_DEADLINE_MS }, (error, response) =>
      resolve({ error, response, latencyMs: performance.now() - started }),
    );
  });
}

const run = randomUUID();
const keys = Array.from({ length: keyCount }, (_, i) => `sidecar-grpc-bench:${run}:k${i}`);
const tally = {
  calls: 0,
  granted: 0,
  busy: 0,
  released: 0,
  releaseRefused: {},
  otherFailures: {},
  timeouts: 0,
  overlaps: 0,
};
const latencies = [];
const holder = new Map();
const tokens = new Map(keys.map((k) => [k, []]));
let ownerSeq = 0;

/** One caller: Acquire → Release until the run's end. */
async function caller(client, endAt) {
  while (performance.now() < endAt) {
    const key = keys[Math.floor(Math.random() * keys.length)];
    const owner = `bench-${ownerSeq++}`;
    const acquired = await call(client, 'Acquire', { key, owner, ttlMs, waitMs });
    tally.calls += 1;
    latencies.push(acquired.latencyMs);
    if (acquired.error) {
      const { code } = acquired.error;
      if (code === status.ABORTED || (code === status.DEADLINE_EXCEEDED && waitMs > 0)) {
        tally.busy += 1;
      } else if (code === status.DEADLINE_EXCEEDED) {
        tally.timeouts += 1;
      } else {
        tally.otherFailures[status[code]] = (tally.otherFailures[status[code]] ?? 0) + 1;
      }
      continue;
    }
    const grant = acquired.response;
    tally.granted += 1;
    if (holder.has(key)) tally.overlaps += 1;
    holder.set(key, owner);
    tokens.get(key).push(BigInt(grant.fencingToken));
    // Hold the key across a turn of the event loop, so that a grant answered to another caller
    // meanwhile would be seen as an overlap.
    await new Promise((resolve) => setImmediate(resolve));
    holder.delete(key);
    const released = await call(client, 'Release', {
      key,
      owner,
      fencingToken: grant.fencingToken,
    });
    tally.calls += 1;
    latencies.push(released.latencyMs);
    if (released.error) {
      const name = status[released.error.code];
      tally.releaseRefused[name] = (tally.releaseRefused[name] ?? 0) + 1;
    } else {
      tally.released += 1;
    }
  }
}

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return (
    Math.round(sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] * 100) /
    100
  );
}

async function measure({ httpUrl, address }) {
  const clients = Array.from(
    { length: connections },
    // A channel per caller: grpc-js shares one connection between clients of one target
    // unless their options differ.
    (_, i) => new Locks(address, credentials.createInsecure(), { 'bench.channel': i }),
  );
  try {
    const started = performance.now();
    const endAt = started + duration * 1000;
    await Promise.all(clients.map((client) => caller(client, endAt)));
    const elapsedS = (performance.now() - started) / 1000;

    let stillHeld = 0;
    let duplicates = 0;
    let tokenReversals = 0;
    for (const key of keys) {
      const seen = tokens.get(key);
      duplicates += seen.length - new Set(seen.map(String)).size;
      for (let i = 1; i < seen.length; i++) if (seen[i] <= seen[i - 1]) tokenReversals += 1;
      const inspected = await call(clients[0], 'Inspect', { key });
      if (inspected.error) throw new Error(`Inspect of ${key}: ${inspected.error.message}`);
      if (inspected.response.holder) stillHeld += 1;
    }
    const sidecarGrants = await grantsCountedBySidecar(httpUrl);
    latencies.sort((a, b) => a - b);
    const refused = Object.values(tally.releaseRefused).reduce((a, b) => a + b, 0);
    const figures = {
      store: storeShown,
      durationS: duration,
      connections,
      keys: keyCount,
      waitMs,
      ttlMs,
      calls: tally.calls,
      callsPerSec: Math.round(tally.calls / elapsedS),
      latencyMs: {
        p50: percentile(latencies, 50),
        p90: percentile(latencies, 90),
        p99: percentile(latencies, 99),
        max: percentile(latencies, 100),
      },
      grants: tally.granted,
      busyOrTimedOut: tally.busy,
      released: tally.released,
      releasesRefused: tally.releaseRefused,
      otherFailures: tally.otherFailures,
      timeouts: tally.timeouts,
      grantsCountedBySidecar: sidecarGrants,
      duplicatedTokens: duplicates,
      tokensNotIncreasing: tokenReversals,
      overlappingGrants: tally.overlaps,
      keysStillHeldAfterRun: stillHeld,
    };
    const checks = {
      'no failed call or timeout':
        Object.keys(tally.otherFailures).length === 0 && tally.timeouts === 0,
      'no duplicated fencing token': duplicates === 0,
      'fencing tokens strictly increase per key': tokenReversals === 0,
      'no overlapping grant': tally.overlaps === 0,
      'no lost grant (every release released)': refused === 0,
      'sidecar got no grant nobody saw': sidecarGrants === tally.granted,
      'no key held afterwards': stillHeld === 0,
    };
    return { figures, checks, ok: Object.values(checks).every((held) => held !== false) };
  } finally {
    for (const client of clients) client.close();
  }
}

function summary({ figures: f, checks, ok }) {
  const lines = [
    `sidecar gRPC load test: ${f.store}, ${f.durationS} s, ${f.connections} callers, ${f.keys} keys, waitMs ${f.waitMs}`,
    `  ${f.callsPerSec} calls/s (${f.calls} calls: ${f.grants} grants, ${f.busyOrTimedOut} busy, ${f.released} releases)`,
    `  latency p50 ${f.latencyMs.p50} ms, p90 ${f.latencyMs.p90} ms, p99 ${f.latencyMs.p99} ms, max ${f.latencyMs.max} ms`,
    ...Object.entries(checks).map(
      ([what, held]) =>
        `  ${held === null ? 'n/a ' : held ? 'ok  ' : 'FAIL'} ${what}${held === null ? ' (tokens of this store do not count grants)' : ''}`,
    ),
    ok ? 'all checks held' : `FAILED: ${JSON.stringify(f)}`,
  ];
  return `${lines.join('\n')}\n`;
}

try {
  const listening = await startServer();
  process.stderr.write(`sidecar gRPC at ${listening.address}, store ${storeShown}\n`);
  const outcome = await measure(listening);
  process.stdout.write(
    values.json
      ? `${JSON.stringify({ ...outcome.figures, checks: outcome.checks, ok: outcome.ok })}\n`
      : summary(outcome),
  );
  process.exitCode = outcome.ok ? 0 : 1;
} catch (error) {
  process.stderr.write(`sidecar-grpc-load: ${error?.stack ?? error}\n`);
  process.exitCode = 1;
} finally {
  await stopServer();
  clearTimeout(deadline);
}
