/**
 * The etcd fault-test helpers against the real 3-member cluster of `scripts/services.sh up etcd`:
 * leader lookup, SIGKILL of the leader and re-election, restart from the old data dir, pause and
 * resume. Leaves the cluster as it found it: 3 healthy members.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  endpointOf,
  etcdctl,
  healthyMembers,
  killMember,
  MEMBERS,
  type Member,
  memberPids,
  memberStatus,
  pauseMember,
  restoreCluster,
  resumeMember,
  startMember,
  waitForLeader,
  waitHealthy,
} from '../../helpers/etcd-cluster.js';

const key = `fencelock-test/cluster/${process.pid}-${Date.now()}`;
let killed: Member | undefined;
let clusterWasUp = false;

beforeAll(async () => {
  try {
    if (MEMBERS.every((n) => memberPids()[n] === undefined)) throw new Error('no member running');
    await waitHealthy(10_000);
    clusterWasUp = true;
  } catch (error) {
    throw new Error(`start the cluster with 'bash scripts/services.sh up etcd': ${error}`);
  }
});

afterAll(async () => {
  if (!clusterWasUp) return;
  await restoreCluster();
  await etcdctl(['del', key]);
});

describe('etcd cluster helpers', () => {
  it('sees 3 healthy members, each with a live PID, agreeing on one leader', async () => {
    const pids = memberPids();
    for (const n of MEMBERS) expect(pids[n], `etcd${n} pid`).toBeTypeOf('number');
    expect(await healthyMembers()).toEqual([1, 2, 3]);
    const leader = await waitForLeader();
    const statuses = await Promise.all(MEMBERS.map((n) => memberStatus(n)));
    const leaderIds = new Set(statuses.map((status) => status?.leaderId));
    expect(leaderIds.size).toBe(1);
    expect(statuses[leader - 1]?.id).toBe([...leaderIds][0]);
  });

  it('elects a new leader among the other two when the leader is killed; writes still work', async () => {
    const old = await waitForLeader();
    const started = performance.now();
    await killMember(old);
    killed = old;
    expect(memberPids()[old]).toBeUndefined();
    const next = await waitForLeader((n) => n !== old, 10_000);
    const failoverMs = Math.round(performance.now() - started);
    console.info(`etcd: etcd${old} (leader) killed; etcd${next} leads after ${failoverMs} ms`);
    expect(failoverMs).toBeLessThan(5_000);

    const survivors = MEMBERS.filter((n) => n !== old).map(endpointOf);
    await etcdctl(['put', key, 'written-while-one-is-down'], survivors);
    const value = await etcdctl(['get', key, '--print-value-only'], survivors);
    expect(value.trim()).toBe('written-while-one-is-down');
  });

  it('restarts the killed member from its data dir; all 3 healthy and it has caught up', async () => {
    expect(killed, 'the previous case killed a member').toBeDefined();
    const n = killed!;
    const started = performance.now();
    await startMember(n);
    console.info(
      `etcd: etcd${n} restarted; cluster healthy after ${Math.round(performance.now() - started)} ms`,
    );
    killed = undefined;
    expect(memberPids()[n]).toBeTypeOf('number');
    expect(await healthyMembers()).toEqual([1, 2, 3]);
    // A linearizable read served by the restarted member: it has the write it missed.
    const value = await etcdctl(['get', key, '--print-value-only'], [endpointOf(n)]);
    expect(value.trim()).toBe('written-while-one-is-down');
  });

  it('pauses a follower (it stops answering) and resumes it', async () => {
    const leader = await waitForLeader();
    const follower = MEMBERS.find((n) => n !== leader)!;
    await pauseMember(follower);
    try {
      expect(await memberStatus(follower, 500)).toBeUndefined();
      expect(await healthyMembers()).toEqual(MEMBERS.filter((n) => n !== follower));
    } finally {
      await resumeMember(follower);
    }
    await waitHealthy(10_000);
    expect(await healthyMembers()).toEqual([1, 2, 3]);
  });
});
