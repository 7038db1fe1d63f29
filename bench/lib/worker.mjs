// A bench worker: a child process (node:child_process fork) that drives one contender and answers
// the parent's jobs over IPC. Jobs (one at a time):
//   init        { contender, ctx }                         → ready
//   uncontended { levels, warmupMs, durationMs, keyTag }   → uncontended { levels: [...] }
//   open        { clients, warm }                          → opened, or unsupported { reason }
//   contended   { startAt, endAt, drainMs, holdMs, key, clientBase } → contended
//   semaphore   { …contended's, permits }                  → contended (records of permits)
//   multikey    { startAt, endAt, drainMs, holdMs, keyTag, pool, keys, clientBase } → contended
//               (each record also carries the bit mask of its keys)
//   hold-many   { count, ttlMs, concurrency, keyTag }      → held, then after `go { holdMs }`: many
//               (the leases stay held: the parent kills the worker and the clean-up removes them)
//   close                                                  → closed, then the process exits
// Times are on the machine-wide monotonic clock of stats.mjs, so the parent can line up the
// events of several workers (and of the Java worker) without stamping them itself.
import { contenderById, fencelockRenewals, TTL_MS } from './contenders.mjs';
import { nowMs, sleep, sleepUntil } from './stats.mjs';

let contender;
let ctx;
/** Open instances: one for uncontended and many-leases, one per client for contended. */
let instances = [];
/** Messages that arrived while a job waits for one (`go`). */
const inbox = [];
let inboxWaiter;

const send = (message) => process.send(message);

/**
 * The acquire of a workload's primitive on `instance`: a lock on `key`, one of `warm.permits`
 * permits of `key`, or every key of `[key-a, key-b, …]` (`warm.keys` of them).
 */
function acquireFor(warm) {
  switch (warm?.kind ?? 'lock') {
    case 'lock':
      return (instance, key) => instance.acquire(key, TTL_MS);
    case 'permit':
      return (instance, key) => instance.acquirePermit(key, warm.permits, TTL_MS);
    case 'multi':
      return (instance, key) =>
        instance.acquireAll(
          Array.from({ length: warm.keys }, (_, i) => `${key}-${i}`),
          TTL_MS,
        );
    default:
      throw new Error(`no primitive ${warm.kind}`);
  }
}

/**
 * Open `count` instances and warm each up with a few pairs on a key of its own, with the
 * primitive the workload uses (`warm`, see acquireFor): connections made, scripts loaded,
 * sessions opened and code compiled before anything is measured.
 */
async function openInstances(count, warm) {
  const opened = await Promise.all(Array.from({ length: count }, () => contender.create(ctx)));
  const take = acquireFor(warm);
  try {
    await Promise.all(
      opened.map(async (instance, i) => {
        for (let pair = 0; pair < (ctx.warmPairs ?? 3); pair++) {
          await instance.release(await take(instance, `warm-${process.pid}-${i}`));
        }
      }),
    );
  } catch (error) {
    await Promise.all(opened.map((instance) => instance.close().catch(() => undefined)));
    throw error;
  }
  instances.push(...opened);
  return opened;
}

/** fencelock refusing a primitive its store lacks (`capabilities.permits` false): no engine call. */
const unsupportedByStore = (error) =>
  error?.code === 'ERR_INVALID_ARGUMENT' && error?.argument === 'store';

/** `keys` distinct numbers of 0 … pool − 1, at random, as a bit mask. */
function pickKeys(pool, keys) {
  let mask = 0;
  for (let picked = 0; picked < keys; ) {
    const bit = 1 << Math.floor(Math.random() * pool);
    if (mask & bit) continue;
    mask |= bit;
    picked += 1;
  }
  return mask;
}

/**
 * This process's CPU time (user + system, ms) from `fromMs` to `toMs` (nowMs clock), scaled to
 * exactly that window when the timers fire late on a busy event loop.
 */
async function sampleCpu(fromMs, toMs) {
  await sleepUntil(fromMs);
  const startedAt = nowMs();
  const before = process.cpuUsage();
  await sleepUntil(toMs);
  const spent = process.cpuUsage(before);
  const sampledMs = nowMs() - startedAt;
  return ((spent.user + spent.system) / 1000) * ((toMs - fromMs) / sampledMs);
}

/** Acquire + release on keys no other loop uses, at each concurrency level in turn. */
async function uncontended({ levels, warmupMs, durationMs, keyTag }) {
  const [instance] = instances.length > 0 ? instances : await openInstances(1);
  const results = [];
  for (const concurrency of levels) {
    const measureFrom = nowMs() + warmupMs;
    const measureTo = measureFrom + durationMs;
    const latencies = [];
    let pairs = 0;
    let errors = 0;
    let lastError;
    const cpu = sampleCpu(measureFrom, measureTo);
    await Promise.all(
      Array.from({ length: concurrency }, async (_, loop) => {
        // Each loop cycles through 64 keys of its own: distinct from every other loop's.
        for (let i = 0; nowMs() < measureTo; i++) {
          const key = `${keyTag}-c${concurrency}-l${loop}-k${i % 64}`;
          const startedAt = nowMs();
          try {
            await instance.release(await instance.acquire(key, TTL_MS));
          } catch (error) {
            errors += 1;
            lastError = String(error?.message ?? error);
            await sleep(5);
            continue;
          }
          const endedAt = nowMs();
          if (endedAt >= measureFrom && endedAt <= measureTo) pairs += 1;
          if (startedAt >= measureFrom && endedAt <= measureTo) latencies.push(endedAt - startedAt);
        }
      }),
    );
    const cpuMs = await cpu;
    results.push({
      concurrency,
      windowMs: durationMs,
      pairs,
      cpuMs,
      latenciesMs: latencies,
      errors,
      lastError,
    });
  }
  return { type: 'uncontended', levels: results };
}

/**
 * What one request of a contended-style job asks for: `[acquire(instance), tag]`, the tag being
 * recorded with the grant (the key mask of a multikey request).
 */
function requestFor(job) {
  switch (job.type) {
    case 'contended':
      return () => [(instance) => instance.acquire(job.key, TTL_MS)];
    case 'semaphore':
      return () => [(instance) => instance.acquirePermit(job.key, job.permits, TTL_MS)];
    case 'multikey':
      return () => {
        const mask = pickKeys(job.pool, job.keys);
        const keys = [];
        for (let i = 0; i < job.pool; i++) if (mask & (1 << i)) keys.push(`${job.keyTag}-${i}`);
        return [(instance) => instance.acquireAll(keys, TTL_MS), mask];
      };
    default:
      throw new Error(`no contended job ${job.type}`);
  }
}

/**
 * Every client of this process loops: request (one shared key, a permit of one shared key, or
 * `keys` keys of a shared pool), grant, hold `holdMs`, release. New requests stop at `endAt`;
 * requests still waiting `drainMs` later are reported as pending (their wait is at least that
 * long).
 */
async function contended(job) {
  const { startAt, endAt, drainMs, holdMs, clientBase } = job;
  const next = requestFor(job);
  const records = [];
  const pending = new Map();
  let errors = 0;
  let lastError;
  await sleepUntil(startAt);
  const loops = instances.map(async (instance, index) => {
    const client = clientBase + index;
    while (nowMs() < endAt) {
      const [acquire, tag] = next();
      const requestedAt = nowMs();
      pending.set(client, requestedAt);
      let handle;
      try {
        handle = await acquire(instance);
      } catch (error) {
        // A peer gave up (its retry limit): the application asks again at once.
        pending.delete(client);
        errors += 1;
        lastError = String(error?.message ?? error);
        continue;
      }
      pending.delete(client);
      const grantedAt = nowMs();
      await sleep(holdMs);
      const releaseAt = nowMs();
      try {
        await instance.release(handle);
      } catch (error) {
        errors += 1;
        lastError = String(error?.message ?? error);
      }
      const record = [client, requestedAt, grantedAt, releaseAt, nowMs()];
      if (tag !== undefined) record.push(tag);
      records.push(record);
    }
  });
  await Promise.race([Promise.all(loops), sleepUntil(endAt + drainMs)]);
  const reportedAt = nowMs();
  return {
    type: 'contended',
    records,
    pending: [...pending].map(([client, requestedAt]) => [client, requestedAt]),
    reportedAt,
    errors,
    lastError,
  };
}

function memory() {
  global.gc?.();
  const { rss, heapUsed } = process.memoryUsage();
  return { rssMb: rss / 2 ** 20, heapMb: heapUsed / 2 ** 20 };
}

function nextMessage(type) {
  const index = inbox.findIndex((m) => m.type === type);
  if (index >= 0) return Promise.resolve(inbox.splice(index, 1)[0]);
  return new Promise((resolve) => {
    inboxWaiter = { type, resolve };
  });
}

/**
 * Hold `count` leases with renewal on, then (after the parent's `go`, so that parallel workers
 * measure the same minute) measure CPU, memory and renewals for `holdMs`, and release them all.
 */
async function holdMany({ count, ttlMs, concurrency, keyTag }) {
  const before = memory();
  const [instance] = await openInstances(1);
  const handles = [];
  let next = 0;
  const acquireStarted = nowMs();
  let acquireErrors = 0;
  let lastError;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        const i = next++;
        // An engine error (a busy shared engine, a client's circuit breaker) costs a retry of
        // that key, counted; the whole workload fails only past a thousand of them.
        for (;;) {
          try {
            handles.push(await instance.holdRenewing(`${keyTag}-${i}`, ttlMs));
            break;
          } catch (error) {
            acquireErrors += 1;
            lastError = String(error?.message ?? error);
            if (acquireErrors <= 3)
              send({ type: 'warning', message: `acquire of key ${i}: ${lastError}` });
            if (acquireErrors > 1000) throw error;
            await sleep(100);
          }
        }
      }
    }),
  );
  const acquireMs = nowMs() - acquireStarted;
  const held = memory();
  send({ type: 'held', acquireMs });
  const { holdMs } = await nextMessage('go');
  const start = memory();
  const renewalsBefore = fencelockRenewals.ok;
  const cpuBefore = process.cpuUsage();
  const startedAt = nowMs();
  await sleep(holdMs);
  const cpu = process.cpuUsage(cpuBefore);
  const elapsedMs = nowMs() - startedAt;
  const renewals = fencelockRenewals.ok - renewalsBefore;
  const end = memory();
  const lost = handles.filter((h) => h.lost()).length;
  // No release: the parent ends this process once it has the figures, and the run's clean-up
  // removes the keys (releasing 10,000 leases one by one would take minutes on some engines
  // and measures nothing the other workloads do not).
  return {
    type: 'many',
    count: handles.length,
    acquireMs,
    elapsedMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    memory: { before, held, start, end },
    clientRenewals: renewals,
    renewalsFailed: fencelockRenewals.failed,
    lost,
    acquireErrors,
    ...(lastError ? { lastError } : {}),
  };
}

async function handle(message) {
  switch (message.type) {
    case 'init':
      contender = contenderById(message.contender);
      ctx = message.ctx;
      return { type: 'ready' };
    case 'uncontended':
      return uncontended(message);
    case 'open':
      try {
        await openInstances(message.clients, message.warm);
      } catch (error) {
        if (unsupportedByStore(error)) return { type: 'unsupported', reason: error.message };
        throw error;
      }
      return { type: 'opened' };
    case 'contended':
    case 'semaphore':
    case 'multikey':
      return contended(message);
    case 'hold-many':
      return holdMany(message);
    case 'close': {
      const closing = instances;
      instances = [];
      await Promise.all(closing.map((i) => i.close().catch(() => undefined)));
      return { type: 'closed' };
    }
    default:
      throw new Error(`unknown job ${message.type}`);
  }
}

process.on('message', (message) => {
  if (inboxWaiter && message.type === inboxWaiter.type) {
    const { resolve } = inboxWaiter;
    inboxWaiter = undefined;
    resolve(message);
    return;
  }
  if (message.type === 'go') {
    inbox.push(message);
    return;
  }
  handle(message).then(
    (reply) => {
      // After `close`, exit once the reply is out: a client library's stray timer or thread
      // must not keep the worker alive.
      if (message.type === 'close') process.send(reply, () => process.exit(0));
      else send(reply);
    },
    (error) => send({ type: 'error', message: String(error?.stack ?? error) }),
  );
});

// The parent is gone (it crashed or was killed): nobody will ask this worker to close.
process.on('disconnect', () => process.exit(1));

// A peer that reports a lost lock or a failed call from a timer must not kill the worker.
process.on('unhandledRejection', (error) => {
  send({ type: 'warning', message: `unhandled rejection: ${String(error?.message ?? error)}` });
});
