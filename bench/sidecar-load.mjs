// Bounded load test of the sidecar (`fencelock serve`): a real sidecar process on a loopback
// port over a real store, driven by autocannon for a fixed time. `npm run test:all` runs it for
// 10 s on Redis (`npm run bench:sidecar`). Each connection loops acquire → release on a few
// shared keys through the /v1/locks extensions (an acquire answered busy is followed by the next
// acquire, so every request measured is a lock operation); every answer is checked:
//   - no 5xx, no socket error, no timeout;
//   - no duplicated grant: a fencing token is never granted twice for one key, and no grant is
//     seen while another holder of the key has not yet sent its release;
//   - fencing tokens strictly increase per key, in the order the grants were answered (a grant
//     of a key is answered only after the previous holder's release was sent);
//   - no lost grant: every grant's release answers `released` (not 404 not-held / 409 not-owner);
//   - the sidecar got no grant nobody saw: the grants its locker counted (`GET /metrics`,
//     `fencelock_acquire_attempts_total{outcome="granted"}`) lie between the grants seen and the
//     grants seen plus the acquires still unanswered when the run stopped;
//   - afterwards, a key is held only by a grant whose answer or release the end of the run cut
//     (such grants end by their TTL).
// Prints requests/s, latency percentiles and the checks (`--json`: one JSON object on stdout
// instead); exits 1 if a check fails or the run does not finish in time, 2 on bad usage.
// The sidecar is stopped on every way out (SIGTERM, then SIGKILL; SIGKILL from an exit hook),
// and a deadline of the run's length plus DEADLINE_MARGIN_S ends a run that hangs.
//
// Usage: npm run bench:sidecar -- [options]   (or, after `npm run build`:
//        node bench/sidecar-load.mjs [options])
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
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

const HELP = `Usage: npm run bench:sidecar -- [options]
  --store <url>        store of the sidecar (default: redis://127.0.0.1:$FENCELOCK_REDIS_PORT or 6390)
  --duration <s>       length of the run, 1 to 60 seconds (default 10)
  --connections <n>    concurrent HTTP connections (default 32)
  --keys <n>           keys shared by the connections (default 8)
  --wait-ms <ms>       waitMs of each acquire; 0: busy answers at once (default 0)
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
  usageError('sidecar-load', error.message);
}
if (values.help) {
  process.stdout.write(`${HELP}\n`);
  process.exit(0);
}

const integerOption = integerOptions('sidecar-load', values);

const duration = integerOption('duration', 1, 60);
const connections = integerOption('connections', 1, 1000);
const keyCount = integerOption('keys', 1, 10_000);
const waitMs = integerOption('wait-ms', 0, 60_000);
const ttlMs = integerOption('ttl-ms', 10, 3_600_000);
/** The store URL without its password, for what this script prints. */
const storeShown = redactStoreUrl(values.store);

/** The sidecar process, once spawned (stopped on every way out). */
let child;
const deadline = guardRun(
  'sidecar-load',
  () => child,
  duration + DEADLINE_MARGIN_S,
  ` (--duration ${duration} + ${DEADLINE_MARGIN_S} s)`,
);

/** Start `fencelock serve` on a free loopback port; resolves once it listens. */
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
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
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

/** SIGTERM the sidecar (a graceful shutdown), SIGKILL it if it is still there after a while. */
async function stopServer() {
  if (!running(child)) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(killer);
}

const run = randomUUID();
const keys = Array.from({ length: keyCount }, (_, i) => `sidecar-bench:${run}:k${i}`);
const path = (key, action) => `/v1/locks/${encodeURIComponent(key)}${action ? `/${action}` : ''}`;

const tally = {
  acquiresSent: 0,
  acquiresAnswered: 0,
  granted: 0,
  busy: 0,
  otherAcquire: {},
  releasesSent: 0,
  released: 0,
  releaseRefused: {},
  status5xx: 0,
  overlaps: 0,
};
/** Per key: the owner believed to hold it (from its grant until its release is sent). */
const holder = new Map();
/** Per key: every fencing token seen in a grant. */
const tokens = new Map(keys.map((k) => [k, []]));
let ownerSeq = 0;

/** The figures of a finished run, and whether every check held. */
async function measure(url) {
  const result = await autocannon({
    url,
    connections,
    duration,
    timeout: 30,
    requests: [
      {
        method: 'POST',
        setupRequest(request, context) {
          const key = keys[Math.floor(Math.random() * keys.length)];
          const owner = `bench-${ownerSeq++}`;
          context.key = key;
          context.owner = owner;
          context.grant = undefined;
          tally.acquiresSent += 1;
          return {
            ...request,
            method: 'POST',
            path: path(key, 'acquire'),
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ owner, ttlMs, waitMs }),
          };
        },
        onResponse(status, body, context) {
          tally.acquiresAnswered += 1;
          if (status >= 500) tally.status5xx += 1;
          if (status === 200) {
            const grant = JSON.parse(body);
            tally.granted += 1;
            if (holder.has(context.key)) tally.overlaps += 1;
            holder.set(context.key, context.owner);
            tokens.get(context.key).push(BigInt(grant.fencingToken));
            context.grant = grant;
          } else if (status === 409) {
            tally.busy += 1;
          } else {
            tally.otherAcquire[status] = (tally.otherAcquire[status] ?? 0) + 1;
          }
        },
      },
      {
        setupRequest(request, context) {
          // Not granted: nothing to release; a falsy answer makes autocannon start over with
          // the next acquire.
          if (context.grant === undefined) return undefined;
          // From here on another grant of the key is legitimate.
          if (holder.get(context.key) === context.owner) holder.delete(context.key);
          tally.releasesSent += 1;
          return {
            ...request,
            method: 'POST',
            path: path(context.key, 'release'),
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              owner: context.owner,
              fencingToken: context.grant.fencingToken,
            }),
          };
        },
        onResponse(status, _body) {
          if (status >= 500) tally.status5xx += 1;
          if (status === 200) tally.released += 1;
          else tally.releaseRefused[status] = (tally.releaseRefused[status] ?? 0) + 1;
        },
      },
    ],
  });

  // Requests autocannon cut at the end still run to completion in the sidecar (it does not
  // withdraw a grant whose caller hung up: packages/cli/src/server/routes/locks.ts leaves it to its TTL, as
  // the caller may retry with the same owner). Give them a moment to land, then read what the
  // engine says about every key.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  let stillHeld = 0;
  let duplicates = 0;
  let tokenReversals = 0;
  for (const key of keys) {
    const seen = tokens.get(key);
    duplicates += seen.length - new Set(seen.map(String)).size;
    for (let i = 1; i < seen.length; i++) if (seen[i] <= seen[i - 1]) tokenReversals += 1;
    const response = await fetch(`${url}${path(key)}`, { signal: AbortSignal.timeout(10_000) });
    if (!response.ok) throw new Error(`inspect of ${key}: HTTP ${response.status}`);
    const info = await response.json();
    if (info.holder !== null) stillHeld += 1;
  }
  const unanswered = tally.acquiresSent - tally.acquiresAnswered;
  const refused = Object.values(tally.releaseRefused).reduce((a, b) => a + b, 0);
  const releasesInFlight = tally.releasesSent - tally.released - refused;
  const lockRequests = tally.acquiresAnswered + tally.released + refused;
  // Grants the sidecar got that no answer reported (their answers were cut by the end of the run).
  const sidecarGrants = await grantsCountedBySidecar(url);
  const unseenGrants = sidecarGrants - tally.granted;

  const figures = {
    store: storeShown,
    durationS: duration,
    connections,
    keys: keyCount,
    waitMs,
    ttlMs,
    requests: result.requests.total,
    requestsPerSec: result.requests.average,
    lockRequestsAnswered: lockRequests,
    latencyMs: {
      p50: result.latency.p50,
      p90: result.latency.p90,
      p99: result.latency.p99,
      max: result.latency.max,
    },
    errors: result.errors,
    timeouts: result.timeouts,
    status5xx: Math.max(tally.status5xx, result['5xx']),
    grants: tally.granted,
    busyOrTimedOut: tally.busy,
    otherAcquireAnswers: tally.otherAcquire,
    released: tally.released,
    releasesRefused: tally.releaseRefused,
    releasesUnansweredAtEnd: releasesInFlight,
    acquiresUnansweredAtEnd: unanswered,
    grantsCountedBySidecar: sidecarGrants,
    duplicatedTokens: duplicates,
    tokensNotIncreasing: tokenReversals,
    overlappingGrants: tally.overlaps,
    keysStillHeldAfterRun: stillHeld,
  };
  const checks = {
    'no socket error or timeout': figures.errors === 0 && figures.timeouts === 0,
    'no 5xx': figures.status5xx === 0,
    'every acquire answered 200 or 409': Object.keys(tally.otherAcquire).length === 0,
    'no duplicated fencing token': duplicates === 0,
    'fencing tokens strictly increase per key': tokenReversals === 0,
    'no overlapping grant': tally.overlaps === 0,
    'no lost grant (every release released)': refused === 0,
    'sidecar got no grant nobody saw': unseenGrants >= 0 && unseenGrants <= unanswered,
    // A key may still be held by a grant whose answer or release was cut by the end of the run.
    'keys held afterwards only by grants the end cut': stillHeld <= releasesInFlight + unseenGrants,
  };
  return { figures, checks, ok: Object.values(checks).every((held) => held !== false) };
}

/** The figures as a few lines of text. */
function summary({ figures: f, checks, ok }) {
  const lines = [
    `sidecar load test: ${f.store}, ${f.durationS} s, ${f.connections} connections, ${f.keys} keys, waitMs ${f.waitMs}`,
    `  ${f.requestsPerSec} requests/s (${f.requests} requests: ${f.grants} grants, ${f.busyOrTimedOut} busy, ${f.released} releases)`,
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
  const url = await startServer();
  process.stderr.write(`sidecar at ${url}, store ${storeShown}\n`);
  const outcome = await measure(url);
  process.stdout.write(
    values.json
      ? `${JSON.stringify({ ...outcome.figures, checks: outcome.checks, ok: outcome.ok })}\n`
      : summary(outcome),
  );
  process.exitCode = outcome.ok ? 0 : 1;
} catch (error) {
  process.stderr.write(`sidecar-load: ${error?.stack ?? error}\n`);
  process.exitCode = 1;
} finally {
  await stopServer();
  clearTimeout(deadline);
}
