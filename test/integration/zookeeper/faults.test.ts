/**
 * Fault tests on the real 3-server ZooKeeper ensemble:
 *
 * - a holder process killed with SIGKILL: the waiter is granted when the server expires the
 *   holder's session (within the session timeout + 3 s), with a higher token;
 * - Scenario T04: a holder cut off (TCP proxy) for 10 s learns it lost the lock no later than
 *   the waiter's grant (at the disconnection, with the default policy); its late release touches
 *   nothing;
 * - a holder process frozen with SIGSTOP past its session timeout: the waiter is granted with a
 *   higher token; after SIGCONT the old holder learns it lost the lock, and its late release
 *   deletes nothing of the new holder's;
 * - the holder's server killed, and a lock on a new session taken from the lease's abort
 *   listener: granted, and the process lives (the native binding crashed it before).
 *
 * Server kills that a lock survives are in member-kill-*.test.ts.
 *
 * The holders that die or freeze are child processes running the package compiled from the sources
 * into a private folder (not `dist/`, which other tests may rebuild), so the test process itself
 * is never frozen. Every server killed is started again after the test (see `restoreEnsemble`).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type Lease, LockLostError } from '../../../packages/fencelock/src/index.js';
import { privateBuild } from '../../helpers/private-build.js';
import {
  abortTime,
  backendOf,
  followersHosts,
  killServer,
  nodesOf,
  ROOT,
  serversOfSession,
  settledWithin,
  sleep,
  useZookeeper,
  waitForNodes,
} from './fault-support.js';

const zk = useZookeeper('faults');
const children: ChildProcess[] = [];
let buildDir: string | undefined;

/** The library compiled from its sources (a private build shared by the run's test files). */
function buildIndex(): string {
  return join(buildDir!, 'index.js');
}

beforeAll(async () => {
  buildDir = (await privateBuild('zk-faults')).dir;
}, 180_000);

afterEach(() => {
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
});

/**
 * The holder process: acquires `FL_KEY` with session timeout `FL_TTL_MS`, prints its grant
 * (token, owner, TTL, session id), prints `lost` when its lease signal aborts; on the stdin line
 * `release` releases and prints the outcome; on `exit` closes its locker.
 */
const HOLDER = `
import { createInterface } from 'node:readline';
const { createLocker } = await import(process.env.FL_INDEX);
const env = process.env;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const ttlMs = Number(env.FL_TTL_MS);
const locker = createLocker(env.FL_URL, { ttlMs });
const lease = await locker.acquire(env.FL_KEY);
const session = await (await locker.backend()).session(ttlMs);
lease.signal.addEventListener('abort', () => {
  const r = lease.signal.reason;
  out({ event: 'lost', name: r?.name ?? String(r), reason: r?.reason });
});
out({ event: 'granted', token: String(lease.fencingToken), owner: lease.owner, ttlMs: lease.ttlMs, session: session.id });
for await (const line of createInterface({ input: process.stdin })) {
  if (line === 'release') {
    try {
      out({ event: 'released', outcome: await lease.release() });
    } catch (error) {
      out({ event: 'release-error', message: String(error) });
    }
  } else if (line === 'exit') {
    await locker.close();
    out({ event: 'closed' });
    break;
  }
}
`;

/**
 * The holder of the crash test: acquires `FL_KEY` as HOLDER does; when its lease is lost, starts
 * an acquire of `FL_KEY:next` on a second locker (a new session, so a new native client) from
 * the lease's abort listener, and prints `granted-next` or `next-error`.
 */
const REOPENER = `
const { createLocker } = await import(process.env.FL_INDEX);
const env = process.env;
const out = (o) => process.stdout.write(JSON.stringify(o) + '\\n');
const ttlMs = Number(env.FL_TTL_MS);
const locker = createLocker(env.FL_URL, { ttlMs });
const next = createLocker(env.FL_URL, { ttlMs });
await next.backend();
const lease = await locker.acquire(env.FL_KEY);
const session = await (await locker.backend()).session(ttlMs);
lease.signal.addEventListener('abort', () => {
  out({ event: 'lost', name: lease.signal.reason?.name, reason: lease.signal.reason?.reason });
  next.acquire(env.FL_KEY + ':next', { waitMs: 15000 }).then(
    (l) => out({ event: 'granted-next', token: String(l.fencingToken) }),
    (e) => out({ event: 'next-error', message: String(e) }),
  );
});
out({ event: 'granted', token: String(lease.fencingToken), owner: lease.owner, ttlMs: lease.ttlMs, session: session.id });
`;

interface HolderEvent {
  readonly event:
    | 'granted'
    | 'lost'
    | 'released'
    | 'release-error'
    | 'closed'
    | 'granted-next'
    | 'next-error';
  readonly token?: string;
  readonly owner?: string;
  readonly ttlMs?: number;
  readonly session?: string;
  readonly name?: string;
  readonly reason?: string;
  readonly outcome?: string;
  readonly message?: string;
}

interface Holder {
  readonly child: ChildProcess;
  /**
   * The first event named `name` (events already printed count); an error on timeout, or as soon
   * as the process exits without printing it.
   */
  next(name: HolderEvent['event'], timeoutMs: number): Promise<HolderEvent>;
  /** `performance.now()` when each event first arrived. */
  readonly seenAt: Map<string, number>;
}

function spawnHolder(key: string, ttlMs: number, script = HOLDER, hosts?: string): Holder {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: ROOT,
    env: {
      ...process.env,
      FL_INDEX: buildIndex(),
      FL_URL: zk.url(hosts),
      FL_KEY: key,
      FL_TTL_MS: String(ttlMs),
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  const events: HolderEvent[] = [];
  const seenAt = new Map<string, number>();
  const waiters = new Set<() => void>();
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  let exited: string | undefined;
  child.on('exit', (code, signal) => {
    exited = signal ?? `code ${code}`;
    for (const wake of waiters) wake();
  });
  createInterface({ input: child.stdout! }).on('line', (line) => {
    const event = JSON.parse(line) as HolderEvent;
    events.push(event);
    if (!seenAt.has(event.event)) seenAt.set(event.event, performance.now());
    for (const wake of waiters) wake();
  });
  const next = (name: HolderEvent['event'], timeoutMs: number) =>
    new Promise<HolderEvent>((resolve, reject) => {
      const check = () => {
        const found = events.find((e) => e.event === name);
        if (found === undefined && exited === undefined) return false;
        clearTimeout(timer);
        waiters.delete(wake);
        if (found !== undefined) resolve(found);
        else reject(new Error(`holder exited (${exited}) without '${name}'; stderr: ${stderr}`));
        return true;
      };
      const wake = () => void check();
      const timer = setTimeout(() => {
        waiters.delete(wake);
        reject(new Error(`holder printed no '${name}' within ${timeoutMs} ms; stderr: ${stderr}`));
      }, timeoutMs);
      if (!check()) waiters.add(wake);
    });
  return { child, next, seenAt };
}

describe('zookeeper faults', () => {
  it('holder killed with SIGKILL: the waiter is granted within the session timeout + 3 s, higher token', async () => {
    const TIMEOUT = 2000;
    const key = 'faults:sigkill';
    const holder = spawnHolder(key, TIMEOUT);
    const granted = await holder.next('granted', 20_000);
    expect(granted.ttlMs).toBe(TIMEOUT);

    const waiter = zk.locker(zk.url(), { ttlMs: 10_000 });
    const dir = (await backendOf(waiter)).dirOf(key);
    const waiting = waiter.acquire(key, { waitMs: 30_000 });
    waiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir, 2);
    // While the holder lives, the waiter stays queued.
    expect(await settledWithin(waiting, 1000)).toBe(false);
    expect((await nodesOf(zk.admin, dir))[0]).toMatchObject({
      czxid: BigInt(granted.token!),
      session: granted.session,
    });

    const killedAt = performance.now();
    holder.child.kill('SIGKILL');
    const lease = await waiting;
    const grantMs = performance.now() - killedAt;
    console.info(
      `zk SIGKILL: waiter granted ${Math.round(grantMs)} ms after the kill (session ${TIMEOUT} ms)`,
    );
    expect(grantMs).toBeLessThanOrEqual(TIMEOUT + 3000);
    expect(lease.fencingToken).toBeGreaterThan(BigInt(granted.token!));
    // The dead holder's node went with its session; only the new holder's remains.
    const left = await nodesOf(zk.admin, dir);
    expect(left.map((n) => n.czxid)).toEqual([lease.fencingToken]);
    expect(left.filter((n) => n.session === granted.session)).toEqual([]);
    expect(left.filter((n) => n.name.startsWith(`_c_${granted.owner}-`))).toEqual([]);
    expect(await lease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 30_000);

  it('T04: A cut off for 10 s loses k at the disconnection; B gets k within 4 s + 3 s; A’s late release touches nothing', async () => {
    const TIMEOUT = 4000;
    const k = 't04:k';
    // A reaches the ensemble only through the proxy, in front of one server.
    const proxy = await zk.proxy(1);
    const lockerA = zk.locker(zk.url(`127.0.0.1:${proxy.port}`), { ttlMs: TIMEOUT });
    const lockerB = zk.locker(zk.url(), { ttlMs: 10_000 });
    const dir = (await backendOf(lockerB)).dirOf(k);

    const a = await lockerA.acquire(k);
    expect(a.ttlMs).toBe(TIMEOUT);
    const aLost = abortTime(a.signal);
    let bGrantedAt: number | undefined;
    let aAbortedAtBGrant: boolean | undefined;
    const waiting = lockerB.acquire(k, { waitMs: 30_000 }).then((lease: Lease) => {
      bGrantedAt = performance.now();
      aAbortedAtBGrant = a.signal.aborted;
      return lease;
    });
    waiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir, 2);

    const cutAt = performance.now();
    proxy.cut();
    const b = await waiting;
    const bWaitMs = bGrantedAt! - cutAt;
    console.info(
      `zk T04: A lost its lease ${Math.round(aLost.at! - cutAt)} ms after the cut; ` +
        `B granted ${Math.round(bWaitMs)} ms after the cut (session ${TIMEOUT} ms)`,
    );
    expect(bWaitMs).toBeLessThanOrEqual(TIMEOUT + 3000);
    // A's signal aborted (with LockLostError) no later than B's grant: at the disconnection.
    expect(aAbortedAtBGrant).toBe(true);
    expect(aLost.at!).toBeLessThanOrEqual(bGrantedAt!);
    expect(aLost.at! - cutAt).toBeLessThan(1500);
    expect(a.signal.reason).toBeInstanceOf(LockLostError);
    expect((a.signal.reason as LockLostError).reason).toBe('session-lost');
    expect(a.isHeld).toBe(false);
    expect(b.fencingToken).toBeGreaterThan(a.fencingToken);

    // The cut lasts 10 s; then A, reconnected, releases late.
    await sleep(10_000 - (performance.now() - cutAt));
    await proxy.restore();
    expect(['not-held', 'not-owner']).toContain(await a.release());
    // B's node is untouched: still the only one, with B's token, and B still holds.
    expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([b.fencingToken]);
    expect(b.isHeld).toBe(true);

    expect(await b.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 40_000);

  it('holder frozen by SIGSTOP past its session: the waiter is granted; after SIGCONT the holder knows, and its release deletes nothing', async () => {
    const TIMEOUT = 2000;
    const key = 'faults:sigstop';
    const holder = spawnHolder(key, TIMEOUT);
    const granted = await holder.next('granted', 20_000);

    const waiter = zk.locker(zk.url(), { ttlMs: 10_000 });
    const dir = (await backendOf(waiter)).dirOf(key);
    const waiting = waiter.acquire(key, { waitMs: 30_000 });
    waiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir, 2);
    expect(await settledWithin(waiting, 500)).toBe(false);

    const pausedAt = performance.now();
    holder.child.kill('SIGSTOP');
    const lease = await waiting;
    const grantMs = performance.now() - pausedAt;
    expect(grantMs).toBeLessThanOrEqual(TIMEOUT + 3000);
    expect(lease.fencingToken).toBeGreaterThan(BigInt(granted.token!));
    expect(holder.seenAt.has('lost')).toBe(false);
    // The frozen holder's node went with its session.
    expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([lease.fencingToken]);

    // Frozen well past its session timeout before it runs again.
    await sleep(1.5 * TIMEOUT - (performance.now() - pausedAt));
    expect(holder.seenAt.has('lost')).toBe(false);
    const resumedAt = performance.now();
    holder.child.kill('SIGCONT');
    const lostEvent = await holder.next('lost', 10_000);
    console.info(
      `zk SIGSTOP: waiter granted ${Math.round(grantMs)} ms after the pause (session ${TIMEOUT} ms); ` +
        `the holder reported the loss (${lostEvent.reason}) ` +
        `${Math.round(holder.seenAt.get('lost')! - resumedAt)} ms after SIGCONT`,
    );
    expect(lostEvent.name).toBe('LockLostError');
    expect(['expired', 'session-lost']).toContain(lostEvent.reason);

    holder.child.stdin!.write('release\n');
    const released = await holder.next('released', 15_000);
    expect(['not-held', 'not-owner']).toContain(released.outcome);
    // The new holder's node is untouched, and it still holds.
    expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([lease.fencingToken]);
    expect(lease.isHeld).toBe(true);
    holder.child.stdin!.write('exit\n');
    await holder.next('closed', 10_000);
    expect(await lease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 40_000);

  it("the holder's server is killed and an acquire on a new session starts in the lease's abort listener: granted, no crash", async () => {
    // The abort comes in the native client's 'connecting' event, while that client's socket is
    // closed and the binding still polls it. A native client made there took the same socket
    // descriptor, and the process aborted in uv_poll_start every time.
    const TIMEOUT = 4000;
    const key = 'faults:reopen';
    // Followers only: the leader's kill is an election.
    const holder = spawnHolder(key, TIMEOUT, REOPENER, await followersHosts());
    const granted = await holder.next('granted', 20_000);
    const [server] = await serversOfSession(granted.session!);
    expect(server).toBeDefined();
    await killServer(server!);
    const lost = await holder.next('lost', 10_000);
    expect(lost).toMatchObject({ name: 'LockLostError', reason: 'session-lost' });
    const next = await holder.next('granted-next', 20_000);
    expect(BigInt(next.token!)).toBeGreaterThan(BigInt(granted.token!));
    expect(holder.child.exitCode).toBeNull();
    expect(holder.child.signalCode).toBeNull();
  }, 40_000);
});
