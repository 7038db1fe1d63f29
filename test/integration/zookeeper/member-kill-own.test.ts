/**
 * A ZooKeeper server killed while a lock is held, `suspended=wait`: the server the holder is
 * connected to (a follower) dies; the client moves to another server within the session timeout
 * and the lease survives, on the same session and node. Its own file, so its own process (see
 * `restoreEnsemble`).
 */
import { describe, expect, it } from 'vitest';
import {
  abortTime,
  backendOf,
  followersHosts,
  hostsOf,
  killServer,
  leader,
  modeOf,
  nodesOf,
  restoreEnsemble,
  serversOfSession,
  sessionOf,
  sleep,
  useZookeeper,
  waitUntil,
} from './fault-support.js';

const zk = useZookeeper('member-kill-own', { adminOnLeader: true });

describe("zookeeper: the holder's server is killed", () => {
  it('suspended=wait: the server the holder is connected to is killed; the client moves, the lease survives', async () => {
    const TIMEOUT = 4000;
    const k = 'faults:server-kill:own';
    // The holder reaches only the followers, so the server killed is a follower: the leader's
    // kill is an election, which is not what this test is about.
    const holder = zk.locker(zk.url(await followersHosts(), 'suspended=wait'), { ttlMs: TIMEOUT });
    // The other locker on the leader, which is not killed.
    const other = zk.locker(zk.url(hostsOf([await leader()])), { ttlMs: TIMEOUT });
    const dir = (await backendOf(holder)).dirOf(k);
    const lease = await holder.acquire(k);
    const lost = abortTime(lease.signal);
    const session = await sessionOf(holder, TIMEOUT);
    // The other locker's session is opened before the kill: opening one while a server is down
    // can take longer than the connect timeout on a loaded machine (the client may try the dead
    // server first), which is not what this test is about.
    expect(await other.tryAcquire(k)).toBeNull();
    const [server] = await serversOfSession(session.id);
    expect(server).toBeDefined();
    const mode = await modeOf(server!);

    // The disconnection aborts `suspended`; a reconnection within the session replaces it.
    const connected = session.suspended;
    let suspendedAt: number | undefined;
    connected.addEventListener('abort', () => {
      suspendedAt = performance.now();
    });
    const killedAt = performance.now();
    // Watched while the kill script runs (it returns once the process is gone).
    const [, reconnectedAt] = await Promise.all([
      killServer(server!),
      waitUntil(
        'reconnected',
        () => {
          if (!session.alive) {
            throw new Error(
              `session ${session.id} declared lost ${Math.round(performance.now() - killedAt)} ms ` +
                `after zk${server} (${mode}) was killed: ${String(session.signal.reason)}`,
            );
          }
          return session.suspended !== connected && !session.suspended.aborted;
        },
        2 * TIMEOUT,
      ).then(() => performance.now()),
    ]);
    const now = await serversOfSession(session.id);
    console.info(
      `zk server kill (wait): killed zk${server} (${mode}), the holder's server; disconnection seen ` +
        `${Math.round(suspendedAt! - killedAt)} ms after the kill, reconnected to zk${now.join(',')} ` +
        `${Math.round(reconnectedAt - killedAt)} ms after it (session ${TIMEOUT} ms)`,
    );
    expect(suspendedAt).toBeDefined();
    expect(reconnectedAt - killedAt).toBeLessThan(TIMEOUT);
    expect(now).toHaveLength(1);
    expect(now[0]).not.toBe(server);
    expect(session.alive).toBe(true);

    // Held through twice the session timeout after the kill, on the same session.
    await sleep(2 * TIMEOUT - (performance.now() - killedAt));
    expect(lost.at).toBeUndefined();
    expect(lease.signal.aborted).toBe(false);
    expect(lease.isHeld).toBe(true);
    expect(await sessionOf(holder, TIMEOUT)).toBe(session);
    // The node, and writes, once the killed server is back (see restoreEnsemble).
    await restoreEnsemble();
    expect(lost.at).toBeUndefined();
    expect(await nodesOf(zk.admin, dir)).toEqual([
      expect.objectContaining({ czxid: lease.fencingToken, session: session.id }),
    ]);
    expect(await other.tryAcquire(k)).toBeNull();
    expect(await lease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
    const after = await other.acquire(k, { waitMs: 5000 });
    expect(after.fencingToken).toBeGreaterThan(lease.fencingToken);
    expect(await after.release()).toBe('released');
  }, 40_000);
});
