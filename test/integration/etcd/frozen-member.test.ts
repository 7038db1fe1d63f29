/**
 * A follower that stops answering (SIGSTOP) must not cost a lease that a majority can still
 * renew. The session's keepalive used to run on the etcd3 package's one long-lived stream; when
 * the member carrying it froze, keepalives stalled until the lease was declared lost at its TTL
 * (3.9 s of a 4 s lease, and 5.9 s of a 6 s lease, in manual runs). Now each beat is a short
 * stream with a deadline to a member picked at random, and each renewal try has a deadline of its
 * own. (Which member carried the old stream was random, so this test did not fail on every run
 * of the old code; it guards the property.)
 *
 * Every follower is frozen in turn for twice the TTL, so whichever member carries the session's
 * traffic is covered.
 */
import { afterAll, describe, expect, it } from 'vitest';
import {
  leaderMember,
  MEMBERS,
  pauseMember,
  restoreCluster,
  resumeMember,
} from '../../helpers/etcd-cluster.js';
import { sleep, useNamespace } from './support.js';

const ns = useNamespace('frozen');
const TTL_MS = 4000;

afterAll(async () => {
  await restoreCluster();
});

describe('etcd: a frozen follower', () => {
  it('does not cost a held lease (each follower frozen for twice the TTL)', async () => {
    const leader = await leaderMember();
    expect(leader).toBeDefined();
    const followers = MEMBERS.filter((m) => m !== leader);
    expect(followers).toHaveLength(2);
    for (const follower of followers) {
      const locker = ns.locker({ ttlMs: TTL_MS });
      const lease = await locker.acquire(`frozen:${follower}`);
      await pauseMember(follower);
      try {
        await sleep(TTL_MS * 2);
      } finally {
        await resumeMember(follower);
      }
      expect(lease.signal.aborted, String(lease.signal.reason)).toBe(false);
      expect(lease.isHeld).toBe(true);
      expect(await lease.release()).toBe('released');
    }
  }, 60_000);
});
