// Bounded load test of the sidecar (`fencelock serve`), not part of the test suite: a real
// sidecar process on a loopback port over a real store, driven by autocannon for a fixed time.
// Each connection loops acquire → release on a few shared keys through the /v1/locks
// extensions; every answer is checked:
//   - no 5xx, no socket error, no timeout;
//   - no duplicated grant: a fencing token is never granted twice for one key, and no grant is
//     seen while another holder of the key has not yet sent its release;
//   - no lost grant: every grant's release answers `released` (not 404 not-held / 409 not-owner);
//   - the engine issued no grant nobody saw: in all, the keys' last fencing tokens (fresh keys,
//     so the number of grants) lie between the grants seen and the grants seen plus the
//     acquires still unanswered when the run stopped;
//   - afterwards, a key is held only by a grant whose answer or release the end of the run cut
//     (such grants end by their TTL).
// Prints requests/s, latency percentiles and the checks; exits 1 if a check fails.
//
// Usage: npm run build && node bench/sidecar-load.mjs [--store URL] [--duration s]
//          [--connections n] [--keys n] [--wait-ms ms] [--ttl-ms ms]
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
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
  },
});
const duration = Number(values.duration);
const connections = Number(values.connections);
const keyCount = Number(values.keys);
const waitMs = Number(values['wait-ms']);
const ttlMs = Number(values['ttl-ms']);
if (!(duration > 0 && duration <= 60)) throw new Error('--duration: 1 to 60 seconds');

/** Start `fencelock serve` on a free loopback port; resolves once it listens. */
function startServer() {
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      [
        join(ROOT, 'dist/cli/main.js'),
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
    let stderr = '';
    child.stdout.resume();
    child.stderr.setEncoding('utf8').on('data', (chunk) => {
      stderr += chunk;
      const m = /listening on (http:\/\/\S+)/.exec(stderr);
      if (m) resolve({ child, url: m[1] });
    });
    child.on('exit', (code) => reject(new Error(`serve exited with ${code}\n${stderr}`)));
  });
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

const server = await startServer();
process.stderr.write(
  `sidecar at ${server.url}, store ${values.store.replace(/\/\/.*@/, '//…@')}\n`,
);
try {
  const result = await autocannon({
    url: server.url,
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
          if (context.grant === undefined) {
            return { ...request, method: 'GET', path: '/healthz', body: undefined, headers: {} };
          }
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
        onResponse(status, _body, context) {
          if (status >= 500) tally.status5xx += 1;
          if (context.grant === undefined) return;
          if (status === 200) tally.released += 1;
          else tally.releaseRefused[status] = (tally.releaseRefused[status] ?? 0) + 1;
        },
      },
    ],
  });

  // Let the sidecar finish with connections autocannon cut at the end (it releases grants
  // whose caller hung up), then read what the engine says about every key.
  await new Promise((resolve) => setTimeout(resolve, 1000));
  let issued = 0n;
  let stillHeld = 0;
  let duplicates = 0;
  for (const key of keys) {
    const seen = tokens.get(key);
    duplicates += seen.length - new Set(seen.map(String)).size;
    const info = await (await fetch(`${server.url}${path(key)}`)).json();
    issued += BigInt(info.lastFencingToken);
    if (info.holder !== null) stillHeld += 1;
  }
  const unanswered = tally.acquiresSent - tally.acquiresAnswered;
  const granted = BigInt(tally.granted);
  const accountingOk = issued >= granted && issued <= granted + BigInt(unanswered);
  const refused = Object.values(tally.releaseRefused).reduce((a, b) => a + b, 0);
  const releasesInFlight = tally.releasesSent - tally.released - refused;

  const figures = {
    store: values.store.split(':')[0],
    durationS: duration,
    connections,
    keys: keyCount,
    waitMs,
    requests: result.requests.total,
    requestsPerSec: result.requests.average,
    latencyMs: {
      p50: result.latency.p50,
      p90: result.latency.p90,
      p99: result.latency.p99,
      max: result.latency.max,
    },
    errors: result.errors,
    timeouts: result.timeouts,
    status5xx: tally.status5xx + result['5xx'],
    grants: tally.granted,
    busyOrTimedOut: tally.busy,
    otherAcquireAnswers: tally.otherAcquire,
    released: tally.released,
    releasesRefused: tally.releaseRefused,
    releasesUnansweredAtEnd: releasesInFlight,
    acquiresUnansweredAtEnd: unanswered,
    tokensIssuedByEngine: Number(issued),
    duplicatedTokens: duplicates,
    overlappingGrants: tally.overlaps,
    keysStillHeldAfterRun: stillHeld,
  };
  const ok =
    figures.errors === 0 &&
    figures.timeouts === 0 &&
    figures.status5xx === 0 &&
    duplicates === 0 &&
    tally.overlaps === 0 &&
    refused === 0 &&
    Object.keys(tally.otherAcquire).length === 0 &&
    accountingOk &&
    // A key may still be held by a grant whose answer or release was cut by the end of the run.
    stillHeld <= releasesInFlight + Number(issued - granted);
  process.stdout.write(`${JSON.stringify({ ...figures, ok }, null, 2)}\n`);
  process.exitCode = ok ? 0 : 1;
} finally {
  server.child.kill('SIGTERM');
  await new Promise((resolve) => server.child.once('exit', resolve));
}
