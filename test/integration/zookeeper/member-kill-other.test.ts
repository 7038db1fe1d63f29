/**
 * A ZooKeeper server killed while a lock is held, default policy: a follower the holder is not
 * connected to dies; the holder's connection and lease are untouched, and the lock works
 * meanwhile.
 */
import { describe, expect, it } from 'vitest';
import {
  abortTime,
  backendOf,
  hostsOf,
  killServer,
  nodesOf,
  SERVERS,
  serversOfSession,
  sessionOf,
  sleep,
  someFollower,
  useZookeeper,
} from './fault-support.js';

const zk = useZookeeper('member-kill-other');

describe('zookeeper: a follower the holder does not use is killed', () => {
  it('default policy: a follower the holder is not connected to is killed; the lease survives', async () => {
    const TIMEOUT = 4000;
    const k = 'faults:server-kill:other';
    // Not the leader: a follower that loses its leader drops all its clients, which under the
    // default policy loses the lease (that is the policy, not a fault of the lock). The lockers
    // reach only the two other servers, so the holder is not connected to the victim.
    const victim = await someFollower();
    // 20 s to connect: this test is not about connecting on a loaded machine.
    const url = zk.url(hostsOf(SERVERS.filter((n) => n !== victim)), 'connectTimeoutMs=20000');
    const holder = zk.locker(url, { ttlMs: TIMEOUT });
    const other = zk.locker(url, { ttlMs: TIMEOUT });
    const dir = (await backendOf(holder)).dirOf(k);
    const lease = await holder.acquire(k);
    const lost = abortTime(lease.signal);
    const session = await sessionOf(holder, TIMEOUT);
    const [connected] = await serversOfSession(session.id);
    expect(connected).toBeDefined();
    expect(connected).not.toBe(victim);
    // The other locker opens its session now, with every member up.
    expect(await other.tryAcquire(k)).toBeNull();

    // Any disconnection, even one followed by a reconnection, replaces this signal.
    const connectedSignal = session.suspended;
    const killedAt = performance.now();
    await killServer(victim);
    await sleep(2 * TIMEOUT - (performance.now() - killedAt));
    console.info(
      `zk server kill (lose): killed zk${victim} (follower); the holder stayed on zk${connected}`,
    );
    expect(connectedSignal.aborted).toBe(false);
    expect(session.suspended).toBe(connectedSignal);
    expect(lost.at).toBeUndefined();
    expect(lease.isHeld).toBe(true);
    expect(await serversOfSession(session.id)).toEqual([connected]);
    // And the lock works with the server still down.
    expect(await other.tryAcquire(k)).toBeNull();
    expect(await lease.release()).toBe('released');
    expect(await nodesOf(zk.admin, dir)).toEqual([]);
  }, 40_000);
});
