/**
 * Fault-test helpers for the shared 3-member etcd cluster of `scripts/services.sh up etcd`
 * (members 1..3 = etcd1..etcd3, client URLs in `ETCD_ENDPOINTS`).
 *
 * Member control (kill, start, pause, resume) goes through `services.sh etcd-member`, the one
 * place that knows how a member is launched; this file reads the same PID files, asks the members
 * who leads (`POST /v3/maintenance/status`, whose IDs come as strings, unlike etcdctl's JSON) and
 * waits. Tests that break a member must put it back (`restoreCluster()` in `afterAll`): the
 * cluster is shared with every other test.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ETCD_ENDPOINTS } from './engines.js';

export type Member = 1 | 2 | 3;
export const MEMBERS: readonly Member[] = [1, 2, 3];

/** Same rule as services.sh: `${FENCELOCK_SERVICES_DIR:-${TMPDIR:-/tmp}/fencelock-services}`. */
export const SERVICES_DIR =
  process.env.FENCELOCK_SERVICES_DIR || join(process.env.TMPDIR || '/tmp', 'fencelock-services');
const SERVICES_SH = fileURLToPath(new URL('../../scripts/services.sh', import.meta.url));

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Client URL of member n. */
export function endpointOf(n: Member): string {
  return ETCD_ENDPOINTS[n - 1]!;
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** PID of member n from `$SERVICES_DIR/etcd<n>.pid`; undefined when missing or not running. */
export function memberPid(n: Member): number | undefined {
  let text: string;
  try {
    text = readFileSync(join(SERVICES_DIR, `etcd${n}.pid`), 'utf8');
  } catch {
    return undefined;
  }
  const pid = Number.parseInt(text.trim(), 10);
  return Number.isInteger(pid) && pid > 0 && pidAlive(pid) ? pid : undefined;
}

/** PIDs of all members; undefined for one that is not running. */
export function memberPids(): Record<Member, number | undefined> {
  return { 1: memberPid(1), 2: memberPid(2), 3: memberPid(3) };
}

/** True when member n is running but stopped by SIGSTOP (state T in /proc/<pid>/stat). */
export function isPaused(n: Member): boolean {
  const pid = memberPid(n);
  if (pid === undefined) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('T');
  } catch {
    return false;
  }
}

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function run(file: string, args: readonly string[], timeoutMs: number): Promise<Run> {
  // etcdctl refuses a flag that an ETCDCTL_* variable shadows; none of those apply here.
  const env: NodeJS.ProcessEnv = { ETCDCTL_API: '3' };
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.startsWith('ETCD_') && !name.startsWith('ETCDCTL_')) env[name] = value;
  }
  return new Promise((resolve, reject) => {
    execFile(file, args, { env, timeout: timeoutMs }, (error, stdout, stderr) => {
      if (error !== null && typeof error.code !== 'number') reject(error);
      else resolve({ code: error === null ? 0 : Number(error.code), stdout, stderr });
    });
  });
}

/**
 * Run `etcdctl --endpoints=<endpoints> <args>` (short dial and command timeouts) and return its
 * stdout; throws with its stderr when it fails.
 */
export async function etcdctl(
  args: readonly string[],
  endpoints: readonly string[] = ETCD_ENDPOINTS,
): Promise<string> {
  const result = await run(
    'etcdctl',
    [`--endpoints=${endpoints.join(',')}`, '--dial-timeout=1s', '--command-timeout=3s', ...args],
    10_000,
  );
  if (result.code !== 0) {
    throw new Error(`etcdctl ${args.join(' ')} failed (${result.code}): ${result.stderr.trim()}`);
  }
  return result.stdout;
}

/** `bash scripts/services.sh etcd-member <action> <n>`; throws with its stderr when it fails. */
async function memberControl(action: string, n: Member): Promise<void> {
  const result = await run('bash', [SERVICES_SH, 'etcd-member', action, String(n)], 45_000);
  if (result.code !== 0) {
    throw new Error(`services.sh etcd-member ${action} ${n} failed: ${result.stderr.trim()}`);
  }
}

/** Members whose `etcdctl endpoint health` passes (a quorum read through that member). */
export async function healthyMembers(): Promise<Member[]> {
  const result = await run(
    'etcdctl',
    [
      `--endpoints=${ETCD_ENDPOINTS.join(',')}`,
      '--dial-timeout=1s',
      '--command-timeout=2s',
      'endpoint',
      'health',
      '-w',
      'json',
    ],
    10_000,
  );
  let report: { endpoint: string; health: boolean }[];
  try {
    report = JSON.parse(result.stdout);
  } catch {
    return [];
  }
  return MEMBERS.filter((n) =>
    report.some((entry) => entry.endpoint === endpointOf(n) && entry.health),
  );
}

/** Wait until all three members are healthy; throws naming the ones that are not. */
export async function waitHealthy(timeoutMs = 30_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const healthy = await healthyMembers();
    if (healthy.length === MEMBERS.length) return;
    if (performance.now() >= deadline) {
      const sick = MEMBERS.filter((n) => !healthy.includes(n)).map((n) => `etcd${n}`);
      throw new Error(
        `etcd cluster not healthy within ${timeoutMs} ms (${sick.join(', ')} not healthy); ` +
          `see 'bash scripts/services.sh status etcd' and ${SERVICES_DIR}/etcd/*.log`,
      );
    }
    await sleep(200);
  }
}

/** What member n says about itself: its ID, the leader's ID ('0' when none) and the term. */
export interface MemberStatus {
  readonly member: Member;
  readonly id: string;
  readonly leaderId: string;
  readonly raftTerm: number;
}

/** Status of member n from its HTTP API; undefined when it does not answer within timeoutMs. */
export async function memberStatus(
  n: Member,
  timeoutMs = 1_000,
): Promise<MemberStatus | undefined> {
  try {
    const response = await fetch(`${endpointOf(n)}/v3/maintenance/status`, {
      method: 'POST',
      body: '{}',
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (!response.ok) return undefined;
    const body = (await response.json()) as {
      header?: { member_id?: string };
      leader?: string;
      raftTerm?: string;
    };
    if (body.header?.member_id === undefined) return undefined;
    return {
      member: n,
      id: body.header.member_id,
      leaderId: body.leader ?? '0',
      raftTerm: Number(body.raftTerm ?? 0),
    };
  } catch {
    return undefined;
  }
}

/**
 * The member that reports itself leader (the highest term wins if two briefly do); undefined
 * when no answering member leads, e.g. during an election.
 */
export async function leaderMember(): Promise<Member | undefined> {
  const statuses = await Promise.all(MEMBERS.map((n) => memberStatus(n)));
  let leader: MemberStatus | undefined;
  for (const status of statuses) {
    if (status === undefined || status.id !== status.leaderId) continue;
    if (leader === undefined || status.raftTerm > leader.raftTerm) leader = status;
  }
  return leader?.member;
}

/** Poll `leaderMember()` until it returns a member `accept` takes; throws after timeoutMs. */
export async function waitForLeader(
  accept: (n: Member) => boolean = () => true,
  timeoutMs = 10_000,
): Promise<Member> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const leader = await leaderMember();
    if (leader !== undefined && accept(leader)) return leader;
    if (performance.now() >= deadline) {
      throw new Error(`no acceptable etcd leader within ${timeoutMs} ms (last: ${leader})`);
    }
    await sleep(50);
  }
}

/** SIGKILL member n by PID and wait until it is gone. Its data dir stays for `startMember`. */
export function killMember(n: Member): Promise<void> {
  return memberControl('kill', n);
}

/**
 * Re-launch member n with its existing data dir (`--initial-cluster-state existing`), then wait
 * until all three members are healthy again.
 */
export async function startMember(n: Member, timeoutMs = 30_000): Promise<void> {
  await memberControl('start', n);
  await waitHealthy(timeoutMs);
}

/** Freeze member n (SIGSTOP): its sockets stay open, it answers nothing. */
export function pauseMember(n: Member): Promise<void> {
  return memberControl('pause', n);
}

/** Thaw member n (SIGCONT). */
export function resumeMember(n: Member): Promise<void> {
  return memberControl('resume', n);
}

/**
 * For `afterAll`: resume paused members, restart dead ones (together, so two of them can form a
 * quorum again), wait until all three are healthy.
 */
export async function restoreCluster(timeoutMs = 30_000): Promise<void> {
  for (const n of MEMBERS) if (isPaused(n)) await resumeMember(n);
  const dead = MEMBERS.filter((n) => memberPid(n) === undefined);
  await Promise.all(dead.map((n) => memberControl('start', n)));
  await waitHealthy(timeoutMs);
}
