// The report of a bench run: the JSON (every run, medians and spreads), the markdown tables, the
// targets (issues 7 and 20) as ratios measured in this run, and an SVG chart of throughput and latency.
import { foldRuns, round } from './stats.mjs';

const STORE_TITLES = {
  redis: 'Redis (single node)',
  redlock: 'Redlock (5 nodes)',
  etcd: 'etcd (3 members)',
  zookeeper: 'ZooKeeper (3 servers)',
  postgres: 'PostgreSQL',
  sqlite: 'SQLite (embedded)',
};

function roundDeep(value) {
  if (Array.isArray(value)) return value.map(roundDeep);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, roundDeep(v)]));
  }
  return round(value);
}

/** Numeric fields of a run (drops error texts) for folding. */
const numeric = (run) =>
  Object.fromEntries(Object.entries(run).filter(([, v]) => typeof v === 'number'));

function fold(runs) {
  const ok = runs.filter((r) => r && !r.error);
  return {
    runs,
    ...(ok.length > 0 ? foldRuns(ok.map(numeric)) : { median: {}, spread: {} }),
    failedRuns: runs.length - ok.length,
  };
}

/** Fold every workload's runs into medians and spreads, keyed like the raw results. */
function summarizeResults(results) {
  const uncontended = {};
  for (const [id, runs] of Object.entries(results.uncontended)) {
    const levels = new Map();
    for (const run of runs) {
      if (!Array.isArray(run)) continue;
      for (const level of run) {
        if (!levels.has(level.concurrency)) levels.set(level.concurrency, []);
        levels.get(level.concurrency).push(level);
      }
    }
    for (const [concurrency, levelRuns] of levels) {
      uncontended[`${id}@${concurrency}`] = { id, concurrency, ...fold(levelRuns) };
    }
    if (levels.size === 0) uncontended[`${id}@-`] = { id, ...fold(runs) };
  }
  const keyed = (bucket, split) =>
    Object.fromEntries(
      Object.entries(results[bucket] ?? {}).map(([key, runs]) => {
        const [id, clients] = split ? key.split('@') : [key];
        return [key, { id, ...(clients ? { clients: Number(clients) } : {}), ...fold(runs) }];
      }),
    );
  return {
    uncontended,
    contended: keyed('contended', true),
    semaphore: keyed('semaphore', true),
    multikey: keyed('multikey', true),
    partial: keyed('partial', false),
    many: keyed('many', false),
  };
}

// --- ratios against the peers (semaphore, multikey) ---------------------------------------------

/** The rate field of the workloads whose tables carry ratios, and the wait compared beside it. */
const RATIO_FIELDS = {
  semaphore: { rate: 'grantsPerSec', unit: 'grants/s' },
  multikey: { rate: 'acquiresPerSec', unit: 'acquires/s' },
};

/**
 * fencelock against every other contender of its store measured in this run, per workload of
 * RATIO_FIELDS and client count: its rate over theirs (above 1: fencelock grants more) and its
 * wait p99 over theirs (below 1: fencelock's waiters wait less). No verdict: these workloads
 * have no targets.
 */
function ratiosOf(summary, contenders) {
  const ratios = [];
  for (const [workload, { rate }] of Object.entries(RATIO_FIELDS)) {
    for (const [key, s] of Object.entries(summary[workload])) {
      const c = contenders.find((x) => x.id === s.id);
      if (!c || c.role === 'fencelock') continue;
      const own = summary[workload][`${c.store}/fencelock@${s.clients}`]?.median;
      if (!own) continue;
      const ratio = own[rate] / s.median[rate];
      const waitRatio = own.waitP99Ms / s.median.waitP99Ms;
      ratios.push({
        workload,
        clients: s.clients,
        store: c.store,
        against: s.id,
        role: c.role,
        key,
        fencelock: own[rate],
        reference: s.median[rate],
        ratio: Number.isFinite(ratio) ? ratio : null,
        waitP99Ratio: Number.isFinite(waitRatio) ? waitRatio : null,
      });
    }
  }
  return ratios;
}

// --- targets ------------------------------------------------------------------------------------

function targetsOf(summary, raw) {
  const med = (bucket, key, field) => summary[bucket][key]?.median?.[field];
  const un = (id, c) => med('uncontended', `${id}@${c}`, 'pairsPerSec');
  const co = (id, n, field = 'grantsPerSec') => med('contended', `${id}@${n}`, field);
  const targets = [];
  const ratioTarget = (id, text, value, peer, threshold, extra = {}) => {
    const ratio = value / peer;
    const measurable = Number.isFinite(ratio);
    targets.push({
      id,
      text,
      fencelock: value,
      reference: peer,
      ratio: measurable ? ratio : null,
      threshold,
      met: measurable ? ratio >= threshold : null,
      ...(measurable && ratio < threshold
        ? { missedByPct: ((threshold - ratio) / threshold) * 100 }
        : {}),
      ...extra,
    });
  };
  const limitTarget = (id, text, value, limit, extra = {}) => {
    const measurable = Number.isFinite(value);
    targets.push({
      id,
      text,
      value,
      limit,
      met: measurable ? value <= limit : null,
      ...(measurable && value > limit && limit > 0
        ? { missedByPct: ((value - limit) / limit) * 100 }
        : {}),
      ...extra,
    });
  };
  // Contended grants/s against the ideal 1 / (hold p50 + one round trip to the engine).
  const idealTarget = (store, name, n, rttMs, threshold) => {
    const hold = co(`${store}/fencelock`, n, 'holdP50Ms');
    ratioTarget(
      `${store}-contended-ideal-${n}`,
      `${name} contended, ${n} clients: grants/s ≥ ${threshold}× ideal 1 / (hold + one round trip)`,
      co(`${store}/fencelock`, n),
      1000 / (hold + rttMs),
      threshold,
      { holdP50Ms: hold, rttMs },
    );
  };
  const levels = raw.plan.uncontended.levels;
  const clientCounts = raw.plan.contended.clients;
  const bestOf = (ids, value) =>
    ids
      .map((p) => [p, value(p)])
      .filter(([, v]) => Number.isFinite(v))
      .sort((a, b) => b[1] - a[1])[0];

  // Redis: at the raw ceiling and not below any peer, uncontended.
  const redisPeers = ['redis/node-redlock', 'redis/sesame-redlock', 'redis/redis-semaphore'];
  for (const c of levels) {
    ratioTarget(
      `redis-raw-c${c}`,
      `Redis uncontended c=${c}: ≥ 0.95× the raw ceiling`,
      un('redis/fencelock', c),
      un('redis/raw', c),
      0.95,
    );
    const best = bestOf(redisPeers, (p) => un(p, c));
    ratioTarget(
      `redis-peers-c${c}`,
      `Redis uncontended c=${c}: not below any peer`,
      un('redis/fencelock', c),
      best?.[1],
      1,
      { peer: best?.[0] },
    );
  }

  // Redis contended: near the ideal, a one-hop handoff, fair, and a bounded wait.
  const redisRttMs = median(raw.rtt.redisMs);
  for (const n of clientCounts) {
    const hold = co('redis/fencelock', n, 'holdP50Ms');
    const gap = co('redis/fencelock', n, 'gapP50Ms');
    idealTarget('redis', 'Redis', n, redisRttMs, 0.8);
    limitTarget(
      `redis-contended-gap-${n}`,
      `Redis contended, ${n} clients: handoff gap p50 ≤ 0.5 ms`,
      gap,
      0.5,
    );
    limitTarget(
      `redis-contended-wait-${n}`,
      `Redis contended, ${n} clients: wait p99 ≤ 2 × N × (hold + gap)`,
      co('redis/fencelock', n, 'waitP99Ms'),
      2 * n * (hold + gap),
    );
    ratioTarget(
      `redis-contended-fairness-${n}`,
      `Redis contended, ${n} clients: fairness ≥ 0.95`,
      co('redis/fencelock', n, 'fairness'),
      1,
      0.95,
    );
  }

  // Redlock: ahead of every peer uncontended, and granting with a partial quorum.
  const redlockPeers = [
    'redlock/node-redlock',
    'redlock/sesame-redlock',
    'redlock/redis-semaphore',
  ];
  for (const c of levels) {
    const best = bestOf(redlockPeers, (p) => un(p, c));
    ratioTarget(
      `redlock-peers-c${c}`,
      `Redlock (5 nodes) uncontended c=${c}: ≥ 1.1× the best peer`,
      un('redlock/fencelock', c),
      best?.[1],
      1.1,
      { peer: best?.[0] },
    );
  }
  const partialRuns = summary.partial['redlock/fencelock']?.runs ?? [];
  const partialGrants = partialRuns.map((r) => r?.grants ?? 0);
  targets.push({
    id: 'redlock-partial',
    text: 'Redlock partial quorum (3 of 5 nodes up, 16 contenders, unlimited retries): fencelock keeps granting',
    value: med('partial', 'redlock/fencelock', 'grantsPerSec'),
    grantsPerRun: partialGrants,
    peers: Object.fromEntries(
      Object.entries(summary.partial)
        .filter(([id]) => id !== 'redlock/fencelock')
        .map(([id, s]) => [id, s.median.grantsPerSec]),
    ),
    met: partialGrants.length > 0 ? partialGrants.every((g) => g > 0) : null,
  });

  // Uncontended against the raw engine or Curator, per store and level.
  const uncontendedRatios = [
    ['zookeeper', 'zookeeper/curator', 'Curator InterProcessMutex', 1.2],
    ['postgres', 'postgres/raw', 'the raw ceiling', 0.8],
    ['etcd', 'etcd/raw', 'the raw ceiling', 0.9],
  ];
  for (const [store, reference, name, threshold] of uncontendedRatios) {
    for (const c of levels) {
      ratioTarget(
        `${store}-c${c}`,
        `${STORE_TITLES[store]} uncontended c=${c}: ≥ ${threshold}× ${name}`,
        un(`${store}/fencelock`, c),
        un(reference, c),
        threshold,
      );
    }
  }

  // Contended on every engine: nobody starved, fair; PostgreSQL near its ideal.
  const pgRttMs = median(raw.rtt.postgresMs ?? []);
  for (const n of clientCounts) {
    for (const store of Object.keys(STORE_TITLES)) {
      const id = `${store}/fencelock`;
      const starved = co(id, n, 'clientsWithoutGrant');
      if (!Number.isFinite(starved) && !Number.isFinite(co(id, n))) continue;
      limitTarget(
        `${store}-contended-starved-${n}`,
        `${STORE_TITLES[store]} contended, ${n} clients: no client starved`,
        starved,
        0,
        { count: true },
      );
      ratioTarget(
        `${store}-contended-fairness-${n}`,
        `${STORE_TITLES[store]} contended, ${n} clients: fairness ≥ 0.9`,
        co(id, n, 'fairness'),
        1,
        0.9,
      );
    }
    idealTarget('postgres', 'PostgreSQL', n, pgRttMs, 0.5);
  }

  // Many leases held: renewals batched, memory and CPU bounded (Redis), none lost anywhere.
  const many = (id, field) => med('many', id, field);
  const leases = raw.plan.many.count;
  const perLeaseRate = leases / (raw.plan.many.ttlMs / 3 / 1000);
  const renewRate = many('redis/fencelock', 'renewPerSec');
  targets.push({
    id: 'many-batched',
    text: `${leases} held leases (Redis): renewals batched or pipelined, one command per batch, not per lease`,
    value: renewRate,
    perLeaseRate,
    commandsPerLeasePerRenewal: renewRate / perLeaseRate,
    met: Number.isFinite(renewRate) ? renewRate < perLeaseRate / 4 : null,
  });
  limitTarget(
    'many-memory',
    `${leases} held leases (Redis): RSS growth ≤ 50 MB (before acquiring → end of hold)`,
    many('redis/fencelock', 'rssGrowthMb'),
    50,
  );
  limitTarget(
    'many-heap',
    `${leases} held leases (Redis): heap growth ≤ 15 MB`,
    many('redis/fencelock', 'heapGrowthMb'),
    15,
  );
  limitTarget(
    'many-cpu',
    `${leases} held leases (Redis): under 5 % of one core`,
    many('redis/fencelock', 'cpuPctOfCore'),
    5,
  );
  for (const store of ['redis', 'etcd', 'zookeeper']) {
    limitTarget(
      `many-lost-${store}`,
      `${leases} held leases, ${STORE_TITLES[store]}: none lost`,
      many(`${store}/fencelock`, 'lost'),
      0,
      { count: true },
    );
  }
  return targets;
}

function median(values) {
  const s = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// --- markdown -----------------------------------------------------------------------------------

const int = (v) => (Number.isFinite(v) ? Math.round(v).toLocaleString('en-US') : '–');
const ms = (v) =>
  Number.isFinite(v)
    ? v >= 100
      ? Math.round(v).toLocaleString('en-US')
      : v >= 10
        ? v.toFixed(1)
        : v.toFixed(2)
    : '–';
const pm = (s) => (Number.isFinite(s?.pct) ? ` ±${Math.round(s.pct / 2)} %` : '');

function table(header, rows) {
  return [
    `| ${header.join(' | ')} |`,
    `| ${header.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function targetRow(t) {
  const verdict =
    t.met === null
      ? 'not measured'
      : t.met
        ? 'met'
        : `**missed** by ${Math.round(t.missedByPct ?? 0)} %`;
  let measured;
  if (t.ratio !== undefined) {
    measured = `${t.ratio === null ? '–' : `${t.ratio.toFixed(2)}×`} (${int(t.fencelock)} vs ${int(t.reference)}${t.peer ? `, ${t.peer}` : ''})`;
    if (t.rttMs !== undefined)
      measured += `; hold p50 ${ms(t.holdP50Ms)} ms, RTT ${ms(t.rttMs)} ms`;
    if (t.id.includes('-fairness-')) measured = t.ratio === null ? '–' : t.ratio.toFixed(2);
  } else if (t.limit !== undefined) {
    const format = t.count ? int : ms;
    measured = `${format(t.value)} (limit ${format(t.limit)})`;
  } else if (t.id === 'many-batched') {
    measured = `${int(t.value)} renew commands/s for ${int(t.perLeaseRate)} lease renewals/s (${t.commandsPerLeasePerRenewal?.toFixed(2)} per lease)`;
    if (t.met === false) t.missedByPct = undefined;
  } else if (t.id === 'redlock-partial') {
    measured = `fencelock ${int(t.value)} grants/s (per run ${t.grantsPerRun.join(', ')}); ${Object.entries(
      t.peers,
    )
      .map(([id, v]) => `${id.replace('redlock/', '')} ${int(v)}`)
      .join(', ')}`;
  }
  const shown = t.met === false && t.missedByPct === undefined ? '**missed**' : verdict;
  return [t.text, measured, shown];
}

function markdownOf(report, summary, byId) {
  const { machine: m, plan } = report;
  const label = (id) => {
    const c = byId.get(id);
    return c ? `${c.label}${c.setting === 'tuned' ? ' (tuned)' : ''}` : id;
  };
  const storeOf = (id) => byId.get(id)?.store ?? id.split('/')[0];
  const lines = [];
  lines.push(
    `# fencelock bench, ${report.date}${report.quick ? ' (--quick: a check that the bench runs, not a measurement)' : ''}`,
  );
  lines.push('');
  lines.push(
    `\`${report.command}\` on ${m.cpus} × ${m.cpuModel ?? 'CPU'}, ${m.memoryGiB} GiB, Node ${m.node}; ` +
      `${report.durationSec.total} s in all. Load average before ${m.loadAverageBefore.join(' / ')}, after ${m.loadAverage.join(' / ')} ` +
      '(the figure after counts the bench’s own worker processes and engines; the machine is shared with others). ' +
      `Every figure is the median of ${plan.runs} run${plan.runs > 1 ? 's' : ''}; ± is half the spread (max − min) / median between runs. ` +
      'Ratios compare contenders measured in this run only.',
  );
  lines.push('');
  if (report.reused) {
    const r = report.reused;
    lines.push(
      `The ${r.workloads.join(', ')} workload${r.workloads.length > 1 ? 's come' : ' comes'} from an earlier run of the same suite (\`${r.command}\`, started ${r.startedAt}, ${r.durationSec.total} s, load average before ${r.machine.loadAverageBefore.join(' / ')}${r.runs && r.runs !== plan.runs ? `, medians of ${r.runs} run${r.runs > 1 ? 's' : ''}` : ''}), folded into this report with \`--reuse ${r.from}\`; this run measured the rest.`,
    );
    lines.push('');
  }
  lines.push('## Targets: against the peers and the raw ceiling');
  lines.push('');
  lines.push(table(['target', 'measured', 'verdict'], report.targets.map(targetRow)));
  lines.push('');

  lines.push('## Uncontended: acquire + release on distinct keys');
  lines.push('');
  lines.push(
    `One process, one client (its connections), c loops at once; pairs/s, the latency of a pair p50 / p99 in ms, and the client process's CPU time (user + system, all threads) per pair in µs. ${plan.uncontended.durationMs} ms measured after ${plan.uncontended.warmupMs} ms of warm-up per level.`,
  );
  lines.push('');
  const levels = plan.uncontended.levels;
  const unRows = [];
  for (const c of report.contenders) {
    if (!levels.some((l) => summary.uncontended[`${c.id}@${l}`])) continue;
    const row = [STORE_TITLES[c.store], label(c.id)];
    for (const l of levels) {
      const s = summary.uncontended[`${c.id}@${l}`];
      row.push(s ? `${int(s.median.pairsPerSec)}${pm(s.spread.pairsPerSec)}` : '–');
      row.push(s ? `${ms(s.median.p50Ms)} / ${ms(s.median.p99Ms)}` : '–');
      row.push(s ? int(s.median.cpuUsPerPair) : '–');
    }
    unRows.push(row);
  }
  lines.push(
    table(
      [
        'store',
        'contender',
        ...levels.flatMap((l) => [`c=${l} pairs/s`, `c=${l} p50 / p99 ms`, `c=${l} CPU µs/pair`]),
      ],
      unRows,
    ),
  );
  lines.push('');

  lines.push('## Contended: one key, clients across 4 processes, 1 ms of work per grant');
  lines.push('');
  lines.push(
    'Gap: from the holder calling release to the next grant (one clock for all processes: CLOCK_MONOTONIC, read by `process.hrtime` and Java’s `System.nanoTime`). ' +
      'Wait: request to grant; requests still waiting at the end count with the time waited so far. Fairness: share of grants that went to another client than the previous grant. ' +
      '“starved”: clients without a grant in the window. Overlaps (a grant before the previous holder released) must be 0.',
  );
  lines.push('');
  for (const n of plan.contended.clients) {
    const rows = [];
    for (const c of report.contenders) {
      const s = summary.contended[`${c.id}@${n}`];
      if (!s) continue;
      const x = s.median;
      rows.push([
        STORE_TITLES[c.store],
        label(c.id),
        `${int(x.grantsPerSec)}${pm(s.spread.grantsPerSec)}`,
        ms(x.holdP50Ms),
        `${ms(x.gapP50Ms)} / ${ms(x.gapP99Ms)}`,
        `${ms(x.waitP50Ms)} / ${ms(x.waitP99Ms)} / ${ms(x.waitMaxMs)}`,
        Number.isFinite(x.fairness) ? x.fairness.toFixed(2) : '–',
        int(x.clientsWithoutGrant),
        int(x.overlaps),
        int(x.errors),
      ]);
    }
    lines.push(`### ${n} clients`);
    lines.push('');
    lines.push(
      table(
        [
          'store',
          'contender',
          'grants/s',
          'hold p50 ms',
          'gap p50 / p99 ms',
          'wait p50 / p99 / max ms',
          'fairness',
          'starved',
          'overlaps',
          'gave up',
        ],
        rows,
      ),
    );
    lines.push('');
  }

  lines.push(...semaphoreSection(report, summary, label));
  lines.push(...multikeySection(report, summary, label));

  if (Object.keys(summary.partial).length > 0) {
    lines.push('## Redlock with a partial quorum');
    lines.push('');
    lines.push(
      `Five nodes configured, two of them down (ports with nothing listening: connection refused), so every grant needs all three live nodes. ${plan.partial.clients} contenders across 4 processes, unlimited retries, ${plan.partial.durationMs} ms.`,
    );
    lines.push('');
    lines.push(
      table(
        [
          'contender',
          'grants in window (per run)',
          'grants/s',
          'wait max ms',
          'starved',
          'gave up',
        ],
        Object.entries(summary.partial).map(([id, s]) => [
          label(id),
          s.runs.map((r) => (r?.error ? 'error' : r.grants)).join(', '),
          int(s.median.grantsPerSec),
          ms(s.median.waitMaxMs),
          int(s.median.clientsWithoutGrant),
          int(s.median.errors),
        ]),
      ),
    );
    lines.push('');
  }

  if (Object.keys(summary.many).length > 0) {
    lines.push(
      `## ${int(plan.many.count)} leases held by one process, renewal on (ttlMs ${int(plan.many.ttlMs)}), ${plan.many.holdMs / 1000} s`,
    );
    lines.push('');
    lines.push(
      (plan.many.enginesInTurn
        ? `One process per contender and run; one engine at a time. An engine's processes acquire with at most ${plan.many.concurrency} acquisitions in flight in all, then hold side by side and measure the same window; the time to acquire is reported, not judged.`
        : plan.many.inFlight === 'per-engine'
          ? `One process per contender and run. They acquire with at most ${plan.many.concurrency} acquisitions in flight per engine (shared by that engine's processes; engines in parallel), then all hold side by side and measure the same window; the time to acquire is reported, not judged.`
          : 'One process per contender and run. They acquire one after another on each engine (engines in parallel), then all hold side by side and measure the same window; the time to acquire is reported, not judged.') +
        ' Renew commands are counted at the engine where it can tell our clients apart (Redis MONITOR filtered by the run’s key prefix; PostgreSQL table statistics); elsewhere fencelock’s own renew events are counted. CPU: process time during the window over its length. Memory: RSS after GC from before acquiring to the end of the hold.',
    );
    lines.push('');
    lines.push(
      table(
        [
          'store',
          'contender',
          'acquire s',
          'renew cmds/s',
          'per lease per min',
          'counted at',
          'CPU % of a core',
          'RSS growth MB',
          'RSS KB per lease',
          'heap growth MB',
          'lost',
        ],
        Object.entries(summary.many).map(([id, s]) => [
          STORE_TITLES[storeOf(id)],
          label(id),
          ms(s.median.acquireSec),
          int(s.median.renewPerSec),
          ms(s.median.renewPerLeasePerMin),
          s.runs.find((r) => r?.renewCounted)?.renewCounted ?? '–',
          ms(s.median.cpuPctOfCore),
          ms(s.median.rssGrowthMb),
          ms((s.median.rssGrowthMb * 1024) / plan.many.count),
          ms(s.median.heapGrowthMb),
          int(s.median.lost),
        ]),
      ),
    );
    lines.push('');
  }

  lines.push('## Contenders');
  lines.push('');
  lines.push(
    table(
      ['id', 'version', 'settings'],
      report.contenders.map((c) => [`\`${c.id}\``, c.version ?? '–', c.settings]),
    ),
  );
  lines.push('');
  lines.push(
    `Lease length 30,000 ms for every contender (fencelock's default; set on the peers for parity; many leases: ${int(plan.many.ttlMs)} ms). “tuned” variants differ only in retry settings, which an uncontended pair never uses, so they run in the contended and partial-quorum workloads.`,
  );
  lines.push('');
  if (report.skipped.length > 0) {
    lines.push(
      `Skipped: ${report.skipped.map((s) => `\`${s.id}\`${s.workload ? ` in the ${s.workload} workload` : ''} (${s.reason})`).join('; ')}`,
    );
    lines.push('');
  }
  if (report.failures.length > 0) {
    lines.push(`Failures: ${report.failures.map((f) => `${f.what}: ${f.message}`).join('; ')}`);
    lines.push('');
  }
  return `${lines.join('\n')}\n`;
}

/** The largest `field` of any run (NaN when none has it): a safety count is judged by its worst run. */
function worst(s, field) {
  const values = s.runs.map((r) => r?.[field]).filter(Number.isFinite);
  return values.length > 0 ? Math.max(...values) : Number.NaN;
}

/** `fencelock ÷ this` cells of a row: rate and wait p99, or – on fencelock's own rows. */
function ratioCell(report, workload, id, clients) {
  const r = report.ratios.find((x) => x.workload === workload && x.key === `${id}@${clients}`);
  if (!r) return '–';
  const x = (v) => (v === null ? '–' : `${v.toFixed(2)}×`);
  return `${x(r.ratio)} · ${x(r.waitP99Ratio)}`;
}

/** One line per client count: fencelock against the best peer and the raw ceiling of each store. */
function bestRatiosLine(report, workload, clients, label) {
  const parts = [];
  for (const store of Object.keys(STORE_TITLES)) {
    const rows = report.ratios.filter(
      (r) => r.workload === workload && r.clients === clients && r.store === store,
    );
    const best = rows
      .filter((r) => r.role === 'peer' && r.ratio !== null)
      .sort((a, b) => b.reference - a.reference)[0];
    const raw = rows.find((r) => r.role === 'raw' && r.ratio !== null);
    const said = [
      best ? `${best.ratio.toFixed(2)}× the best peer (${label(best.against)})` : undefined,
      raw ? `${raw.ratio.toFixed(2)}× the raw ceiling` : undefined,
    ].filter(Boolean);
    if (said.length > 0) parts.push(`${STORE_TITLES[store]} ${said.join(', ')}`);
  }
  const { unit } = RATIO_FIELDS[workload];
  return parts.length > 0
    ? [`fencelock’s ${unit} at ${clients} clients: ${parts.join('; ')}.`, '']
    : [];
}

const RATIO_NOTE =
  '“fencelock ÷ this”: fencelock’s figure on the same store over the row’s, in this run: the rate (above 1×: fencelock grants more) · wait p99 (below 1×: fencelock’s waiters wait less).';

function semaphoreSection(report, summary, label) {
  const plan = report.plan.semaphore;
  if (!plan || Object.keys(summary.semaphore).length === 0) return [];
  const lines = [
    `## Semaphore: ${plan.permits} permits of one key, clients across 4 processes, ${report.plan.holdMs} ms of work per grant`,
    '',
    'Each client asks for a permit, holds it, releases it, and asks again. Wait: request to grant (requests still waiting at the end count with the time waited so far). ' +
      `Fairness: share of grants that went to a client none of the previous ${plan.permits} grants went to (a line in arrival order gives 1.00). “starved”: clients without a grant in the window. ` +
      `Holders: the most at once (must be ≤ ${plan.permits}) and the mean over the window, from every grant’s interval from its grant to its release call on one clock (inside the time the engine counts it held, so a maximum above ${plan.permits} is a broken semaphore); “over” counts the grants that went past ${plan.permits}. ` +
      `${plan.durationMs} ms measured after ${plan.warmupMs} ms of warm-up. ${RATIO_NOTE}`,
    '',
  ];
  for (const n of plan.clients) {
    const rows = [];
    for (const c of report.contenders) {
      const s = summary.semaphore[`${c.id}@${n}`];
      if (!s) continue;
      const x = s.median;
      rows.push([
        STORE_TITLES[c.store],
        label(c.id),
        `${int(x.grantsPerSec)}${pm(s.spread.grantsPerSec)}`,
        ms(x.holdP50Ms),
        `${ms(x.waitP50Ms)} / ${ms(x.waitP99Ms)} / ${ms(x.waitMaxMs)}`,
        Number.isFinite(x.fairness) ? x.fairness.toFixed(2) : '–',
        int(x.clientsWithoutGrant),
        // The worst run's maximum, not the median: one run past the limit is a broken semaphore.
        `${int(worst(s, 'maxHolders'))} / ${ms(x.meanHolders)}`,
        int(worst(s, 'overPermits')),
        int(x.errors),
        ratioCell(report, 'semaphore', c.id, n),
      ]);
    }
    lines.push(`### ${n} clients`, '');
    lines.push(
      table(
        [
          'store',
          'contender',
          'grants/s',
          'hold p50 ms',
          'wait p50 / p99 / max ms',
          'fairness',
          'starved',
          'holders max / mean',
          'over',
          'gave up',
          'fencelock ÷ this',
        ],
        rows,
      ),
    );
    lines.push('');
    lines.push(...bestRatiosLine(report, 'semaphore', n, label));
  }
  return lines;
}

function multikeySection(report, summary, label) {
  const plan = report.plan.multikey;
  if (!plan || Object.keys(summary.multikey).length === 0) return [];
  const lines = [
    `## Multi-key: ${plan.keys} keys of a pool of ${plan.pool} per acquire, clients across 4 processes, ${report.plan.holdMs} ms of work per grant`,
    '',
    `Each acquire takes ${plan.keys} keys chosen at random from ${plan.pool}, all or none, holds them, releases them, and asks again with new keys. ` +
      `Holders mean: acquires held at once over the window (at most ${Math.floor(plan.pool / plan.keys)} can be). ` +
      'Overlaps: grants of a key before its previous holder called release (mutual exclusion broken), must be 0. “gave up”: acquires that failed (a peer’s retry limit), asked again at once. ' +
      `${plan.durationMs} ms measured after ${plan.warmupMs} ms of warm-up. ${RATIO_NOTE}`,
    '',
  ];
  for (const n of plan.clients) {
    const rows = [];
    for (const c of report.contenders) {
      const s = summary.multikey[`${c.id}@${n}`];
      if (!s) continue;
      const x = s.median;
      rows.push([
        STORE_TITLES[c.store],
        label(c.id),
        `${int(x.acquiresPerSec)}${pm(s.spread.acquiresPerSec)}`,
        ms(x.holdP50Ms),
        `${ms(x.waitP50Ms)} / ${ms(x.waitP99Ms)} / ${ms(x.waitMaxMs)}`,
        ms(x.meanHolders),
        int(x.clientsWithoutGrant),
        int(worst(s, 'overlaps')),
        int(x.errors),
        ratioCell(report, 'multikey', c.id, n),
      ]);
    }
    lines.push(`### ${n} clients`, '');
    lines.push(
      table(
        [
          'store',
          'contender',
          'acquires/s',
          'hold p50 ms',
          'wait p50 / p99 / max ms',
          'holders mean',
          'starved',
          'overlaps',
          'gave up',
          'fencelock ÷ this',
        ],
        rows,
      ),
    );
    lines.push('');
    lines.push(...bestRatiosLine(report, 'multikey', n, label));
  }
  return lines;
}

// --- svg ----------------------------------------------------------------------------------------

const esc = (s) => String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * Horizontal bars per store, in panels of four columns: uncontended pairs/s and pair latency at
 * c=16, contended grants/s and wait p99 at 16 clients; then (when measured) semaphore grants/s
 * and multikey acquires/s with their wait p99 at their first client count. Each column is scaled
 * to its largest value within the store, so bars compare contenders of one engine; the numbers
 * are printed beside them.
 */
function svgOf(report, summary, byId) {
  const semaphoreAt = report.plan.semaphore?.clients?.[0] ?? 16;
  const multikeyAt = report.plan.multikey?.clients?.[0] ?? 16;
  const panels = [
    [
      {
        title: 'uncontended pairs/s, c=16',
        get: (id) => summary.uncontended[`${id}@16`],
        field: 'pairsPerSec',
        better: 'more',
        color: '#2f6db5',
      },
      {
        title: 'pair latency p50 | p99 ms, c=16',
        get: (id) => summary.uncontended[`${id}@16`],
        field: 'p99Ms',
        inner: 'p50Ms',
        better: 'less',
        color: '#9bb8dd',
        innerColor: '#2f6db5',
      },
      {
        title: 'contended grants/s, 16 clients',
        get: (id) => summary.contended[`${id}@16`],
        field: 'grantsPerSec',
        better: 'more',
        color: '#c0702a',
      },
      {
        title: 'contended wait p99 ms, 16 clients',
        get: (id) => summary.contended[`${id}@16`],
        field: 'waitP99Ms',
        better: 'less',
        color: '#e0b48a',
      },
    ],
    [
      {
        title: `semaphore grants/s, ${semaphoreAt} clients`,
        get: (id) => summary.semaphore[`${id}@${semaphoreAt}`],
        field: 'grantsPerSec',
        better: 'more',
        color: '#3c8d5a',
      },
      {
        title: `semaphore wait p99 ms, ${semaphoreAt} clients`,
        get: (id) => summary.semaphore[`${id}@${semaphoreAt}`],
        field: 'waitP99Ms',
        better: 'less',
        color: '#a3cfb1',
      },
      {
        title: `multikey acquires/s, ${multikeyAt} clients`,
        get: (id) => summary.multikey[`${id}@${multikeyAt}`],
        field: 'acquiresPerSec',
        better: 'more',
        color: '#7a4fa3',
      },
      {
        title: `multikey wait p99 ms, ${multikeyAt} clients`,
        get: (id) => summary.multikey[`${id}@${multikeyAt}`],
        field: 'waitP99Ms',
        better: 'less',
        color: '#c8b3dd',
      },
    ],
  ];
  const labelOf = (c) => `${c.label}${c.setting === 'tuned' ? ' (tuned)' : ''}`;
  // 250 px, wider when a label needs it (about 6.2 px a character at 11.5 px, 14 px indent).
  const longest = Math.max(0, ...report.contenders.map((c) => labelOf(c).length));
  const labelWidth = Math.max(250, Math.ceil(22 + 6.2 * longest));
  const colWidth = 215;
  const rowHeight = 18;
  const width = labelWidth + 4 * colWidth + 10;
  const parts = [];
  const stores = [...new Set(report.contenders.map((c) => c.store))];
  let y = 30;
  let drawn = 0;
  for (const columns of panels) {
    if (!report.contenders.some((c) => columns.some((col) => col.get(c.id)))) continue;
    if (drawn++ > 0) y += 10;
    columns.forEach((col, i) => {
      const x = labelWidth + i * colWidth;
      parts.push(
        `<text x="${x}" y="${y + 10}" class="col">${esc(col.title)}</text>` +
          `<text x="${x}" y="${y + 23}" class="note">${col.better === 'more' ? 'longer is better' : 'shorter is better'}</text>`,
      );
    });
    y += 32;
    for (const store of stores) {
      const ids = report.contenders
        .filter((c) => c.store === store && columns.some((col) => col.get(c.id)))
        .map((c) => c.id);
      if (ids.length === 0) continue;
      parts.push(`<text x="6" y="${y + 13}" class="store">${esc(STORE_TITLES[store])}</text>`);
      y += 20;
      const maxOf = columns.map((col) =>
        Math.max(...ids.map((id) => col.get(id)?.median?.[col.field]).filter(Number.isFinite), 0),
      );
      for (const id of ids) {
        const c = byId.get(id);
        const fence = c.role === 'fencelock';
        parts.push(
          `<text x="14" y="${y + 13}" class="${fence ? 'label fence' : 'label'}">${esc(labelOf(c))}</text>`,
        );
        columns.forEach((col, i) => {
          const x0 = labelWidth + i * colWidth;
          const s = col.get(id);
          const v = s?.median?.[col.field];
          if (!Number.isFinite(v) || maxOf[i] <= 0) {
            parts.push(`<text x="${x0}" y="${y + 13}" class="value">–</text>`);
            return;
          }
          const barMax = colWidth - 70;
          const w = Math.max(1, (v / maxOf[i]) * barMax);
          parts.push(
            `<rect x="${x0}" y="${y + 3}" width="${w.toFixed(1)}" height="${rowHeight - 6}" fill="${col.color}"${fence ? ' stroke="#222" stroke-width="1"' : ''}/>`,
          );
          let text = col.field.endsWith('Ms') ? ms(v) : int(v);
          if (col.inner) {
            const inner = s.median[col.inner];
            if (Number.isFinite(inner)) {
              const wi = Math.max(1, (inner / maxOf[i]) * barMax);
              parts.push(
                `<rect x="${x0}" y="${y + 3}" width="${wi.toFixed(1)}" height="${rowHeight - 6}" fill="${col.innerColor}"/>`,
              );
              text = `${ms(inner)} | ${ms(v)}`;
            }
          }
          parts.push(
            `<text x="${(x0 + w + 4).toFixed(1)}" y="${y + 13}" class="value">${esc(text)}</text>`,
          );
        });
        y += rowHeight;
      }
      y += 8;
    }
  }
  const height = y + 24;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif">
<title>${esc(`fencelock bench ${report.date}: throughput and latency per contender`)}</title>
<style>.title{font-size:15px;font-weight:bold}.col{font-size:10.5px;fill:#333}.store{font-size:12.5px;font-weight:bold}.label{font-size:11.5px;fill:#222}.fence{font-weight:bold}.value{font-size:10.5px;fill:#333}.note{font-size:10px;fill:#555}</style>
<rect width="100%" height="100%" fill="#fff"/>
<text x="6" y="20" class="title">${esc(`fencelock bench ${report.date}: medians of ${report.plan.runs} run${report.plan.runs > 1 ? 's' : ''}, each bar scaled within its store`)}</text>
${parts.join('\n')}
<text x="6" y="${height - 8}" class="note">${esc(`${report.reused ? `${report.reused.command} (${report.reused.workloads.join(', ')}) and ` : ''}${report.command}; ${report.machine.cpus} cores shared with other work. Tables: ${report.date}.md`)}</text>
</svg>
`;
}

/** Build the JSON, markdown and SVG of a run from what `run.mjs` collected. */
export function buildReport(raw) {
  const summary = summarizeResults(raw.results);
  const byId = new Map(raw.contenders.map((c) => [c.id, c]));
  const targets = targetsOf(summary, raw);
  const report = {
    date: raw.date,
    startedAt: raw.startedAt,
    command: raw.command,
    quick: raw.quick,
    machine: raw.machine,
    durationSec: raw.durationSec,
    plan: raw.plan,
    processes: raw.processes,
    contenders: raw.contenders,
    skipped: raw.skipped,
    failures: raw.failures,
    rtt: raw.rtt,
    ...(raw.reused ? { reused: raw.reused } : {}),
    targets,
    ratios: ratiosOf(summary, raw.contenders),
  };
  const json = roundDeep({
    ...report,
    summary: {
      uncontended: Object.values(summary.uncontended).map(({ runs, ...rest }) => rest),
      contended: Object.values(summary.contended).map(({ runs, ...rest }) => rest),
      semaphore: Object.values(summary.semaphore).map(({ runs, ...rest }) => rest),
      multikey: Object.values(summary.multikey).map(({ runs, ...rest }) => rest),
      partial: Object.values(summary.partial).map(({ runs, ...rest }) => rest),
      many: Object.values(summary.many).map(({ runs, ...rest }) => rest),
    },
    runs: raw.results,
  });
  return { json, markdown: markdownOf(report, summary, byId), svg: svgOf(report, summary, byId) };
}
