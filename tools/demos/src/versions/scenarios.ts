/**
 * The five scenarios of the versions demo. Each forks its clients (`A`, `B`, and `C` for v2),
 * then drives them step by step: the orchestrator decides when a client acquires, looks, writes
 * and releases, and when it is killed or paused, so what happens does not hang on which timer
 * fires first. The only clocks that matter are the lock's own: Redis expiring a key after its
 * TTL, and the watchdogs of v4 and v5. A client waiting for a lock polls (v1–v4) or waits
 * fencelock's way (v5) until the key is free or its bound runs out.
 *
 * A `Ledger` counts as the steps go: grants, refused attempts, overlaps (a grant while another
 * client still holds the lock as far as it knows), wrong deletions (a release that removed
 * another owner's lock) and stale writes (a write by a client whose grant is no longer the
 * newest), accepted or rejected by the resource.
 */
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { createLocker } from 'fencelock';
import { RedisFence } from 'fencelock/fencing/redis';
import type { Redis } from 'ioredis';
import { ClientProcess } from './clients.js';
import { VERSION_PLANS, type VersionId } from './defaults.js';
import { type ClientConfig, FENCED_RESOURCE, type Reply } from './protocol.js';
import { isReproduced, type Step, type VersionResult } from './report.js';

/** What every scenario needs from the orchestrator. */
export interface ScenarioContext {
  /** The orchestrator's own connection: observes keys (PTTL, GET) and cleans up. */
  readonly redis: Redis;
  /** `redis://…` of the demo's Redis, without query string. */
  readonly redisUrl: string;
  /** Prefix of every key of this run. */
  readonly namespace: string;
  /** Lease length of v2–v5, ms. */
  readonly ttlMs: number;
  /** Aborted when the run is interrupted. */
  readonly abort: AbortSignal;
}

/** Pause between two attempts of a client waiting for a naive lock, ms. */
const POLL_MS = 25;

type Acquired = Extract<Reply, { type: 'acquired' }>;
type Busy = Extract<Reply, { type: 'busy' }>;
type Wrote = Extract<Reply, { type: 'wrote' }>;
type Released = Extract<Reply, { type: 'released' }>;

/** The keys (and store URL) of one version, all under `<namespace>:<version>`. */
interface VersionKeys {
  /** Prefix of every key of the version. */
  readonly base: string;
  /** v1–v4: Redis key of the lock; v5: fencelock's lock key. */
  readonly lockKey: string;
  /** v1–v4: Redis key of the resource; v5: the `RedisFence` prefix. */
  readonly resourceKey: string;
  /** v5: the fencelock store URL, with the version's key prefix; '' for v1–v4. */
  readonly store: string;
}

function keysOf(ctx: ScenarioContext, version: VersionId): VersionKeys {
  const base = `${ctx.namespace}:${version}`;
  if (version !== 'v5') {
    return { base, lockKey: `${base}:lock`, resourceKey: `${base}:resource`, store: '' };
  }
  const store = new URL(ctx.redisUrl);
  store.searchParams.set('prefix', base);
  return { base, lockKey: 'lock', resourceKey: `${base}:fenced`, store: store.href };
}

/** The value a client writes: who wrote it, so the final value names its writer. */
const writtenValue = (name: string) => `written by ${name}`;

/** `n thing` or `n things`. */
function count(n: number, thing: string): string {
  return `${n} ${thing}${n === 1 ? '' : 's'}`;
}

/** Counts and notes of one version. */
class Ledger {
  readonly steps: Step[] = [];
  readonly #startedAt = performance.now();
  /** Grant number (1-based, in grant order) of each client's current or last grant. */
  readonly #grantOf = new Map<string, number>();
  /** Client name of each owner id seen in a grant. */
  readonly #nameOf = new Map<string, string>();
  /** Clients that hold the lock as far as they know (granted, not released, alive). */
  readonly #holding = new Set<string>();
  grants = 0;
  refusedAttempts = 0;
  waitedMs = 0;
  overlaps = 0;
  wrongDeletions = 0;
  writesAccepted = 0;
  staleAccepted = 0;
  staleRejected = 0;

  get elapsedMs(): number {
    return Math.round(performance.now() - this.#startedAt);
  }

  note(text: string): void {
    this.steps.push({ atMs: this.elapsedMs, text });
  }

  acquired(name: string, reply: Acquired, how: string): void {
    this.grants += 1;
    this.#grantOf.set(name, this.grants);
    this.#nameOf.set(reply.owner, name);
    const others = [...this.#holding].filter((n) => n !== name);
    this.#holding.add(name);
    this.refusedAttempts += Math.max(0, (reply.attempts ?? 1) - 1);
    this.waitedMs += reply.waitedMs;
    const after = reply.waitedMs >= POLL_MS ? ` after ${reply.waitedMs} ms` : '';
    const token = reply.token === null ? '' : ` with fencing token ${reply.token}`;
    const overlap =
      others.length === 0
        ? ''
        : ` while ${others.join(' and ')} still holds it as far as it knows → overlap`;
    if (others.length > 0) this.overlaps += 1;
    this.note(`${name} acquired the lock${token}${after} (${how})${overlap}`);
  }

  refused(name: string, reply: Busy, text: string): void {
    this.refusedAttempts += reply.attempts ?? 1;
    this.waitedMs += reply.waitedMs;
    this.note(`${name} ${text}`);
  }

  wrote(name: string, reply: Wrote): void {
    const mine = this.#grantOf.get(name) ?? 0;
    const stale = mine < this.grants;
    const value = JSON.stringify(writtenValue(name));
    if (!reply.accepted) {
      this.staleRejected += 1;
      this.note(`${name} wrote ${value}: REJECTED by the resource (${reply.refusal})`);
      return;
    }
    this.writesAccepted += 1;
    if (stale) this.staleAccepted += 1;
    this.note(
      stale
        ? `${name} wrote ${value}: accepted, though grant ${this.grants} is newer than ${name}'s grant ${mine} → stale write accepted`
        : `${name} wrote ${value}: accepted`,
    );
  }

  released(name: string, reply: Released, how: string, extra = ''): void {
    this.#holding.delete(name);
    const noticed = reply.lossNoticed ? '; it had noticed the loss' : '';
    switch (reply.result) {
      case 'released':
        this.note(`${name} released its lock (${how})`);
        break;
      case 'deleted-other': {
        this.wrongDeletions += 1;
        const victim = this.#nameOf.get(reply.deletedOwner ?? '') ?? 'another owner';
        this.note(
          `${name} released (${how}) and deleted ${victim}'s lock${extra} → wrong deletion`,
        );
        break;
      }
      case 'not-held':
        this.note(`${name} released (${how}): no lock left to delete${extra}`);
        break;
      case 'not-owner':
        this.note(
          `${name} released (${how}): the key is another owner's, left alone (not-owner)${noticed}`,
        );
        break;
    }
  }

  crashed(name: string): void {
    this.#holding.delete(name);
  }
}

/** What a scenario adds to its ledger's counts. */
interface Outcome {
  readonly deadlock: boolean;
  readonly broke: string;
  readonly finalWriter: string | null;
}

type Clients = Readonly<Record<string, ClientProcess>>;

/** Run one version: fork its clients, play its scenario, stop the clients, delete its keys. */
export async function runVersion(ctx: ScenarioContext, version: VersionId): Promise<VersionResult> {
  const keys = keysOf(ctx, version);
  const names = version === 'v2' ? ['A', 'B', 'C'] : ['A', 'B'];
  const started = await Promise.allSettled(
    names.map((name) => ClientProcess.start(clientConfig(ctx, version, keys, name), ctx.abort)),
  );
  const clients: Record<string, ClientProcess> = {};
  for (const s of started) if (s.status === 'fulfilled') clients[s.value.name] = s.value;
  try {
    const failed = started.find((s) => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    // Times count from here: every client is up and connected.
    const ledger = new Ledger();
    const outcome = await SCENARIOS[version](ctx, ledger, clients, keys);
    const counts = {
      grants: ledger.grants,
      refusedAttempts: ledger.refusedAttempts,
      waitedMs: ledger.waitedMs,
      overlaps: ledger.overlaps,
      wrongDeletions: ledger.wrongDeletions,
      writesAccepted: ledger.writesAccepted,
      staleAccepted: ledger.staleAccepted,
      staleRejected: ledger.staleRejected,
      deadlock: outcome.deadlock,
    };
    const plan = VERSION_PLANS[version];
    return {
      version,
      design: plan.design,
      fault: plan.fault,
      expected: plan.expected,
      steps: ledger.steps,
      broke: outcome.broke,
      finalWriter: outcome.finalWriter,
      pids: Object.values(clients).map((c) => c.pid),
      ...counts,
      elapsedMs: ledger.elapsedMs,
      reproduced: isReproduced(version, counts),
    };
  } finally {
    await Promise.all(Object.values(clients).map((c) => c.close()));
    await deleteKeys(ctx.redis, `${keys.base}:*`);
  }
}

function clientConfig(
  ctx: ScenarioContext,
  version: VersionId,
  keys: VersionKeys,
  name: string,
): ClientConfig {
  return {
    name,
    version,
    redisUrl: ctx.redisUrl,
    store: keys.store,
    lockKey: keys.lockKey,
    resourceKey: keys.resourceKey,
    ttlMs: ctx.ttlMs,
    pollMs: POLL_MS,
  };
}

/** Delete every key matching `pattern` (SCAN, then DEL in batches). */
export async function deleteKeys(redis: Redis, pattern: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await redis.del(...keys);
  } while (cursor !== '0');
}

/** Count the keys matching `pattern` (SCAN). */
export async function countKeys(redis: Redis, pattern: string): Promise<number> {
  let cursor = '0';
  let count = 0;
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    count += keys.length;
  } while (cursor !== '0');
  return count;
}

/** Wait `ms`; rejects with the abort's reason (the interruption) when `signal` fires. */
async function sleep(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await delay(ms, undefined, { signal });
  } catch (error) {
    throw signal.aborted ? signal.reason : error;
  }
}

/** How long a client waits for a lock that is expected to come free by its TTL, ms. */
function grantWaitMs(ctx: ScenarioContext): number {
  return Math.max(10 * ctx.ttlMs, 5000);
}

async function acquire(client: ClientProcess, waitMs: number): Promise<Acquired | Busy> {
  return client.call({ type: 'acquire', waitMs }, ['acquired', 'busy'], waitMs);
}

async function prepare(client: ClientProcess): Promise<Extract<Reply, { type: 'prepared' }>> {
  return client.call({ type: 'prepare' }, ['prepared']);
}

async function write(client: ClientProcess): Promise<Wrote> {
  return client.call({ type: 'write', value: writtenValue(client.name) }, ['wrote']);
}

async function release(client: ClientProcess): Promise<Released> {
  return client.call({ type: 'release' }, ['released']);
}

/** The first grant of a scenario: the lock is free, so a refusal is an error. */
async function firstGrant(client: ClientProcess): Promise<Acquired> {
  const reply = await acquire(client, 0);
  if (reply.type !== 'acquired') {
    throw new Error(`client ${client.name} could not take the free lock of a fresh namespace`);
  }
  return reply;
}

/** Name of the writer of a value written by `writtenValue`, or null. */
function writerOf(value: string | null | undefined): string | null {
  const match = /^written by (\w+)$/.exec(value ?? '');
  return match?.[1] ?? null;
}

/** v1: SETNX without TTL; the holder is killed → nobody ever acquires again. */
async function scenarioV1(
  ctx: ScenarioContext,
  ledger: Ledger,
  { A, B }: Clients,
  keys: VersionKeys,
): Promise<Outcome> {
  ledger.acquired('A', await firstGrant(A!), 'SETNX → 1, no TTL');
  await prepare(A!);
  ledger.note('A read the resource and is working inside its critical section');
  const signal = await A!.crash();
  ledger.crashed('A');
  ledger.note(`A killed with ${signal} (kill -9) while holding the lock`);

  const observeMs = 3 * ctx.ttlMs;
  const b = await acquire(B!, observeMs);
  let held = false;
  if (b.type === 'acquired') {
    ledger.acquired('B', b, 'SETNX → 1');
    held = true;
  } else {
    ledger.refused(
      'B',
      b,
      `tried for ${b.waitedMs} ms (3 × the TTL of the other versions): ${b.attempts} attempts, all refused`,
    );
  }
  const pttl = await ctx.redis.pttl(keys.lockKey);
  ledger.note(
    pttl === -1
      ? "the dead holder's key is still there with no expiry (PTTL -1): nothing will ever free it"
      : `the lock key's PTTL is ${pttl}`,
  );
  if (held) ledger.released('B', await release(B!), 'DEL');
  const deadlock = b.type === 'busy' && pttl === -1;
  return {
    deadlock,
    broke: deadlock
      ? `the killed holder's key has no TTL, so it is never freed: B was refused ${count(b.attempts ?? 0, 'time')} in ${b.waitedMs} ms, and nobody will get the lock again (deadlock)`
      : 'no deadlock was observed: B acquired the lock',
    finalWriter: writerOf(await ctx.redis.get(keys.resourceKey)),
  };
}

/** v2: SET NX PX, plain DEL; work outlasts the TTL → a late DEL removes another's lock. */
async function scenarioV2(
  ctx: ScenarioContext,
  ledger: Ledger,
  { A, B, C }: Clients,
  keys: VersionKeys,
): Promise<Outcome> {
  const how = `SET NX PX ${ctx.ttlMs}`;
  ledger.acquired('A', await firstGrant(A!), how);
  await prepare(A!);
  ledger.note('A read the resource; its work takes longer than the TTL');

  const b = await acquire(B!, grantWaitMs(ctx));
  if (b.type === 'busy') {
    ledger.refused('B', b, `waited ${b.waitedMs} ms and never got the lock`);
  } else {
    ledger.acquired('B', b, `${how}; A's key had expired`);
  }
  ledger.wrote('A', await write(A!));
  const leftB = await ctx.redis.pttl(keys.lockKey);
  ledger.released(
    'A',
    await release(A!),
    'plain DEL',
    leftB > 0 ? `, ${leftB} ms before it expired` : '',
  );
  if (b.type === 'busy') {
    return { deadlock: false, broke: 'B never got in', finalWriter: await finalV(ctx, keys) };
  }

  const c = await acquire(C!, grantWaitMs(ctx));
  if (c.type === 'busy') ledger.refused('C', c, `waited ${c.waitedMs} ms and never got the lock`);
  else ledger.acquired('C', c, how);
  ledger.wrote('B', await write(B!));
  const leftC = await ctx.redis.pttl(keys.lockKey);
  ledger.released(
    'B',
    await release(B!),
    'plain DEL',
    leftC > 0 ? `, ${leftC} ms before it expired` : '',
  );
  if (c.type === 'acquired') {
    ledger.wrote('C', await write(C!));
    ledger.released('C', await release(C!), 'plain DEL');
  }
  return {
    deadlock: false,
    broke: `a late plain DEL deleted another client's lock ${count(ledger.wrongDeletions, 'time')}, letting the next client in while the previous one still worked: ${count(ledger.overlaps, 'overlap')}, ${count(ledger.staleAccepted, 'stale write')} accepted`,
    finalWriter: await finalV(ctx, keys),
  };
}

/** v3: owner-checked release, no renewal; work outlasts the TTL → two holders. */
async function scenarioV3(
  ctx: ScenarioContext,
  ledger: Ledger,
  { A, B }: Clients,
  keys: VersionKeys,
): Promise<Outcome> {
  const how = `SET NX PX ${ctx.ttlMs}`;
  ledger.acquired('A', await firstGrant(A!), how);
  await prepare(A!);
  ledger.note('A read the resource; its work takes longer than the TTL, and nothing renews it');

  const b = await acquire(B!, grantWaitMs(ctx));
  if (b.type === 'busy') ledger.refused('B', b, `waited ${b.waitedMs} ms and never got the lock`);
  else {
    ledger.acquired('B', b, `${how}; A's key had expired`);
    await prepare(B!);
  }
  ledger.wrote('A', await write(A!));
  ledger.released('A', await release(A!), 'Lua compare-and-delete');
  if (b.type === 'acquired') {
    ledger.wrote('B', await write(B!));
    ledger.released('B', await release(B!), 'Lua compare-and-delete');
  }
  return {
    deadlock: false,
    broke: `the TTL ran out under A's long work: ${count(ledger.overlaps, 'overlap')}, ${count(ledger.staleAccepted, 'stale write')} accepted (the owner check did keep A from deleting B's lock: ${count(ledger.wrongDeletions, 'wrong deletion')})`,
    finalWriter: await finalV(ctx, keys),
  };
}

/**
 * v4 and v5: the holder's watchdog keeps the lease through long work; then the holder is paused
 * (SIGSTOP) between its lease check and its write, past the TTL; B acquires and writes; the
 * holder resumes (SIGCONT) and writes. The difference is the resource: unfenced (v4) or a
 * `RedisFence` checking the fencing token (v5).
 */
async function scenarioPaused(
  ctx: ScenarioContext,
  ledger: Ledger,
  { A, B }: Clients,
  keys: VersionKeys,
  version: 'v4' | 'v5',
): Promise<Outcome> {
  const how =
    version === 'v4'
      ? `SET NX PX ${ctx.ttlMs}, watchdog every ${Math.floor(ctx.ttlMs / 3)} ms`
      : `locker.acquire, ttl ${ctx.ttlMs} ms, watchdog every ${Math.floor(ctx.ttlMs / 3)} ms`;
  const a = await firstGrant(A!);
  ledger.acquired('A', a, how);
  const workMs = 2 * ctx.ttlMs;
  ledger.note(`A starts work that takes longer than the TTL`);
  await sleep(workMs, ctx.abort);
  const holder = await currentHolder(ctx, keys, version);
  ledger.note(
    holder.owner === a.owner
      ? `after ${workMs} ms of work the lock is still A's (${holder.ttlMs} ms of TTL left): the watchdog renews it`
      : `after ${workMs} ms of work the lock is no longer A's: the watchdog fell behind`,
  );
  const p = await prepare(A!);
  ledger.note(
    `A checked its lease (${p.believesHeld ? 'valid' : 'lost'}) and read the resource; its write is next`,
  );
  A!.pause();
  const pausedAt = performance.now();
  ledger.note('A paused with SIGSTOP between that check and its write; its watchdog stops with it');

  const b = await acquire(B!, grantWaitMs(ctx));
  if (b.type === 'busy') ledger.refused('B', b, `waited ${b.waitedMs} ms and never got the lock`);
  else {
    ledger.acquired('B', b, `${how}; A's key had expired`);
    await prepare(B!);
    ledger.wrote('B', await write(B!));
  }
  const writing = write(A!);
  A!.resume();
  ledger.note(
    `A resumed with SIGCONT after ${Math.round(performance.now() - pausedAt)} ms stopped (TTL ${ctx.ttlMs} ms) and goes on with its write`,
  );
  ledger.wrote('A', await writing);
  const releaseHow = version === 'v4' ? 'Lua compare-and-delete' : 'lease.release()';
  ledger.released('A', await release(A!), releaseHow);
  if (b.type === 'acquired') ledger.released('B', await release(B!), releaseHow);

  const finalWriter =
    version === 'v4'
      ? await finalV(ctx, keys)
      : writerOf((await new RedisFence(ctx.redis, keys.resourceKey).read(FENCED_RESOURCE))?.value);
  ledger.note(
    finalWriter === 'A' && b.type === 'acquired'
      ? "the resource holds A's stale write: B's update is lost"
      : `the resource holds ${finalWriter ?? 'nothing'}'s write`,
  );
  const broke =
    version === 'v4'
      ? `the pause stopped the watchdog, the key expired and B got in: ${count(ledger.overlaps, 'overlap')}; the unfenced resource accepted ${count(ledger.staleAccepted, 'stale write')}`
      : `the pause still let B in (${count(ledger.overlaps, 'overlap')}; a lock alone cannot prevent that), but the resource rejected ${count(ledger.staleRejected, 'stale write')} by fencing token and accepted ${ledger.staleAccepted}`;
  return { deadlock: false, broke, finalWriter };
}

/** Who holds the version's lock now, and its remaining TTL (ms). */
async function currentHolder(
  ctx: ScenarioContext,
  keys: VersionKeys,
  version: 'v4' | 'v5',
): Promise<{ owner: string | null; ttlMs: number }> {
  if (version === 'v4') {
    const [owner, ttlMs] = await Promise.all([
      ctx.redis.get(keys.lockKey),
      ctx.redis.pttl(keys.lockKey),
    ]);
    return { owner, ttlMs };
  }
  const locker = createLocker(keys.store);
  try {
    const { holder } = await locker.inspect(keys.lockKey);
    return { owner: holder?.owner ?? null, ttlMs: holder?.ttlMs ?? -2 };
  } finally {
    await locker.close();
  }
}

/** The writer of an unfenced resource's value (v1–v4). */
async function finalV(ctx: ScenarioContext, keys: VersionKeys): Promise<string | null> {
  return writerOf(await ctx.redis.get(keys.resourceKey));
}

const SCENARIOS: Readonly<
  Record<
    VersionId,
    (ctx: ScenarioContext, ledger: Ledger, clients: Clients, keys: VersionKeys) => Promise<Outcome>
  >
> = {
  v1: scenarioV1,
  v2: scenarioV2,
  v3: scenarioV3,
  v4: (ctx, ledger, clients, keys) => scenarioPaused(ctx, ledger, clients, keys, 'v4'),
  v5: (ctx, ledger, clients, keys) => scenarioPaused(ctx, ledger, clients, keys, 'v5'),
};
