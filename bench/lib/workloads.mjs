// The workloads of issue 7, run from the parent: each starts its workers, hands them a job, and
// turns what they report into the figures of the report. Every figure of one run is computed
// here from raw samples; runs are folded into medians and spreads by the caller.
import { connect, createServer } from 'node:net';
import { Worker } from './pool.mjs';
import { nowMs, percentile, sleep, summarize } from './stats.mjs';

/** Processes of the contended and partial-quorum workloads (issue 7: "across 4 processes"). */
export const PROCESSES = 4;

// --- 1. uncontended ----------------------------------------------------------------------------

/**
 * One process, one instance (its connections), `concurrency` loops at once, each on keys of its
 * own: pairs (acquire + release) per second and the latency of a pair.
 * @returns one entry per concurrency level.
 */
export async function uncontended(contender, ctx, plan, options) {
  const worker = await Worker.start(contender, ctx, options);
  try {
    const { levels, warmupMs, durationMs } = plan.uncontended;
    const budgetMs = levels.length * (warmupMs + durationMs) + 120_000;
    const reply = await worker.request(
      { type: 'uncontended', levels, warmupMs, durationMs, keyTag: 'u' },
      budgetMs,
    );
    return reply.levels.map((level) => {
      const latency = summarize(level.latenciesMs);
      return {
        concurrency: level.concurrency,
        pairsPerSec: (level.pairs / level.windowMs) * 1000,
        // µs of the client process's CPU per acquire + release (absent: the worker did not say).
        cpuUsPerPair: level.cpuMs === undefined ? Number.NaN : (level.cpuMs * 1000) / level.pairs,
        p50Ms: latency.p50,
        p99Ms: latency.p99,
        errors: level.errors,
        ...(level.lastError ? { lastError: level.lastError } : {}),
      };
    });
  } finally {
    await worker.close();
  }
}

// --- 2. contended -------------------------------------------------------------------------------

/**
 * For each client count in `levels` (ascending), that many clients spread over PROCESSES
 * processes (one instance, so one set of connections, per client) loop on one key, holding it
 * `holdMs`; the processes are kept from one level to the next and open the extra clients. See
 * `contendedFigures` for what is measured.
 * @returns the figures of each level, in order.
 */
export function contended(contender, ctx, plan, levels, options, window = plan.contended) {
  return clientLevels(contender, ctx, levels, options, window, {
    job: (clients) => ({ type: 'contended', holdMs: plan.holdMs, key: `hot-${clients}` }),
    figures: contendedFigures,
  });
}

/**
 * The contended run of `clients` clients and levels with a job of another primitive, on the
 * processes and clock of `contended`: `job(clients)` is the worker's job of a level (its type
 * and what it asks for), `warm` the primitive the clients warm up with (see worker.mjs), and
 * `figures(replies, { from, to, clients })` turns the workers' records into a level's figures.
 * @returns the figures of each level, in order; `{ unsupported: reason }` when the contender's
 *   store refuses the primitive (fencelock on a store without semaphores).
 */
async function clientLevels(contender, ctx, levels, options, window, { job, warm, figures }) {
  const workers = await Promise.all(
    Array.from({ length: PROCESSES }, () => Worker.start(contender, ctx, options)),
  );
  const all = [];
  try {
    let open = 0;
    for (const clients of levels) {
      const perProcess = Math.ceil(clients / PROCESSES);
      const opened = await Promise.all(
        workers.map((w) =>
          w.request(
            { type: 'open', clients: perProcess - open, ...(warm ? { warm } : {}) },
            120_000,
          ),
        ),
      );
      const refused = opened.find((reply) => reply.type === 'unsupported');
      if (refused) return { unsupported: refused.reason };
      open = perProcess;
      const startAt = nowMs() + 300;
      const from = startAt + window.warmupMs;
      const to = from + window.durationMs;
      const replies = await Promise.all(
        workers.map((w, i) =>
          w.request(
            { ...job(clients), startAt, endAt: to, drainMs: window.drainMs, clientBase: i * 1000 },
            to - nowMs() + window.drainMs + 30_000,
          ),
        ),
      );
      all.push(figures(replies, { from, to, clients: perProcess * PROCESSES }));
    }
    return all;
  } finally {
    // A peer still stuck in a vote may never close: it gets a few seconds, then SIGKILL.
    await Promise.all(workers.map((w) => w.close(window.closeMs ?? 5000)));
  }
}

/**
 * Figures of one contended run, from every client's records
 * `[client, requestedAt, grantedAt, releaseAt (release called), releasedAt]` on one clock:
 * - grants/s: grants inside the measured window;
 * - handoff gap: a grant's time minus the time the previous holder called release (the lock
 *   sits idle for at most this long; it includes the release's own trip to the engine);
 * - wait: request to grant, for every request made before the window's end; requests still
 *   waiting when the workers reported count with the time they had waited (a lower bound);
 * - fairness: share of consecutive grants that went to a different client; the longest wait;
 *   clients that got no grant in the window;
 * - overlaps: grants made before the previous holder called release (mutual exclusion broken,
 *   or a lease that expired): should be 0.
 */
export function contendedFigures(replies, { from, to, clients }) {
  const records = replies.flatMap((r) => r.records).sort((a, b) => a[2] - b[2]);
  const inWindow = records.filter((r) => r[2] >= from && r[2] <= to);
  const gaps = [];
  let overlaps = 0;
  let switches = 0;
  for (let i = 1; i < records.length; i++) {
    const [client, , grantedAt] = records[i];
    if (grantedAt < from || grantedAt > to) continue;
    const previous = records[i - 1];
    const gap = grantedAt - previous[3];
    if (gap < 0) overlaps += 1;
    else gaps.push(gap);
    if (previous[2] >= from && client !== previous[0]) switches += 1;
  }
  const wait = waitsOf(records, replies, from, to);
  const gap = summarize(gaps);
  const hold = summarize(inWindow.map((r) => r[3] - r[2]));
  const granted = new Set(inWindow.map((r) => r[0]));
  const windowMs = to - from;
  return {
    clients,
    grants: inWindow.length,
    grantsPerSec: (inWindow.length / windowMs) * 1000,
    holdP50Ms: hold.p50,
    gapP50Ms: gap.p50,
    gapP99Ms: gap.p99,
    waitP50Ms: wait.p50,
    waitP99Ms: wait.p99,
    waitMaxMs: wait.max,
    fairness: inWindow.length > 1 ? switches / (inWindow.length - 1) : Number.NaN,
    clientsWithoutGrant: clients - granted.size,
    stillWaiting: replies.reduce((n, r) => n + r.pending.length, 0),
    overlaps,
    ...errorsOf(replies),
  };
}

// --- 2b. semaphore ------------------------------------------------------------------------------

/**
 * The contended run on a semaphore: each client asks for one of `plan.semaphore.permits` permits
 * of one shared key, holds it `holdMs` and releases it. See `semaphoreFigures`.
 * @returns the figures of each level (`plan.semaphore.clients`), or `{ unsupported: reason }`.
 */
export function semaphore(contender, ctx, plan, options) {
  const { permits, clients: levels } = plan.semaphore;
  return clientLevels(contender, ctx, levels, options, plan.semaphore, {
    job: (clients) => ({ type: 'semaphore', holdMs: plan.holdMs, key: `sem-${clients}`, permits }),
    warm: { kind: 'permit', permits },
    figures: (replies, span) => semaphoreFigures(replies, { ...span, permits }),
  });
}

/**
 * How many of the intervals `[start, end]` overlap at most, and how many starts raised the count
 * above `limit` (an end at the same instant as a start counts first).
 */
export function maxOverlap(intervals, limit) {
  const events = [];
  for (const [start, end] of intervals) events.push([start, 1], [end, -1]);
  events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let max = 0;
  let over = 0;
  for (const [, step] of events) {
    now += step;
    if (step > 0 && now > limit) over += 1;
    max = Math.max(max, now);
  }
  return { max, over };
}

/** Σ of the parts of the intervals `[start, end]` inside `[from, to]`, over its length. */
function meanInside(intervals, from, to) {
  let sum = 0;
  for (const [start, end] of intervals)
    sum += Math.max(0, Math.min(end, to) - Math.max(start, from));
  return sum / (to - from);
}

/** The wait figures every contended-style run shares: requests made before `to`, and pending. */
function waitsOf(records, replies, from, to) {
  const waits = records.filter((r) => r[1] <= to && r[2] >= from).map((r) => r[2] - r[1]);
  for (const reply of replies) {
    for (const [, requestedAt] of reply.pending) waits.push(reply.reportedAt - requestedAt);
  }
  return summarize(waits);
}

const errorsOf = (replies) => ({
  errors: replies.reduce((n, r) => n + r.errors, 0),
  ...(replies.find((r) => r.lastError)
    ? { lastError: replies.find((r) => r.lastError).lastError }
    : {}),
});

/**
 * Figures of one semaphore run, from the records of `contendedFigures`:
 * - grants/s, hold p50 and wait p50 / p99 / max, as the contended run's;
 * - fairness: share of the window's grants that went to a client none of the previous `permits`
 *   grants went to (with one permit, the contended run's figure); with more clients than
 *   permits, a line in arrival order gives 1;
 * - starved: clients without a grant in the window;
 * - holders: the most holders at once and their mean over the window, from every grant's
 *   interval `[granted, release called]` on one clock. The interval is inside the time the
 *   engine counts the permit as held (it is stamped after the grant's answer and before the
 *   release's request), so a maximum above `permits` is a broken semaphore, never a clock
 *   artefact; `over permits` counts the grants that made it so (should be 0).
 */
export function semaphoreFigures(replies, { from, to, clients, permits }) {
  const records = replies.flatMap((r) => r.records).sort((a, b) => a[2] - b[2]);
  const inWindow = records.filter((r) => r[2] >= from && r[2] <= to);
  let fresh = 0;
  let counted = 0;
  for (let i = permits; i < records.length; i++) {
    const [client, , grantedAt] = records[i];
    if (grantedAt < from || grantedAt > to) continue;
    counted += 1;
    let seen = false;
    for (let j = i - permits; j < i; j++) if (records[j][0] === client) seen = true;
    if (!seen) fresh += 1;
  }
  const holds = records.map((r) => [r[2], r[3]]);
  const holders = maxOverlap(holds, permits);
  const wait = waitsOf(records, replies, from, to);
  const hold = summarize(inWindow.map((r) => r[3] - r[2]));
  const granted = new Set(inWindow.map((r) => r[0]));
  return {
    clients,
    permits,
    grants: inWindow.length,
    grantsPerSec: (inWindow.length / (to - from)) * 1000,
    holdP50Ms: hold.p50,
    waitP50Ms: wait.p50,
    waitP99Ms: wait.p99,
    waitMaxMs: wait.max,
    fairness: counted > 0 ? fresh / counted : Number.NaN,
    clientsWithoutGrant: clients - granted.size,
    stillWaiting: replies.reduce((n, r) => n + r.pending.length, 0),
    maxHolders: holders.max,
    meanHolders: meanInside(holds, from, to),
    overPermits: holders.over,
    ...errorsOf(replies),
  };
}

// --- 2c. multikey -------------------------------------------------------------------------------

/**
 * The contended run on several keys: each client takes `plan.multikey.keys` keys of a pool of
 * `plan.multikey.pool`, chosen at random per acquire, all or none, holds them `holdMs` and
 * releases them. See `multikeyFigures`.
 * @returns the figures of each level (`plan.multikey.clients`).
 */
export function multikey(contender, ctx, plan, options) {
  const { keys, pool, clients: levels } = plan.multikey;
  if (!(keys >= 1 && keys <= pool && pool <= 30)) throw new Error('multikey: 1 ≤ keys ≤ pool ≤ 30');
  return clientLevels(contender, ctx, levels, options, plan.multikey, {
    job: (clients) => ({
      type: 'multikey',
      holdMs: plan.holdMs,
      keyTag: `mk-${clients}`,
      pool,
      keys,
    }),
    warm: { kind: 'multi', keys },
    figures: (replies, span) => multikeyFigures(replies, { ...span, pool }),
  });
}

/**
 * Figures of one multikey run, from records `[client, requestedAt, grantedAt, releaseAt,
 * releasedAt, key mask]`:
 * - acquires/s (all keys granted) in the window, hold p50, wait p50 / p99 / max (requests
 *   still waiting count with the time waited so far), starved clients;
 * - holders: the mean number of acquires held at once over the window (at most
 *   ⌊pool / keys⌋ can be);
 * - overlaps: grants of a key made while another holder of that key had not called release
 *   yet (intervals as in `semaphoreFigures`): mutual exclusion broken, should be 0.
 */
export function multikeyFigures(replies, { from, to, clients, pool }) {
  const records = replies.flatMap((r) => r.records).sort((a, b) => a[2] - b[2]);
  const inWindow = records.filter((r) => r[2] >= from && r[2] <= to);
  let overlaps = 0;
  for (let key = 0; key < pool; key++) {
    const holds = records.filter((r) => r[5] & (1 << key)).map((r) => [r[2], r[3]]);
    overlaps += maxOverlap(holds, 1).over;
  }
  const wait = waitsOf(records, replies, from, to);
  const hold = summarize(inWindow.map((r) => r[3] - r[2]));
  const granted = new Set(inWindow.map((r) => r[0]));
  return {
    clients,
    acquires: inWindow.length,
    acquiresPerSec: (inWindow.length / (to - from)) * 1000,
    holdP50Ms: hold.p50,
    waitP50Ms: wait.p50,
    waitP99Ms: wait.p99,
    waitMaxMs: wait.max,
    clientsWithoutGrant: clients - granted.size,
    stillWaiting: replies.reduce((n, r) => n + r.pending.length, 0),
    meanHolders: meanInside(
      records.map((r) => [r[2], r[3]]),
      from,
      to,
    ),
    overlaps,
    ...errorsOf(replies),
  };
}

// --- 3. many leases -----------------------------------------------------------------------------

/**
 * Counts, at the engine, the commands that touch some key prefixes: Redis MONITOR on each node
 * given, read from a plain socket (a line per command: time, `[db client]`, quoted arguments).
 * Commands run inside Lua (`[0 lua]`) are not counted, only what clients sent.
 */
export class RedisCommandCounter {
  #sockets = [];
  #pattern;
  #counts = new Map();
  #counting = false;

  static async start(nodes, prefixes) {
    const counter = new RedisCommandCounter();
    for (const prefix of prefixes) counter.#counts.set(prefix, 0);
    const escaped = prefixes.map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    // Anywhere in an argument: some libraries put their own prefix first (`mutex:<key>`).
    counter.#pattern = prefixes.length ? new RegExp(`(${escaped.join('|')}):`) : undefined;
    for (const node of nodes) {
      const socket = connect(node.port, node.host);
      socket.on('error', () => undefined);
      await new Promise((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
      });
      socket.setEncoding('utf8');
      let buffered = '';
      socket.on('data', (chunk) => {
        buffered += chunk;
        const lines = buffered.split('\r\n');
        buffered = lines.pop();
        for (const line of lines) counter.#observe(line);
      });
      socket.write('MONITOR\r\n');
      counter.#sockets.push(socket);
    }
    return counter;
  }

  #observe(line) {
    if (!this.#counting || !this.#pattern || line.includes(' lua] ')) return;
    const prefix = this.#pattern.exec(line)?.[1];
    if (prefix !== undefined) this.#counts.set(prefix, this.#counts.get(prefix) + 1);
  }

  /** Count from now on (from zero). */
  begin() {
    for (const prefix of this.#counts.keys()) this.#counts.set(prefix, 0);
    this.#counting = true;
  }

  /** Stop counting; the commands seen per prefix. */
  end() {
    this.#counting = false;
    return new Map(this.#counts);
  }

  async stop() {
    for (const socket of this.#sockets) socket.destroy();
  }
}

/** Updates of a schema's lease table as PostgreSQL's statistics count them (renewals). */
async function postgresUpdates(endpoint, schemas) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ ...endpoint, database: 'fencelock' });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT schemaname, n_tup_upd::bigint AS updates FROM pg_stat_user_tables
        WHERE relname = 'fencelock_leases' AND schemaname = ANY($1)`,
      [schemas],
    );
    return new Map(rows.map((r) => [r.schemaname, Number(r.updates)]));
  } finally {
    await client.end();
  }
}

/**
 * Hold `count` leases with renewal on in one process per entry, all entries at once (the
 * measured minute is mostly idle time; running them side by side keeps the whole bench within
 * its time budget), and measure during the same `holdMs` window for all: engine commands that
 * touch each entry's keys, CPU time and memory of each process.
 * @param entries `{ contender, ctx }` per process.
 * @returns per entry its figures, in the same order.
 */
export async function manyLeases(entries, plan, endpoints, options, log) {
  const { count, ttlMs, holdMs, concurrency } = plan.many;
  const workers = await Promise.all(
    entries.map(({ contender, ctx }) => Worker.start(contender, ctx, options)),
  );
  workers.forEach((w, i) => {
    w.onWarning = (message) => log(`many leases: ${entries[i].contender.id}: ${message}`);
  });
  const redisPrefixes = entries
    .filter((e) => e.contender.store === 'redis' || e.contender.store === 'redlock')
    .map((e) => e.ctx.prefix);
  // Redis is watched only when a Redis contender runs (`--only etcd` needs no Redis up).
  const counter = await RedisCommandCounter.start(
    redisPrefixes.length > 0 ? [endpoints.redis, endpoints.redlock[0]] : [],
    redisPrefixes,
  );
  try {
    // At most `concurrency` acquisitions in flight per engine, shared by that engine's
    // processes (engines in parallel): tens of thousands of acquisitions at once overload a
    // shared etcd or ZooKeeper (timeouts, a client's circuit breaker, expired sessions) and then
    // measure the overload, not the library. Several processes (sessions) at once still go
    // faster where one client is the limit (the native ZooKeeper client).
    const perStore = new Map();
    for (const e of entries) {
      perStore.set(e.contender.store, (perStore.get(e.contender.store) ?? 0) + 1);
    }
    const share = new Map(
      [...perStore].map(([store, n]) => [store, Math.max(4, Math.floor(concurrency / n))]),
    );
    const held = await Promise.all(
      entries.map(({ contender }, i) =>
        workers[i]
          .request(
            {
              type: 'hold-many',
              count,
              ttlMs,
              concurrency: share.get(contender.store),
              keyTag: 'm',
            },
            900_000,
          )
          .then(
            (value) => {
              log(
                `many leases: ${contender.id} holds ${count} after ${Math.round(value.acquireMs / 1000)} s`,
              );
              return { status: 'fulfilled', value };
            },
            (reason) => ({ status: 'rejected', reason }),
          ),
      ),
    );
    log(
      `many leases: ${held.filter((h) => h.status === 'fulfilled').length}/${held.length} holding ${count}`,
    );
    const pgSchemas = entries
      .filter((e) => e.contender.store === 'postgres')
      .map((e) => e.ctx.pgSchema);
    const pgBefore = pgSchemas.length
      ? await postgresUpdates(endpoints.postgres, pgSchemas)
      : new Map();
    counter.begin();
    const goAt = nowMs();
    // Settled at once, so a worker that failed never leaves a rejection unhandled meanwhile.
    const finishing = workers.map((w, i) => {
      if (held[i].status === 'rejected') return Promise.resolve(held[i]);
      w.send({ type: 'go', holdMs });
      return w.next(holdMs + 900_000).then(
        (value) => ({ status: 'fulfilled', value }),
        (reason) => ({ status: 'rejected', reason }),
      );
    });
    await sleep(goAt + holdMs - nowMs());
    const commands = counter.end();
    // PostgreSQL publishes a backend's counts when it goes idle, at most once a second.
    await sleep(1500);
    const pgAfter = pgSchemas.length
      ? await postgresUpdates(endpoints.postgres, pgSchemas)
      : new Map();
    const results = await Promise.all(finishing);
    return entries.map(({ contender, ctx }, i) => {
      const result = results[i];
      if (result.status === 'rejected')
        return { error: String(result.reason?.message ?? result.reason) };
      const r = result.value;
      const seconds = r.elapsedMs / 1000;
      let engineCommands;
      let counted;
      if (commands.has(ctx.prefix)) {
        engineCommands = commands.get(ctx.prefix);
        counted =
          contender.store === 'redlock'
            ? 'engine (Redis MONITOR, node 1 of 5)'
            : 'engine (Redis MONITOR)';
      } else if (contender.store === 'postgres') {
        engineCommands = (pgAfter.get(ctx.pgSchema) ?? 0) - (pgBefore.get(ctx.pgSchema) ?? 0);
        counted = 'engine (pg_stat_user_tables updates)';
      } else if (contender.role === 'fencelock') {
        engineCommands = r.clientRenewals;
        counted = 'client (fencelock:renew events)';
      }
      const m = r.memory;
      return {
        leases: r.count,
        acquireSec: r.acquireMs / 1000,
        renewPerSec: engineCommands === undefined ? Number.NaN : engineCommands / seconds,
        renewCounted: counted ?? 'not counted (no per-client count at this engine)',
        renewPerLeasePerMin:
          engineCommands === undefined ? Number.NaN : (engineCommands / r.count / seconds) * 60,
        cpuPctOfCore: (r.cpuMs / r.elapsedMs) * 100,
        rssGrowthMb: m.end.rssMb - m.before.rssMb,
        heapGrowthMb: m.end.heapMb - m.before.heapMb,
        rssDuringHoldMb: m.end.rssMb - m.start.rssMb,
        lost: r.lost,
        acquireErrors: r.acquireErrors,
        ...(r.lastError ? { lastError: r.lastError } : {}),
      };
    });
  } finally {
    await counter.stop();
    for (const w of workers) w.kill();
  }
}

// --- 4. partial quorum --------------------------------------------------------------------------

/**
 * Two ports with nothing listening: the Redlock nodes that are "down" in the partial-quorum
 * case (connection refused, as for a crashed node). Found by binding port 0 and closing.
 */
export async function closedPorts(count) {
  const ports = [];
  for (let i = 0; i < count; i++) {
    const server = createServer();
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    ports.push(server.address().port);
    await new Promise((resolve) => server.close(resolve));
  }
  return ports;
}

/** p50 of `samples` round trips of `ping()` (ms). */
export async function roundTripMs(ping, samples = 200) {
  const times = [];
  for (let i = 0; i < samples; i++) {
    const t = nowMs();
    await ping();
    times.push(nowMs() - t);
  }
  return percentile(
    times.sort((a, b) => a - b),
    50,
  );
}
