#!/usr/bin/env node
// `npm run bench`: fencelock next to its peers and the raw engine, side by side in one run
// (issues 7 and 20). Usage:
//   node bench/run.mjs [--quick] [--only <store|contender>[,…]] [--runs N]
//                      [--workload uncontended|contended|semaphore|multikey|many|partial[,…]]
//                      [--out DIR] [--profile] [--reuse FILE]
// Writes bench/results/<YYYY-MM-DD>.json, .md and .svg (a --quick or partial run writes to a
// temporary folder unless --out is given, so it never replaces a committed result).
import { mkdirSync, readFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { cleanUp } from './lib/cleanup.mjs';
import { CONTENDERS, STORES, TTL_MS, WORKLOADS } from './lib/contenders.mjs';
import {
  ENGINE_OF,
  endpoints as engineEndpoints,
  ensureBuild,
  ensureCurator,
  ensureEngines,
  machine,
  packageVersion,
  ROOT,
  writeFile,
} from './lib/env.mjs';
import { buildReport } from './lib/report.mjs';
import { nowMs } from './lib/stats.mjs';
import {
  closedPorts,
  contended,
  manyLeases,
  multikey,
  PROCESSES,
  roundTripMs,
  semaphore,
  uncontended,
} from './lib/workloads.mjs';

/** The full run: every workload, 3 runs each, about 20 minutes on 2 shared cores. */
const FULL = {
  runs: 3,
  holdMs: 1,
  uncontended: { levels: [1, 16, 64], warmupMs: 200, durationMs: 1000 },
  contended: { clients: [16, 64], warmupMs: 200, durationMs: 1500, drainMs: 1500 },
  semaphore: { clients: [16, 64], permits: 4, warmupMs: 200, durationMs: 1500, drainMs: 1500 },
  multikey: {
    clients: [16, 64],
    keys: 3,
    pool: 8,
    warmupMs: 200,
    durationMs: 1500,
    drainMs: 1500,
  },
  many: {
    count: 10_000,
    ttlMs: TTL_MS,
    holdMs: 60_000,
    concurrency: 64,
    inFlight: 'per-engine',
    enginesInTurn: true,
  },
  partial: { clients: 16, warmupMs: 0, durationMs: 3000, drainMs: 1000, closeMs: 3000 },
};

/** --quick: every contender and workload once, briefly: it checks that the bench runs. */
const QUICK = {
  runs: 1,
  holdMs: 1,
  uncontended: { levels: [1, 16], warmupMs: 50, durationMs: 250 },
  contended: { clients: [16], warmupMs: 50, durationMs: 300, drainMs: 500 },
  semaphore: { clients: [16], permits: 4, warmupMs: 50, durationMs: 300, drainMs: 500 },
  multikey: { clients: [16], keys: 3, pool: 8, warmupMs: 50, durationMs: 300, drainMs: 500 },
  many: {
    count: 100,
    ttlMs: 6000,
    holdMs: 2500,
    concurrency: 32,
    inFlight: 'per-engine',
    enginesInTurn: true,
  },
  partial: { clients: 16, warmupMs: 0, durationMs: 800, drainMs: 300, closeMs: 2000 },
};

const HELP = `Usage: node bench/run.mjs [options]   (npm run bench -- [options])
  --quick               every contender once, briefly (about a minute); never fails on a ratio
  --only <names>        stores (redis, redlock, etcd, zookeeper|zk, postgres|pg, sqlite),
                        contenders (fencelock, raw, node-redlock, sesame-redlock, redis-semaphore,
                        etcd3-lock, curator) or ids (redis/node-redlock:tuned,
                        redis/redis-semaphore.Semaphore); comma-separated
  --runs N              repeats of each workload (default 3; --quick: 1)
  --workload <names>    uncontended, contended, semaphore (N permits of one key), multikey
                        (K keys of a small pool per acquire), many, partial (default: all)
  --out DIR             where to write <date>.json/.md/.svg (default: bench/results for a full
                        run, a temporary folder for a --quick, --only, --workload or --runs one)
  --profile             run fencelock's workers with node --cpu-prof (profiles in <out>/profiles)
  --reuse FILE          take the workloads this run leaves out (--workload) from an earlier
                        result's JSON and write one report of both (default --out: its folder)`;

const ALIASES = { zk: 'zookeeper', pg: 'postgres', postgresql: 'postgres' };

function selectContenders(only) {
  const tokens = (only ?? [])
    .flatMap((s) => s.split(','))
    .map((s) => s.trim())
    .filter(Boolean);
  if (tokens.length === 0) return CONTENDERS;
  const unknown = tokens.filter(
    (t) => !CONTENDERS.some((c) => [c.store, c.name, c.id].includes(ALIASES[t] ?? t)),
  );
  if (unknown.length > 0) throw new Error(`--only: nothing is called ${unknown.join(', ')}`);
  return CONTENDERS.filter((c) =>
    tokens.some((t) => [c.store, c.name, c.id].includes(ALIASES[t] ?? t)),
  );
}

const slug = (id) => id.replace(/[^a-z0-9]+/gi, '-').toLowerCase();

export async function main(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean' },
      only: { type: 'string', multiple: true },
      runs: { type: 'string' },
      workload: { type: 'string', multiple: true },
      out: { type: 'string' },
      profile: { type: 'boolean' },
      reuse: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(HELP);
    return 0;
  }
  const plan = structuredClone(values.quick ? QUICK : FULL);
  if (values.runs !== undefined) {
    plan.runs = Number(values.runs);
    if (!Number.isInteger(plan.runs) || plan.runs < 1)
      throw new Error('--runs: a whole number ≥ 1');
  }
  const workloads = (values.workload ?? WORKLOADS).flatMap((w) => w.split(','));
  for (const w of workloads) if (!WORKLOADS.includes(w)) throw new Error(`--workload: no ${w}`);
  const selected = selectContenders(values.only);
  const startedAt = new Date();
  const began = nowMs();
  const log = (text) =>
    console.error(`[bench ${((nowMs() - began) / 1000).toFixed(0).padStart(4)} s] ${text}`);
  const loadBefore = loadavg();

  const dist = ensureBuild(log);
  const stores = STORES.filter((s) => selected.some((c) => c.store === s));
  const unavailable = await ensureEngines(stores, log);
  // Curator's worker is built (and its jars installed) only when it runs in a chosen workload.
  const curator = selected.some(
    (c) => c.kind === 'java' && workloads.some((w) => c.workloads.has(w)),
  )
    ? ensureCurator(log)
    : undefined;
  const skipped = [];
  const runnable = selected.filter((c) => {
    const down = unavailable.get(ENGINE_OF[c.store]);
    const reason = down ?? (c.kind === 'java' ? curator?.skipped : undefined);
    if (reason) skipped.push({ id: c.id, reason });
    return !reason;
  });
  for (const s of skipped) log(`skipped ${s.id}: ${s.reason}`);

  const runId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  const prefix = `flbench-${runId}`;
  const pgSchemaPrefix = `flb_${runId}`;
  const tmpDir = join(tmpdir(), prefix);
  const endpoints = engineEndpoints();
  // Only a full run (every contender and workload) goes to bench/results by default: a partial
  // or quick one must never replace a committed result of the same day.
  const full = !values.quick && !values.only && !values.workload && values.runs === undefined;
  const reused = values.reuse ? JSON.parse(readFileSync(values.reuse, 'utf8')) : undefined;
  const outDir =
    values.out ??
    (reused
      ? dirname(values.reuse)
      : full
        ? join(ROOT, 'bench', 'results')
        : join(tmpdir(), 'fencelock-bench'));
  const profileDir = join(outDir, 'profiles');
  if (values.profile) mkdirSync(profileDir, { recursive: true });
  let schemaCount = 0;
  const ctxFor = (contender, tag, extra = {}) => ({
    dist,
    endpoints,
    prefix: `${prefix}-${slug(contender.id)}-${tag}`,
    pgSchema: `${pgSchemaPrefix}_${schemaCount++}`,
    tmpDir: join(tmpDir, `${slug(contender.id)}-${tag}`),
    ...extra,
  });
  const workerOptions = (contender) => ({
    java: curator?.java,
    // Profiles are named by Node (CPU.<date>.<time>.<pid>…), one folder per contender.
    execArgv:
      values.profile && contender.role === 'fencelock'
        ? ['--cpu-prof', `--cpu-prof-dir=${join(profileDir, slug(contender.id))}`]
        : [],
  });

  let cleaned = false;
  const cleanAll = async () => {
    if (cleaned) return undefined;
    cleaned = true;
    return cleanUp({ stores, endpoints, prefix, pgSchemaPrefix, tmpDir });
  };
  const onSignal = (signal) => {
    log(`${signal}: cleaning up ${prefix}`);
    void cleanAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);

  const results = Object.fromEntries(WORKLOADS.map((w) => [w, {}]));
  const rtt = { redisMs: [], postgresMs: [] };
  const failures = [];
  const record = (bucket, key, value) => {
    results[bucket][key] ??= [];
    results[bucket][key].push(value);
  };
  const attempt = async (what, work) => {
    try {
      return await work();
    } catch (error) {
      const message = String(error?.message ?? error)
        .split('\n')
        .slice(0, 4)
        .join(' | ');
      failures.push({ what, message });
      log(`FAILED ${what}: ${message}`);
      return { error: message };
    }
  };
  const phaseSec = {};
  const phase = async (name, work) => {
    if (!workloads.includes(name)) return;
    const t = nowMs();
    await work();
    phaseSec[name] = Math.round((nowMs() - t) / 1000);
  };
  // --quick leaves out the tuned variants: the same code paths as the defaults, other numbers.
  const inWorkload = (w) =>
    runnable.filter((c) => c.workloads.has(w) && !(values.quick && c.setting === 'tuned'));

  try {
    await phase('uncontended', async () => {
      for (let run = 1; run <= plan.runs; run++) {
        for (const c of inWorkload('uncontended')) {
          const levels = await attempt(`uncontended ${c.id} run ${run}`, () =>
            uncontended(c, ctxFor(c, `u${run}`), plan, workerOptions(c)),
          );
          record('uncontended', c.id, levels);
          if (Array.isArray(levels)) {
            log(
              `uncontended ${c.id} run ${run}: ${levels.map((l) => `c${l.concurrency} ${Math.round(l.pairsPerSec)}/s`).join(', ')}`,
            );
          }
        }
      }
    });

    await phase('contended', async () => {
      for (let run = 1; run <= plan.runs; run++) {
        if (stores.includes('redis') && !unavailable.has('redis')) {
          rtt.redisMs.push(await redisRoundTrip(endpoints.redis));
        }
        if (stores.includes('postgres') && !unavailable.has('postgres')) {
          rtt.postgresMs.push(await postgresRoundTrip(endpoints.postgres));
        }
        for (const c of inWorkload('contended')) {
          const levels = plan.contended.clients;
          const figures = await attempt(`contended ${c.id} run ${run}`, () =>
            contended(c, ctxFor(c, `c${run}`, { pgPoolSize: 2 }), plan, levels, workerOptions(c)),
          );
          levels.forEach((clients, i) => {
            const f = Array.isArray(figures) ? figures[i] : figures;
            record('contended', `${c.id}@${clients}`, f);
            if (!f.error) {
              log(
                `contended ${c.id} ${clients} clients run ${run}: ${Math.round(f.grantsPerSec)} grants/s, gap p50 ${f.gapP50Ms?.toFixed(2)} ms, wait p99 ${Math.round(f.waitP99Ms)} ms`,
              );
            }
          });
        }
      }
    });

    // fencelock on a store whose backend has no semaphores (`capabilities.permits` false): the
    // first run says so, and the contender is left out of the workload with a note.
    const refused = new Set();
    await phase('semaphore', async () => {
      for (let run = 1; run <= plan.runs; run++) {
        for (const c of inWorkload('semaphore')) {
          if (refused.has(c.id)) continue;
          const levels = plan.semaphore.clients;
          const figures = await attempt(`semaphore ${c.id} run ${run}`, () =>
            semaphore(c, ctxFor(c, `s${run}`, { pgPoolSize: 2 }), plan, workerOptions(c)),
          );
          if (figures.unsupported) {
            refused.add(c.id);
            skipped.push({ id: c.id, workload: 'semaphore', reason: figures.unsupported });
            log(`semaphore: skipped ${c.id}: ${figures.unsupported}`);
            continue;
          }
          levels.forEach((clients, i) => {
            const f = Array.isArray(figures) ? figures[i] : figures;
            record('semaphore', `${c.id}@${clients}`, f);
            if (!f.error) {
              log(
                `semaphore ${c.id} ${clients} clients run ${run}: ${Math.round(f.grantsPerSec)} grants/s, wait p99 ${Math.round(f.waitP99Ms)} ms, holders max ${f.maxHolders} of ${f.permits}, fairness ${f.fairness?.toFixed(2)}`,
              );
            }
          });
        }
      }
    });

    await phase('multikey', async () => {
      for (let run = 1; run <= plan.runs; run++) {
        for (const c of inWorkload('multikey')) {
          const levels = plan.multikey.clients;
          const figures = await attempt(`multikey ${c.id} run ${run}`, () =>
            multikey(c, ctxFor(c, `k${run}`, { pgPoolSize: 2 }), plan, workerOptions(c)),
          );
          levels.forEach((clients, i) => {
            const f = Array.isArray(figures) ? figures[i] : figures;
            record('multikey', `${c.id}@${clients}`, f);
            if (!f.error) {
              log(
                `multikey ${c.id} ${clients} clients run ${run}: ${Math.round(f.acquiresPerSec)} acquires/s, wait p99 ${Math.round(f.waitP99Ms)} ms, overlaps ${f.overlaps}`,
              );
            }
          });
        }
      }
    });

    await phase('partial', async () => {
      const live = endpoints.redlock.slice(0, 3);
      const down = await closedPorts(2);
      const nodes = [...live, ...down.map((port) => ({ host: '127.0.0.1', port }))];
      for (let run = 1; run <= plan.runs; run++) {
        for (const c of inWorkload('partial')) {
          const figures = await attempt(`partial quorum ${c.id} run ${run}`, async () => {
            const [only] = await contended(
              c,
              // No warm-up pairs: with two nodes down a default peer's first vote can take 10 s.
              ctxFor(c, `p${run}`, { nodes, unlimited: true, warmPairs: 0 }),
              plan,
              [plan.partial.clients],
              workerOptions(c),
              plan.partial,
            );
            return only;
          });
          record('partial', c.id, figures);
          if (!figures.error)
            log(
              `partial quorum ${c.id} run ${run}: ${figures.grants} grants in ${plan.partial.durationMs} ms`,
            );
        }
      }
    });

    await phase('many', async () => {
      const entries = [];
      for (let run = 1; run <= plan.runs; run++) {
        for (const c of inWorkload('many')) {
          entries.push({
            contender: c,
            ctx: ctxFor(c, `m${run}`, { countRenewals: c.role === 'fencelock' }),
          });
        }
      }
      // One engine at a time: 10,000 leases on every engine at once (27 processes) load two
      // shared cores past what any engine is measured at elsewhere, and their timeouts then
      // measure the machine. An engine's contenders still hold side by side.
      const stores = [...new Set(entries.map((e) => e.contender.store))];
      for (const store of stores) {
        const group = entries.filter((e) => e.contender.store === store);
        log(
          `many leases on ${store}: ${group.length} processes × ${plan.many.count} leases, ${plan.many.holdMs / 1000} s`,
        );
        const figures = await attempt(`many leases on ${store}`, () =>
          manyLeases(group, plan, endpoints, { java: curator?.java, execArgv: [] }, log),
        );
        group.forEach(({ contender }, i) => {
          const f = Array.isArray(figures) ? figures[i] : figures;
          record('many', contender.id, f);
          if (f.error) failures.push({ what: `many leases ${contender.id}`, message: f.error });
        });
      }
    });
  } finally {
    const removed = await cleanAll();
    log(`cleaned up ${prefix}: ${JSON.stringify(removed)}`);
  }

  const totalSec = Math.round((nowMs() - began) / 1000);
  // --reuse: the workloads this run left out come from the earlier result, as they were.
  const reusedWorkloads = reused ? WORKLOADS.filter((w) => !workloads.includes(w)) : [];
  const failureWorkload = (what) =>
    WORKLOADS.find((w) =>
      what.startsWith(w === 'many' ? 'many leases' : w === 'partial' ? 'partial quorum' : w),
    );
  if (reused) {
    for (const w of reusedWorkloads) {
      results[w] = reused.runs[w] ?? {};
      // Their tables show the levels they were measured at.
      if (reused.plan?.[w]) plan[w] = reused.plan[w];
    }
    if (!workloads.includes('contended')) {
      rtt.redisMs = reused.rtt?.redisMs ?? [];
      rtt.postgresMs = reused.rtt?.postgresMs ?? [];
    }
    failures.unshift(
      ...reused.failures.filter((f) => reusedWorkloads.includes(failureWorkload(f.what))),
    );
    // A contender left out of one workload only (a store without semaphores) keeps its note.
    skipped.push(
      ...(reused.skipped ?? []).filter((s) => s.workload && reusedWorkloads.includes(s.workload)),
    );
  }
  const packageJson = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const contenders = CONTENDERS.filter(
    (c) => runnable.includes(c) || reused?.contenders.some((r) => r.id === c.id),
  ).map((c) => ({
    id: c.id,
    store: c.store,
    name: c.name,
    label: c.label,
    setting: c.setting,
    role: c.role,
    version:
      c.kind === 'java'
        ? curator?.version
        : c.package === 'fencelock'
          ? packageJson.version
          : c.package
            ? packageVersion(c.package)
            : undefined,
    settings: c.describe,
  }));
  const date = startedAt.toISOString().slice(0, 10);
  const report = buildReport({
    date,
    startedAt: startedAt.toISOString(),
    command: `npm run bench${argv.length ? ` -- ${argv.join(' ')}` : ''}`,
    quick: Boolean(values.quick),
    plan,
    processes: PROCESSES,
    machine: { ...machine(), loadAverageBefore: loadBefore.map((l) => Math.round(l * 100) / 100) },
    durationSec: { total: totalSec, ...phaseSec },
    ...(reused
      ? {
          reused: {
            from: basename(values.reuse),
            workloads: reusedWorkloads,
            runs: reused.plan?.runs,
            startedAt: reused.startedAt,
            command: reused.command,
            durationSec: reused.durationSec,
            machine: reused.machine,
          },
        }
      : {}),
    contenders,
    skipped,
    failures,
    rtt,
    results,
  });
  writeFile(join(outDir, `${date}.json`), `${JSON.stringify(report.json, null, 2)}\n`);
  writeFile(join(outDir, `${date}.md`), report.markdown);
  writeFile(join(outDir, `${date}.svg`), report.svg);
  console.log(report.markdown);
  log(`wrote ${join(outDir, `${date}.{json,md,svg}`)} in ${totalSec} s`);
  // --quick checks that the bench runs: a contender that failed fails it; a ratio never does.
  return failures.length > 0 ? 1 : 0;
}

async function redisRoundTrip(endpoint) {
  const { Redis } = await import('ioredis');
  const client = new Redis({ host: endpoint.host, port: endpoint.port });
  try {
    await client.ping();
    return await roundTripMs(() => client.ping());
  } finally {
    client.disconnect();
  }
}

/** One `SELECT 1` round trip to PostgreSQL (median of roundTripMs's samples), ms. */
async function postgresRoundTrip(endpoint) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ ...endpoint, database: 'fencelock' });
  await client.connect();
  try {
    await client.query('SELECT 1');
    return await roundTripMs(() => client.query('SELECT 1'));
  } finally {
    await client.end();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error) => {
      // A bad command line is one line; anything else keeps its stack.
      const usage = String(error?.code ?? '').startsWith('ERR_PARSE_ARGS');
      console.error(
        usage ? `bench: ${error.message} (--help lists the options)` : (error?.stack ?? error),
      );
      process.exit(2);
    },
  );
}
