/**
 * A ZooKeeper server killed while a lock is held, `suspended=wait`: the server the holder is
 * connected to (a follower) dies; the client moves to another server within the session timeout
 * and the lease survives, on the same session and node; the lock works meanwhile. Then a new
 * session in this process, after the server was started again by `scripts/services.sh`.
 */
import { describe, expect, it } from 'vitest';
import {
  abortTime,
  backendOf,
  followersHosts,
  killServer,
  modeOf,
  nodesOf,
  restoreEnsemble,
  serversOfSession,
  sessionOf,
  sleep,
  someFollower,
  useZookeeper,
  waitUntil,
} from './fault-support.js';

const zk = useZookeeper('member-kill-own');

describe("zookeeper: the holder's server is killed", () => {
  it('suspended=wait: the server the holder is connected to is killed; the client moves, the lease survives', async () => {
    const TIMEOUT = 4000;
    const k = 'faults:server-kill:own';
    // The holder reaches only the followers, so the server killed is a follower: the leader's
    // kill is an election, which is not what this test is about.
    const holder = zk.locker(zk.url(await followersHosts(), 'suspended=wait'), { ttlMs: TIMEOUT });
    const other = zk.locker(zk.url(), { ttlMs: TIMEOUT });
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
    // And the lock works with the server still down.
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

  it('a new session opens in this process after a server was killed and started again', async () => {
    // scripts/services.sh starts the server from this process. It inherited this process's
    // ZooKeeper sockets (the `zookeeper` package does not set close-on-exec) until the script
    // closed them. A socket closed here then lived on in the server, and epoll here kept
    // reporting it under its number: the next client given that number was woken with nothing
    // to read until the binding declared its session expired, again and again (no session
    // within 60 s, every run).
    const first = zk.locker(zk.url(), { ttlMs: 4000 });
    expect(await first.tryAcquire('member-kill-own:first')).not.toBeNull();
    await killServer(await someFollower());
    await restoreEnsemble();
    await first.close();
    const locker = zk.locker(zk.url(undefined, 'connectTimeoutMs=10000'), { ttlMs: 4000 });
    const lease = await locker.acquire('member-kill-own:new-session');
    expect(lease.isHeld).toBe(true);
    expect(await lease.release()).toBe('released');
  }, 40_000);
});
