/**
 * ZooKeeper session states (Curator's CONNECTED / SUSPENDED / LOST) as fencelock reports them,
 * on the real ensemble, with the connection cut by a TCP proxy in front of one server:
 *
 * - `suspended=lose` (default): a lost connection loses the held leases at once
 *   (`session-lost`), keeps the waiters' places, and deletes the lost leases' nodes as soon as the
 *   connection is back, so nobody waits for the session to expire.
 * - `suspended=wait`: a cut shorter than the session timeout changes nothing; a longer one loses
 *   the lease no later than the session timeout after the last contact.
 * - LOST: the next acquire on the same locker opens a new session.
 * - Sessions the user opens (`locker.openSession`): close() and orphan().
 */
import { describe, expect, it } from 'vitest';
import {
  InvalidArgumentError,
  type Lease,
  LockLostError,
  LockTimeoutError,
} from '../../../packages/fencelock/src/index.js';
import {
  abortTime,
  backendOf,
  nodesOf,
  serversOfSession,
  sessionOf,
  settledWithin,
  sleep,
  useZookeeper,
  waitForNodes,
  waitUntil,
} from './fault-support.js';

const zk = useZookeeper('states');

/** The proxied URL of one server: the client can reach the ensemble only through it. */
function proxiedUrl(port: number, query = ''): string {
  return zk.url(`127.0.0.1:${port}`, query);
}

describe('suspended=lose (default): a cut connection loses the held lease at once', () => {
  it('lease lost promptly (session-lost); the waiter keeps its place; the node is swept on reconnection', async () => {
    const TIMEOUT = 6000;
    const k1 = 'states:lose:held';
    const k2 = 'states:lose:queued';
    const proxy = await zk.proxy(1);
    const x = zk.locker(proxiedUrl(proxy.port), { ttlMs: TIMEOUT });
    const y = zk.locker(zk.url(), { ttlMs: TIMEOUT });
    const backend = await backendOf(x);
    expect(backend.suspendedPolicy).toBe('lose');
    const dir1 = backend.dirOf(k1);
    const dir2 = backend.dirOf(k2);

    const held = await x.acquire(k1);
    expect(held.ttlMs).toBe(TIMEOUT);
    const heldLost = abortTime(held.signal);
    const yHold = await y.acquire(k2);
    // x waits on k2 behind y, in the same session as its held lease.
    const xWaiting = x.acquire(k2, { waitMs: 30_000 });
    xWaiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir2, 2);
    // y waits on k1 behind x's held lease.
    let yGrantedAt: number | undefined;
    const yWaiting = y.acquire(k1, { waitMs: 30_000 }).then((lease) => {
      yGrantedAt = performance.now();
      return lease;
    });
    yWaiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir1, 2);

    const session = await sessionOf(x, TIMEOUT);
    const sessionId = session.id;
    const [xQueued] = (await nodesOf(zk.admin, dir2)).filter((n) => n.session === sessionId);
    expect(xQueued).toBeDefined();
    expect((await nodesOf(zk.admin, dir1))[0]).toMatchObject({
      czxid: held.fencingToken,
      session: sessionId,
    });

    const cutAt = performance.now();
    proxy.cut();
    await waitUntil('held lease lost', () => held.signal.aborted, TIMEOUT);
    const lossMs = heldLost.at! - cutAt;
    const lost = held.signal.reason as LockLostError;
    expect(lost).toBeInstanceOf(LockLostError);
    expect(lost.reason).toBe('session-lost');
    expect(held.isHeld).toBe(false);
    // Promptly: at the disconnection, well before the session timeout.
    expect(lossMs).toBeLessThan(1500);

    // While the connection is down the session lives on the server: its nodes stay, y waits.
    expect(await settledWithin(yWaiting, 1000)).toBe(false);
    expect((await nodesOf(zk.admin, dir1)).map((n) => n.session)[0]).toBe(sessionId);

    const restoredAt = performance.now();
    await proxy.restore();
    await waitUntil('reconnected', () => !session.suspended.aborted, TIMEOUT);
    const reconnectMs = performance.now() - restoredAt;
    const yLease = await yWaiting;
    const sweepMs = yGrantedAt! - restoredAt;
    console.info(
      `zk lose: lease lost ${Math.round(lossMs)} ms after the cut (session ${TIMEOUT} ms); ` +
        `reconnected ${Math.round(reconnectMs)} ms after the restore (cut ${Math.round(restoredAt - cutAt)} ms); ` +
        `y granted ${Math.round(sweepMs)} ms after the restore`,
    );
    // The same session survived, so the node went by the backend's sweep, not by expiry.
    expect(session.alive).toBe(true);
    expect(session.id).toBe(sessionId);
    expect(await sessionOf(x, TIMEOUT)).toBe(session);
    expect(sweepMs).toBeLessThan(TIMEOUT - 1000);
    expect(yLease.fencingToken).toBeGreaterThan(held.fencingToken);
    expect((await nodesOf(zk.admin, dir1)).map((n) => n.czxid)).toEqual([yLease.fencingToken]);

    // x's waiter kept its place: the same node, still queued behind y.
    expect(await nodesOf(zk.admin, dir2)).toEqual([
      expect.objectContaining({ czxid: yHold.fencingToken }),
      xQueued,
    ]);
    expect(await settledWithin(xWaiting, 200)).toBe(false);
    expect(await yHold.release()).toBe('released');
    const xLease = await xWaiting;
    expect(xLease.fencingToken).toBe(xQueued!.czxid);

    // The lost lease's late release touches nothing of y's.
    expect(['not-held', 'not-owner']).toContain(await held.release());
    expect(yLease.isHeld).toBe(true);
    expect((await nodesOf(zk.admin, dir1)).map((n) => n.czxid)).toEqual([yLease.fencingToken]);
    expect(await yLease.release()).toBe('released');
    expect(await xLease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir1)).toEqual([]);
    expect(await nodesOf(zk.admin, dir2)).toEqual([]);
  }, 30_000);
});

describe('suspended=wait: the lease lives while the session can', () => {
  it('a cut shorter than the session timeout: still held, same session', async () => {
    const TIMEOUT = 4000;
    const k = 'states:wait:short';
    const proxy = await zk.proxy(2);
    const x = zk.locker(proxiedUrl(proxy.port, 'suspended=wait'), { ttlMs: TIMEOUT });
    const y = zk.locker(zk.url(), { ttlMs: TIMEOUT });
    expect((await backendOf(x)).suspendedPolicy).toBe('wait');
    const dir = (await backendOf(x)).dirOf(k);
    const lease = await x.acquire(k);
    const session = await sessionOf(x, TIMEOUT);
    const sessionId = session.id;
    const boundBeforeCut = session.validUntil;
    expect(lease.atRisk).toBe(false);

    const cutAt = performance.now();
    proxy.cut();
    await waitUntil('suspended', () => session.suspended.aborted, 2000);
    // Held, but at risk while the connection is down.
    expect(lease.atRisk).toBe(true);
    await sleep(1000 - (performance.now() - cutAt));
    expect(lease.isHeld).toBe(true);
    expect(lease.atRisk).toBe(true);
    const restoredAt = performance.now();
    await proxy.restore();
    await waitUntil('reconnected', () => !session.suspended.aborted, TIMEOUT);
    const reconnectMs = performance.now() - restoredAt;
    expect(lease.atRisk).toBe(false);

    // Past the bound the session had before the cut: the reconnection proved it alive again.
    await sleep(boundBeforeCut + 1000 - performance.now());
    console.info(
      `zk wait: 1 s cut, reconnected ${Math.round(reconnectMs)} ms after the restore; ` +
        `validity moved ${Math.round(session.validUntil - boundBeforeCut)} ms`,
    );
    expect(lease.signal.aborted).toBe(false);
    expect(lease.isHeld).toBe(true);
    expect(session.alive).toBe(true);
    expect(session.id).toBe(sessionId);
    expect(session.validUntil).toBeGreaterThan(boundBeforeCut);
    expect(await nodesOf(zk.admin, dir)).toEqual([
      expect.objectContaining({ czxid: lease.fencingToken, session: sessionId }),
    ]);
    expect(await serversOfSession(sessionId)).toEqual([2]);
    expect(await y.tryAcquire(k)).toBeNull();
    expect(await lease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 30_000);

  it('a cut longer than the session timeout: lost by the timeout after the last contact, before the next grant', async () => {
    const TIMEOUT = 3000;
    const k = 'states:wait:long';
    const proxy = await zk.proxy(3);
    const x = zk.locker(proxiedUrl(proxy.port, 'suspended=wait'), { ttlMs: TIMEOUT });
    const y = zk.locker(zk.url(), { ttlMs: 10_000 });
    const dir = (await backendOf(x)).dirOf(k);
    const lease = await x.acquire(k);
    const lostAt = abortTime(lease.signal);
    const session = await sessionOf(x, TIMEOUT);
    let yGrantedAt: number | undefined;
    let xAbortedAtYGrant: boolean | undefined;
    const yWaiting = y.acquire(k, { waitMs: 30_000 }).then((granted: Lease) => {
      yGrantedAt = performance.now();
      xAbortedAtYGrant = lease.signal.aborted;
      return granted;
    });
    yWaiting.catch(() => undefined);
    await waitForNodes(zk.admin, dir, 2);

    // The session's own bound: its last confirmed contact + timeout − drift.
    const bound = session.validUntil;
    const cutAt = performance.now();
    proxy.cut();
    await waitUntil('lease lost', () => lease.signal.aborted, 2 * TIMEOUT);
    const yLease = await yWaiting;
    console.info(
      `zk wait: ${TIMEOUT} ms session cut off: lease lost ${Math.round(lostAt.at! - cutAt)} ms ` +
        `after the cut (bound ${Math.round(bound - cutAt)} ms after it); ` +
        `y granted ${Math.round(yGrantedAt! - cutAt)} ms after the cut`,
    );
    const lost = lease.signal.reason as LockLostError;
    expect(lost).toBeInstanceOf(LockLostError);
    expect(['expired', 'session-lost']).toContain(lost.reason);
    // Not at the disconnection (that is the `lose` policy) …
    expect(lostAt.at! - cutAt).toBeGreaterThan(TIMEOUT / 3);
    // … and no later than the session timeout after the last contact (timer slack allowed).
    expect(lostAt.at!).toBeLessThanOrEqual(bound + 250);
    expect(session.alive).toBe(false);
    // The server expired the session: y got the lock, after x knew it had lost it.
    expect(xAbortedAtYGrant).toBe(true);
    expect(lostAt.at!).toBeLessThanOrEqual(yGrantedAt!);
    expect(yGrantedAt! - cutAt).toBeLessThanOrEqual(TIMEOUT + 3000);
    expect(yLease.fencingToken).toBeGreaterThan(lease.fencingToken);

    await sleep(2 * TIMEOUT - (performance.now() - cutAt));
    await proxy.restore();
    expect(['not-held', 'not-owner']).toContain(await lease.release());
    expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([yLease.fencingToken]);
    expect(await yLease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 30_000);
});

describe('LOST: session expiry', () => {
  it('the next acquire on the same locker opens a new session, and it works', async () => {
    const TIMEOUT = 2000;
    const k = 'states:expiry';
    const proxy = await zk.proxy(1);
    const x = zk.locker(proxiedUrl(proxy.port), { ttlMs: TIMEOUT });
    const dir = (await backendOf(x)).dirOf(k);
    const first = await x.acquire(k);
    const old = await sessionOf(x, TIMEOUT);
    expect(old.timeoutMs).toBe(TIMEOUT);

    const cutAt = performance.now();
    proxy.cut();
    await waitUntil('lease lost', () => first.signal.aborted, TIMEOUT);
    expect((first.signal.reason as LockLostError).reason).toBe('session-lost');
    // Our own clock ends the session at its bound.
    await waitUntil('session lost', () => !old.alive, 2 * TIMEOUT);
    const sessionLostMs = performance.now() - cutAt;
    // And the server expires it: its node goes.
    await waitForNodes(zk.admin, dir, 0, TIMEOUT + 3000);
    const nodeGoneMs = performance.now() - cutAt;
    await sleep(2 * TIMEOUT - (performance.now() - cutAt));
    await proxy.restore();

    const second = await x.acquire(k, { waitMs: 10_000 });
    const fresh = await sessionOf(x, TIMEOUT);
    console.info(
      `zk LOST: session ${old.id} believed lost ${Math.round(sessionLostMs)} ms after the cut, ` +
        `its node gone ${Math.round(nodeGoneMs)} ms after it; new session ${fresh.id}`,
    );
    expect(fresh).not.toBe(old);
    expect(fresh.id).not.toBe(old.id);
    expect(fresh.alive).toBe(true);
    expect(second.isHeld).toBe(true);
    expect(second.fencingToken).toBeGreaterThan(first.fencingToken);
    expect(await nodesOf(zk.admin, dir)).toEqual([
      expect.objectContaining({ czxid: second.fencingToken, session: fresh.id }),
    ]);
    expect(['not-held', 'not-owner']).toContain(await first.release());
    expect(await second.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 30_000);
});

describe('sessions opened by the user', () => {
  it('close() deletes its nodes at once: leases lost (session-lost), waiters cancelled, others granted', async () => {
    const x = zk.locker(zk.url(), { ttlMs: 10_000 });
    const y = zk.locker(zk.url(), { ttlMs: 10_000 });
    const backend = await backendOf(x);
    const k1 = 'states:user:held';
    const k2 = 'states:user:queued';
    const session = await x.openSession({ ttlMs: 4000 });
    expect(session.ttlMs).toBe(4000);
    expect(session.isOpen).toBe(true);

    const held = await x.acquire(k1, { session });
    expect(held.ttlMs).toBe(4000);
    expect(await nodesOf(zk.admin, backend.dirOf(k1))).toEqual([
      expect.objectContaining({ czxid: held.fencingToken, session: session.id }),
    ]);
    const yHold = await y.acquire(k2);
    const queued = x.acquire(k2, { session }).then(
      () => undefined,
      (error: unknown) => error,
    );
    await waitForNodes(zk.admin, backend.dirOf(k2), 2);
    let yGrantedAt: number | undefined;
    const yWaiting = y.acquire(k1, { waitMs: 10_000 }).then((lease) => {
      yGrantedAt = performance.now();
      return lease;
    });
    yWaiting.catch(() => undefined);
    await waitForNodes(zk.admin, backend.dirOf(k1), 2);

    const closedAt = performance.now();
    await session.close();
    expect(session.isOpen).toBe(false);
    expect(held.signal.aborted).toBe(true);
    const lost = held.signal.reason as LockLostError;
    expect(lost).toBeInstanceOf(LockLostError);
    expect(lost.reason).toBe('session-lost');
    const cancelled = await queued;
    expect(cancelled).toBeInstanceOf(LockTimeoutError);
    expect(String((cancelled as Error).message)).toContain(`session ${session.id} ended`);
    // The server deleted the session's nodes when it heard the close: y is granted at once.
    const yLease = await yWaiting;
    console.info(
      `zk user session: y granted ${Math.round(yGrantedAt! - closedAt)} ms after close() (session 4000 ms)`,
    );
    expect(yGrantedAt! - closedAt).toBeLessThan(1500);
    expect(yLease.fencingToken).toBeGreaterThan(held.fencingToken);
    expect((await nodesOf(zk.admin, backend.dirOf(k1))).map((n) => n.czxid)).toEqual([
      yLease.fencingToken,
    ]);
    expect((await nodesOf(zk.admin, backend.dirOf(k2))).map((n) => n.czxid)).toEqual([
      yHold.fencingToken,
    ]);
    expect(['not-held', 'not-owner']).toContain(await held.release());
    expect(() => x.lock('states:user:again', { session })).toThrow(InvalidArgumentError);
    expect(await yLease.release()).toBe('released');
    expect(await yHold.release()).toBe('released');
  });

  it('orphan(): no new locks in it; its lease is lost within its TTL and the node goes', async () => {
    const x = zk.locker(zk.url(), { ttlMs: 10_000 });
    const y = zk.locker(zk.url(), { ttlMs: 10_000 });
    const k = 'states:user:orphan';
    const dir = (await backendOf(x)).dirOf(k);
    const session = await x.openSession({ ttlMs: 2000 });
    const lease = await x.acquire(k, { session });
    const lostAt = abortTime(lease.signal);
    const orphanedAt = performance.now();
    session.orphan();
    expect(session.isOpen).toBe(false);
    expect(() => x.lock('states:user:orphan:new', { session })).toThrow(InvalidArgumentError);
    // Still held on the engine: nobody else gets it before the TTL.
    expect(await y.tryAcquire(k)).toBeNull();
    let yGrantedAt: number | undefined;
    const yWaiting = y.acquire(k, { waitMs: 8000 }).then((granted) => {
      yGrantedAt = performance.now();
      return granted;
    });
    yWaiting.catch(() => undefined);
    const lostInTime = await waitUntil(
      'orphaned lease lost',
      () => lease.signal.aborted,
      3 * session.ttlMs,
    ).then(
      () => true,
      () => false,
    );
    expect(
      lostInTime,
      `the lease of the orphaned session is still held ${Math.round(performance.now() - orphanedAt)} ms ` +
        `after orphan() (TTL ${session.ttlMs} ms; isHeld ${lease.isHeld}, remainingMs ${Math.round(lease.remainingMs)})`,
    ).toBe(true);
    const yLease = await yWaiting;
    console.info(
      `zk orphan: lease lost ${Math.round(lostAt.at! - orphanedAt)} ms after orphan() ` +
        `(TTL ${session.ttlMs}); y granted ${Math.round(yGrantedAt! - orphanedAt)} ms after it`,
    );
    expect(lostAt.at! - orphanedAt).toBeLessThanOrEqual(session.ttlMs + 250);
    expect(['expired', 'session-lost']).toContain((lease.signal.reason as LockLostError).reason);
    expect(lostAt.at!).toBeLessThanOrEqual(yGrantedAt!);
    expect(yLease.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect((await nodesOf(zk.admin, dir)).map((n) => n.czxid)).toEqual([yLease.fencingToken]);
    expect(await yLease.release()).toBe('released');
  }, 20_000);

  it("the locker's close() closes its open sessions: their nodes go at once", async () => {
    const x = zk.locker(zk.url(), { ttlMs: 10_000 });
    const k = 'states:user:locker-close';
    const dir = (await backendOf(x)).dirOf(k);
    const session = await x.openSession({ ttlMs: 4000 });
    const lease = await x.acquire(k, { session });
    // A second lock in the same session, left held too.
    const other = await x.acquire(`${k}:2`, { session });
    expect(await nodesOf(zk.admin, dir)).toEqual([
      expect.objectContaining({ czxid: lease.fencingToken, session: session.id }),
    ]);
    await x.close();
    expect(session.isOpen).toBe(false);
    expect(session.signal.aborted).toBe(true);
    expect(other.isHeld).toBe(false);
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
    expect(await nodesOf(zk.admin, (await backendOf(x)).dirOf(`${k}:2`))).toEqual([]);
  });
});
