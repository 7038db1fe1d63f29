/**
 * Leader elections on ZooKeeper (election.ts, backend.ts), on the real 3-server ensemble: what
 * the contract cannot see.
 *
 * A candidate is `/<namespace>/elections/<encoded key>/_c_<owner>-e-<10-digit sequence>`
 * (`backend.electionDirOf(key)`), its data `<ttlMs>:<value>`, apart from the key's lock and
 * semaphore nodes; the lowest node leads, its czxid is the term. Covered here: that layout and
 * that the lock and semaphore of the key are untouched and elections are not listed; the term
 * after the server deleted the idle election's container (the sequence starts again, the term
 * does not); a repeated attempt (a lost reply) and the compare-and-set of `proclaim`; a leader
 * whose session expires, followed by the next candidate while an observer sees it; and the
 * watches behind `watchElection`: armed before the election's node exists, set again in a new
 * session after the observer's own session ended, none left after `stop()` or `close()`.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import {
  type AttemptRequest,
  createLocker,
  type ElectionLeader,
} from '../../../packages/fencelock/src/index.js';
import { DEFAULTS } from '../../../packages/fencelock/src/options.js';
import { ZK_CONTAINER_CHECK_MS } from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { portOf } from './fault-support.js';
import { children, sleep, useNamespace, zkUrl } from './support.js';

const ns = useNamespace('election');

const CANDIDATE = /^_c_([0-9a-f]+)-e-(\d{10})$/;

/** A candidate node as the ensemble has it. */
interface CandidateNode {
  readonly name: string;
  readonly owner: string;
  readonly sequence: number;
  readonly czxid: bigint;
  readonly data: string;
}

/** The nodes under an election's node, lowest sequence first; throws on any other child. */
async function candidates(dir: string): Promise<CandidateNode[]> {
  const nodes: CandidateNode[] = [];
  for (const name of await children(ns.admin, dir)) {
    const m = CANDIDATE.exec(name);
    if (m === null) throw new Error(`unexpected child ${name} under ${dir}`);
    const [stat, data] = await ns.admin.get(`${dir}/${name}`, false);
    nodes.push({
      name,
      owner: m[1]!,
      sequence: Number(m[2]),
      czxid: BigInt(stat.czxid),
      data: Buffer.isBuffer(data) ? data.toString('utf8') : String(data),
    });
  }
  return nodes.sort((a, b) => a.sequence - b.sequence);
}

/** Whether `path` exists (only "no node" means no). */
async function exists(path: string): Promise<boolean> {
  await ns.admin.sync(path);
  return ns.admin.exists(path, false).then(
    () => true,
    (error: unknown) => {
      if (error instanceof Error && /^-101\b/.test(error.message)) return false;
      throw error;
    },
  );
}

/** Poll until `check()` resolves true; throws after `timeoutMs`. */
async function waitUntil(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`not in time: ${what}`);
    await sleep(10);
  }
}

/** An election attempt as the core sends it. */
function candidacy(
  key: string,
  value: string,
  extra: Partial<AttemptRequest> = {},
): AttemptRequest {
  return {
    key,
    owner: randomBytes(16).toString('hex'),
    ttlMs: 10_000,
    mode: 'write',
    autoRenew: true,
    willWait: true,
    election: { value },
    ...extra,
  };
}

/** Counts `onChange` calls and lets a case wait for the next ones. */
class Changes {
  count = 0;
  readonly onChange = (): void => {
    this.count += 1;
  };

  /** Resolves once `onChange` was called more than `after` times; throws after `timeoutMs`. */
  async after(after: number, what: string, timeoutMs = 5_000): Promise<void> {
    await waitUntil(what, () => this.count > after, timeoutMs);
  }
}

describe('ZooKeeper leader elections', () => {
  it('candidates live under /elections with their value as data, apart from the lock and the semaphore of the key; not listed', async () => {
    const key = 'layout:a.b';
    const locker = ns.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.electionDirOf(key);
    expect(dir).toBe(`/${ns.namespace}/elections/layout%3Aa%2Eb`);
    const lock = await locker.acquire(key);
    const permit = await locker.semaphore(key, { permits: 2 }).acquire();
    // Any text is a value: a colon (the data's separator), a line break, non-ASCII.
    const value = 'tcp://host:8080\nrégion=🇪🇺';
    const leading = await locker.election(key).campaign(value);
    const waiting = ns.locker({ ttlMs: 10_000 }).election(key).campaign('second');
    await waitUntil('second candidate in line', async () => (await candidates(dir)).length === 2);
    const nodes = await candidates(dir);
    expect(nodes.map((n) => n.owner)).toEqual([leading.owner, expect.any(String)]);
    expect(nodes[0]!.czxid).toBe(leading.term);
    expect(nodes[0]!.data).toBe(`10000:${value}`);
    expect(nodes[1]!.data).toBe('10000:second');
    // The lock and the semaphore of the key keep their own nodes and holders.
    expect((await children(ns.admin, backend.dirOf(key))).length).toBe(1);
    expect((await children(ns.admin, backend.semaphoreDirOf(key))).length).toBe(1);
    const info = await backend.inspect(key);
    expect(info.holder?.owner).toBe(lock.owner);
    expect(info.lastFencingToken).toBe(lock.fencingToken);
    // Listing shows the lock and the semaphore, never the election.
    const listed: [string, string][] = [];
    for await (const held of locker.list({ prefix: 'layout:' })) listed.push([held.key, held.mode]);
    expect(listed).toEqual([
      [key, 'write'],
      [key, 'permits'],
    ]);
    expect(await backend.leader(key)).toMatchObject({
      owner: leading.owner,
      term: leading.term,
      value,
    });
    await leading.proclaim('v2');
    expect((await candidates(dir))[0]!.data).toBe('10000:v2');
    expect(await lock.release()).toBe('released');
    expect(await permit.release()).toBe('released');
    expect((await backend.leader(key))?.value).toBe('v2');
    expect(await leading.resign()).toBe('released');
    const next = await waiting;
    expect((await candidates(dir)).map((n) => n.czxid)).toEqual([next.term]);
    expect(await next.resign()).toBe('released');
    expect(await candidates(dir)).toEqual([]);
  });

  it("terms keep increasing after the server deleted the idle election's container: the sequence starts again, the term does not", async () => {
    const key = 'idle';
    const locker = ns.locker({ ttlMs: 10_000 });
    const backend = (await locker.backend()) as ZookeeperBackend;
    const dir = backend.electionDirOf(key);
    const first = await locker.election(key).campaign('a');
    const firstNode = (await candidates(dir))[0]!;
    await first.resign();
    // The election's node is a container: the server deletes it once empty.
    await waitUntil(
      'container deleted',
      async () => !(await exists(dir)),
      10 * ZK_CONTAINER_CHECK_MS + 5_000,
    );
    const again = await locker.election(key).campaign('c');
    const againNode = (await candidates(dir))[0]!;
    expect(againNode.sequence).toBeLessThanOrEqual(firstNode.sequence);
    expect(againNode.sequence).toBe(0);
    expect(again.term).toBeGreaterThan(first.term);
    expect(again.term).toBe(againNode.czxid);
    await again.resign();
  }, 30_000);

  it('a repeated attempt (a lost reply) keeps one node and its term; proclaim is a compare-and-set on owner and term', async () => {
    const key = 'cas';
    const a = ns.backend();
    const b = ns.backend();
    const dir = a.electionDirOf(key);
    const request = candidacy(key, 'a1');
    const granted = await a.attempt(request);
    expect(granted.granted).toBe(true);
    const term = (granted as { token: bigint }).token;
    const again = await a.attempt(request);
    expect(again).toMatchObject({ granted: true, token: term });
    expect((await candidates(dir)).map((n) => n.czxid)).toEqual([term]);

    // A waiting candidate is not the leader: its proclaim is refused, nothing written.
    const other = candidacy(key, 'b1');
    const queued = await b.attempt(other);
    expect(queued).toMatchObject({ granted: false, queued: true });
    const [, otherNode] = await candidates(dir);
    const otherLease = { key, owner: other.owner, fencingToken: otherNode!.czxid, election: true };
    expect(await b.proclaim(otherLease, 'b2')).toBe('not-owner');
    // Another term of the leader's owner, or the leader's term from a backend that does not
    // hold it: refused.
    const lease = { key, owner: request.owner, fencingToken: term, election: true };
    expect(await a.proclaim({ ...lease, fencingToken: term + 1n }, 'x')).toBe('not-owner');
    expect(await b.proclaim(lease, 'x')).toBe('not-owner');
    expect((await candidates(dir)).map((n) => n.data)).toEqual(['10000:a1', '10000:b1']);
    expect(await a.proclaim(lease, 'a2')).toBe('proclaimed');
    expect(await b.leader(key)).toMatchObject({ owner: request.owner, term, value: 'a2' });
    // A lock lease of the same owner and token is not the leadership.
    expect(await a.release({ key, owner: request.owner, fencingToken: term })).not.toBe('released');
    expect(await a.release(lease)).toBe('released');
    expect(await a.proclaim(lease, 'a3')).toBe('not-owner');
    await b.abandon(other);
    expect(await a.proclaim(lease, 'a3')).toBe('not-held');
    expect(await a.leader(key)).toBeNull();
  });

  it("the leader's session expires: the next candidate leads, an observer sees it, the old term is refused", async () => {
    const key = 'expiry';
    const TIMEOUT = 2_000;
    const proxy: TcpProxy = ns.track(await startTcpProxy({ targetPort: portOf(1) }));
    // The leader reaches the ensemble only through the proxy.
    const cutOff = ns.track(
      createLocker(zkUrl(ns.namespace, `127.0.0.1:${proxy.port}`), { ttlMs: TIMEOUT }),
    );
    const follower = ns.locker({ ttlMs: 10_000 });
    const watcher = ns.locker();
    const leading = await cutOff.election(key).campaign('old');
    const next = follower.election(key).campaign('new', { waitMs: 20_000 });
    next.catch(() => undefined);
    const dir = ((await follower.backend()) as ZookeeperBackend).electionDirOf(key);
    await waitUntil('second candidate in line', async () => (await candidates(dir)).length === 2);

    const seen: (ElectionLeader | null)[] = [];
    const stop = new AbortController();
    const observing = (async () => {
      for await (const leader of watcher.election(key).observe({ signal: stop.signal })) {
        seen.push(leader);
      }
    })();
    await waitUntil('observer sees the old leader', () => seen.at(-1)?.value === 'old');

    const cutAt = performance.now();
    proxy.cut();
    // The server expires the session after its timeout: its node goes, the next one leads.
    const leadership = await next;
    const grantedMs = performance.now() - cutAt;
    expect(leadership.term).toBeGreaterThan(leading.term);
    expect(leading.signal.aborted).toBe(true);
    await waitUntil('observer sees the new leader', () => seen.at(-1)?.value === 'new', 5_000);
    const observedMs = performance.now() - cutAt;
    console.info(
      `zk election: leader's ${TIMEOUT} ms session cut off; next candidate granted ` +
        `${Math.round(grantedMs)} ms after the cut, observed ${Math.round(observedMs)} ms after it`,
    );
    expect(grantedMs).toBeLessThan(TIMEOUT + 5_000);
    stop.abort();
    await observing;
    expect(seen.map((l) => l?.value ?? null)).toEqual(['old', 'new']);
    expect(seen.map((l) => l?.term)).toEqual([leading.term, leadership.term]);

    // The old leader, connected again, cannot write with its term.
    await proxy.restore();
    const oldBackend = (await cutOff.backend()) as ZookeeperBackend;
    const stale = { key, owner: leading.owner, fencingToken: leading.term, election: true };
    expect(await oldBackend.proclaim(stale, 'stale')).toBe('not-owner');
    expect((await candidates(dir)).map((n) => n.data)).toEqual(['10000:new']);
    await leadership.resign();
  }, 30_000);

  it('watchElection: armed before the election exists; tells of each grant, proclaim and resign; nothing after stop()', async () => {
    const key = 'watch';
    const observer = ns.backend();
    const a = ns.backend();
    const b = ns.backend();
    const dir = observer.electionDirOf(key);
    expect(await exists(dir)).toBe(false);
    const changes = new Changes();
    const watch = await observer.watchElection(key, changes.onChange);
    expect(watch.recheckAfterMs).toBe(30_000);
    const session = await observer.session(DEFAULTS.ttlMs);
    // No election node yet: one exists watch on it.
    expect(session.pendingWatches).toBe(1);

    const first = candidacy(key, 'a1');
    const grant = (await a.attempt(first)) as { token: bigint };
    await changes.after(0, 'the first candidate made the election node');
    const lease = { key, owner: first.owner, fencingToken: grant.token, election: true };
    // Set again: the line's children and the leader's data (the creation's exists watch fired).
    await waitUntil('line and head watched', () => session.pendingWatches === 2);
    let seen = changes.count;
    expect(await a.proclaim(lease, 'a2')).toBe('proclaimed');
    await changes.after(seen, 'proclaim');
    seen = changes.count;
    const second = candidacy(key, 'b1');
    await b.attempt(second);
    await changes.after(seen, 'a candidate joined');
    seen = changes.count;
    expect(await a.release(lease)).toBe('released');
    await changes.after(seen, 'the leader resigned');
    expect(await observer.leader(key)).toMatchObject({ owner: second.owner, value: 'b1' });
    seen = changes.count;
    const secondGrant = (await b.attempt(second)) as { token: bigint };
    expect(
      await b.proclaim(
        { key, owner: second.owner, fencingToken: secondGrant.token, election: true },
        'b2',
      ),
    ).toBe('proclaimed');
    await changes.after(seen, "the new leader's proclaim");

    watch.stop();
    watch.stop();
    // A watch being set again when stop() came (after the proclaim fired it) is forgotten as its
    // request returns (CI saw one still counted right after stop()); none stays after that.
    await waitUntil('the watches forgotten', () => session.pendingWatches === 0);
    seen = changes.count;
    await b.abandon(second);
    await a.attempt(candidacy(key, 'c1'));
    await sleep(500);
    expect(changes.count).toBe(seen);
  });

  it("watchElection: the observer's own session ends; the watches are set in a new session and keep telling", async () => {
    const key = 'watch-session';
    const observer = ns.backend();
    const a = ns.backend();
    const request = candidacy(key, 'a1');
    const grant = (await a.attempt(request)) as { token: bigint };
    const lease = { key, owner: request.owner, fencingToken: grant.token, election: true };
    const changes = new Changes();
    const watch = await observer.watchElection(key, changes.onChange);
    const old = await observer.session(DEFAULTS.ttlMs);
    expect(old.pendingWatches).toBe(2);
    old.lose(new Error('test: session ended'));
    // Told at once (changes may go unseen until the watches are set again), then set again.
    await changes.after(0, 'session end told');
    const renewed = await observer.session(DEFAULTS.ttlMs);
    expect(renewed).not.toBe(old);
    await waitUntil('watches set in the new session', () => renewed.pendingWatches === 2);
    const seen = changes.count;
    expect(await a.proclaim(lease, 'a2')).toBe('proclaimed');
    await changes.after(seen, 'proclaim after the new session');
    expect((await observer.leader(key))?.value).toBe('a2');
    watch.stop();
    expect(renewed.pendingWatches).toBe(0);
    await a.release(lease);
  });

  it('close() stops the watches of the backend: no call after it, no timer left', async () => {
    const key = 'watch-close';
    const observer = ns.backend();
    const a = ns.backend();
    const changes = new Changes();
    await observer.watchElection(key, changes.onChange);
    const timersBefore = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    await observer.close();
    const seen = changes.count;
    const request = candidacy(key, 'a1');
    const grant = (await a.attempt(request)) as { token: bigint };
    await sleep(300);
    expect(changes.count).toBe(seen);
    expect(
      process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length,
    ).toBeLessThanOrEqual(timersBefore);
    await a.release({ key, owner: request.owner, fencingToken: grant.token, election: true });
  });
});
