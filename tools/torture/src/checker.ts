/**
 * The checker of a torture run: three oracles over what the clients reported (each step at the
 * client's reading of the machine's monotonic clock, one clock for every process; not at the
 * harness's receipt, which can take two clients' messages in either order) and what the fenced
 * register logged.
 * A run is of a lock (`permits` 1) or of a semaphore of N permits; a lock is the case N = 1.
 *
 * 1. The fenced register: stale writes accepted (an accepted write whose token is not among the
 *    N highest tokens accepted before it, or equal to one another client wrote with, recomputed
 *    offline from the log, so a mistake in the register's SQL cannot hide one) must be 0; stale
 *    writes rejected say whether the fault bit at all. The most holders inside at once, as the
 *    register saw them (a holder is inside from its first accepted write to its last), must not
 *    exceed N; the most writing at once (accepted or not) says whether a fault put more than N
 *    writers at the resource. Writes made after the writer's own grant lapsed are counted,
 *    accepted and rejected: a semaphore's register (N highest tokens) may take a lapsed
 *    holder's write and refuse a valid holder outrun by N later ones.
 * 2. Overlapping critical sections as the library believed them: each grant is believed from
 *    its `acquired` event until the first of the start of its release, its loss, or the end of
 *    the validity the client last reported; a grant made while N grants to other clients were
 *    believed is a double grant (one per grant beyond N). Raw overlaps (acquired → start of
 *    release: "the code ran") are counted the same way: pauses make them expected.
 * 3. Token monotonicity. A lock: over grants in the order the harness received them, no token
 *    may be lower than (regression) or equal to (duplicate) an earlier one. A semaphore: no two
 *    grants may share a token (duplicate), and a grant asked for after another grant's acquire
 *    had returned (both as the clients read the machine's monotonic clock) must have a higher
 *    token than it (regression); grants made at about the same time to different holders may
 *    reach the harness in either order, so receipt order proves nothing there.
 * Plus liveness (time from a fault to the next grant to another client, in TTLs; for a
 * semaphore, until other clients hold all N permits at once, i.e. the permit the fault hit is
 * back) and loss-detection latency (from the moment the engine had demonstrably dropped the
 * lease, i.e. another client was granted, or for a semaphore other clients held all N permits,
 * or from the holder's resume if it was paused then, to the holder's `lost` event).
 * 4. Lock-delay (a lock or an election whose grants carry `lockDelayMs` = D): a grant that ends
 *    without a release keeps the key from everyone until D after its end. For every fault that
 *    killed or paused a holder whose grant was alive at the fault (see `delayedFaults`), that
 *    end is no earlier than the fault, so no grant may be acquired in (fault.at, fault.at + D −
 *    `lockDelaySlackMs(D)`): each one that was is a grant inside the delay.
 *
 * Pure functions: unit-tested on synthetic histories, including the broken ones.
 */
import type { WriteRecord } from './register.js';

/** A client event as the harness stamped it (`at`: harness monotonic ms). */
export type ClientEvent =
  /** A client is about to ask for a grant; `at` as the client read the shared monotonic clock. */
  | { readonly at: number; readonly client: string; readonly type: 'acquiring' }
  | {
      readonly at: number;
      readonly client: string;
      readonly type: 'acquired';
      readonly token: bigint;
      readonly remainingMs: number;
      /** When the acquire returned, as the client read the shared monotonic clock. */
      readonly grantedAt?: number;
    }
  | {
      readonly at: number;
      readonly client: string;
      readonly type: 'validity';
      readonly remainingMs: number;
    }
  | {
      readonly at: number;
      readonly client: string;
      readonly type: 'written';
      readonly accepted: boolean;
      readonly knewLost: boolean;
    }
  | { readonly at: number; readonly client: string; readonly type: 'releasing' }
  | {
      readonly at: number;
      readonly client: string;
      readonly type: 'lost';
      readonly reason: string;
    };

/** A fault the harness injected: `at` when it started, `endedAt` when it was undone. */
export interface FaultMark {
  readonly at: number;
  readonly endedAt: number;
  /** The client the fault hit (holder killed, paused, cut off), if one. */
  readonly target?: string;
  /** True when the target was paused (SIGSTOP) until `endedAt`. */
  readonly paused?: boolean;
  /** True when the target was killed at `at`: a dead process believes nothing from then on. */
  readonly killed?: boolean;
}

/** One grant's intervals. */
interface Grant {
  readonly client: string;
  readonly token: bigint;
  readonly acquiredAt: number;
  /** When the client asked for this grant (its `acquiring` event; else `acquiredAt`). */
  readonly askedAt: number;
  /** When its acquire returned, by the client's reading (else `acquiredAt`). */
  readonly grantedAt: number;
  believedUntil: number;
  believedEnd: number;
  rawEnd: number;
  lostAt: number | undefined;
}

export interface RunVerdict {
  readonly grants: number;
  readonly writes: number;
  readonly staleAccepted: number;
  readonly staleRejected: number;
  /**
   * The most holders inside at once as the register saw them: distinct (token, writer) pairs
   * whose first and last accepted writes enclose one write. At most the permit count.
   */
  readonly maxInside: number;
  /**
   * The same over every write, accepted or not: the most holders writing at once. Above the
   * permit count only when a holder kept writing past its grant (a fault), so that the register
   * had to refuse someone.
   */
  readonly maxWriting: number;
  /**
   * Writes (as the writers reported them) made after the writer's grant had lapsed by its own
   * account (reported lost, or past the validity it last reported), accepted and rejected. A
   * semaphore's register accepts such a write while its token is among the N highest written,
   * and may refuse a valid holder instead: the rule keeps N holders inside, not the N valid ones.
   */
  readonly lapsedWritesAccepted: number;
  readonly lapsedWritesRejected: number;
  /** Accepted writes vs. the register's value; non-zero means the register lost updates. */
  readonly lostIncrements: number;
  /** Grants beyond the permit count believed at once (a lock: pairs of overlapping grants). */
  readonly believedOverlaps: number;
  readonly rawOverlaps: number;
  readonly tokenRegressions: number;
  readonly tokenDuplicates: number;
  /**
   * Fault → next grant to another client, ms (one per fault that saw a later grant); a
   * semaphore: → other clients hold all its permits at once.
   */
  readonly livenessMs: readonly number[];
  /** Loss-detection latencies, ms. */
  readonly lossDetectionMs: readonly number[];
  /** Writes made after the library had already reported the lease lost. */
  readonly writesAfterKnownLoss: number;
  /**
   * Faults judged for the lock-delay (0 without one): those that killed or paused a holder whose
   * grant was alive at the fault (see `delayedFaults`).
   */
  readonly delayFaults: number;
  /**
   * Grants acquired inside the lock-delay of a judged fault's victim, i.e. in (fault.at,
   * fault.at + D − `lockDelaySlackMs(D)`), cut at the victim's resume if it was paused; 0
   * without a lock-delay. Must be 0.
   */
  readonly grantsInsideDelay: number;
}

/**
 * The clock slack of the lock-delay check, ms: 25 ms plus 1% of the delay. It covers engines
 * that time the delay on their own clock (Redis's wall clock, an etcd lease, a ZooKeeper tick)
 * and round it to their unit, against the machine's monotonic clock the checker reads; a store
 * that shortens the delay by more is caught.
 */
export function lockDelaySlackMs(lockDelayMs: number): number {
  return 25 + Math.ceil(lockDelayMs / 100);
}

/**
 * Judge one run.
 * @param permits holders allowed at once: 1 for a lock, N for a semaphore of N permits.
 * @param lockDelayMs the lock-delay every client's grants carried, ms (0: none; a lock's or an
 *   election's only).
 */
export function checkRun(
  events: readonly ClientEvent[],
  writes: readonly WriteRecord[],
  registerValue: bigint,
  faults: readonly FaultMark[],
  permits = 1,
  lockDelayMs = 0,
): RunVerdict {
  const ordered = [...events].sort((a, b) => a.at - b.at);
  const grants = grantsOf(ordered);
  // Before a killed holder's grant is cut at its death below: whether it was alive at the fault.
  const delayWindows = lockDelayMs > 0 ? delayedFaults(grants, faults, lockDelayMs) : [];
  // A killed holder's grant ends at its death: without this, its belief would run to its
  // validity end, and an engine that frees the key at once (a PostgreSQL advisory lock goes
  // with the connection) would show a double grant that no live process ever saw.
  for (const fault of faults) {
    if (fault.killed !== true || fault.target === undefined) continue;
    for (const grant of grants) {
      if (grant.client !== fault.target || grant.acquiredAt > fault.at) continue;
      grant.believedEnd = Math.min(grant.believedEnd, fault.at);
      grant.rawEnd = Math.min(grant.rawEnd, fault.at);
    }
  }

  const { staleAccepted, staleRejected, accepted } = staleWrites(writes, permits);
  const { tokenRegressions, tokenDuplicates } =
    permits === 1 ? lockTokenOrder(grants) : permitTokenOrder(grants);

  const livenessMs: number[] = [];
  const lossDetectionMs: number[] = [];
  for (const fault of faults) {
    const next = othersInUse(grants, fault.target, fault.at, permits);
    if (next !== undefined) livenessMs.push(next.acquiredAt - fault.at);
    if (fault.target === undefined) continue;
    const hit = [...grants]
      .reverse()
      .find((g) => g.client === fault.target && g.acquiredAt <= fault.at);
    if (hit?.lostAt === undefined) continue;
    const other = othersInUse(grants, hit.client, hit.acquiredAt, permits);
    if (other === undefined) continue;
    const from =
      fault.paused === true ? Math.max(other.acquiredAt, fault.endedAt) : other.acquiredAt;
    lossDetectionMs.push(Math.max(0, hit.lostAt - from));
  }

  return {
    grants: grants.length,
    writes: writes.length,
    staleAccepted,
    staleRejected,
    maxInside: mostInside(writes.filter((w) => w.accepted)),
    maxWriting: mostInside(writes),
    ...lapsedWrites(ordered, grants),
    lostIncrements: Number(registerValue) - accepted,
    believedOverlaps: overlaps(grants, (g) => g.believedEnd, permits),
    rawOverlaps: overlaps(grants, (g) => g.rawEnd, permits),
    tokenRegressions,
    tokenDuplicates,
    livenessMs,
    lossDetectionMs,
    writesAfterKnownLoss: ordered.filter((e) => e.type === 'written' && e.knewLost).length,
    delayFaults: delayWindows.length,
    grantsInsideDelay: grants.filter((g) =>
      delayWindows.some((w) => g.acquiredAt > w.from && g.acquiredAt < w.until),
    ).length,
  };
}

/**
 * The lock-delay windows of a run: one per fault that killed (F1) or paused (F2) a holder whose
 * grant was alive at the fault, from the fault to D − slack later. Alive means the grant had
 * been acquired and, before the fault, had neither begun its release (a live release clears the
 * delay), nor been reported lost (the engine may have ended it earlier: a lost lease), nor
 * outlived the validity its client last computed (the engine may have let it expire earlier);
 * the library's validity never exceeds the engine's, so such a grant ended on the engine no
 * earlier than the fault, and its delay no earlier than D after it. Other faults (partitions,
 * engine restarts, clock jumps) are not judged: the grant may end or vanish on the engine in
 * ways a delay does not survive. A paused holder's window ends at its resume: its grant may
 * have outlived the pause (a PostgreSQL advisory lock keeps its connection), and its release
 * after the resume then clears the delay.
 */
function delayedFaults(
  grants: readonly Grant[],
  faults: readonly FaultMark[],
  lockDelayMs: number,
): { from: number; until: number }[] {
  const windows: { from: number; until: number }[] = [];
  for (const fault of faults) {
    if (fault.target === undefined || (fault.killed !== true && fault.paused !== true)) continue;
    const victim = grants.findLast((g) => g.client === fault.target && g.acquiredAt <= fault.at);
    if (victim === undefined || fault.at >= victim.believedEnd) continue;
    const until = fault.at + lockDelayMs - lockDelaySlackMs(lockDelayMs);
    windows.push({
      from: fault.at,
      until: fault.paused === true ? Math.min(until, fault.endedAt) : until,
    });
  }
  return windows;
}

/**
 * Replay the register's log: a write accepted while `permits` higher tokens had been accepted
 * before it is stale, and so is one under a token another writer already wrote with (two
 * holders were given one token, and the register cannot tell them apart).
 */
function staleWrites(
  writes: readonly WriteRecord[],
  permits: number,
): { staleAccepted: number; staleRejected: number; accepted: number } {
  let staleAccepted = 0;
  let staleRejected = 0;
  let accepted = 0;
  // Each fresh token accepted so far, with its writer.
  const writerOf = new Map<bigint, string>();
  for (const write of writes) {
    if (!write.accepted) {
      staleRejected += 1;
      continue;
    }
    accepted += 1;
    let higher = 0;
    for (const token of writerOf.keys()) if (token > write.token) higher += 1;
    const writer = writerOf.get(write.token);
    if (higher >= permits || (writer !== undefined && writer !== write.writer)) {
      staleAccepted += 1;
    } else {
      writerOf.set(write.token, write.writer);
    }
  }
  return { staleAccepted, staleRejected, accepted };
}

/**
 * The most holders inside at once in a run of register writes: each (token, writer) pair is
 * inside from its first write to its last, in the register's order; the most such spans that
 * enclose one write.
 */
function mostInside(writes: readonly WriteRecord[]): number {
  const spans = new Map<string, { first: number; last: number }>();
  writes.forEach((write, index) => {
    const holder = `${write.token}/${write.writer}`;
    const span = spans.get(holder);
    if (span === undefined) spans.set(holder, { first: index, last: index });
    else span.last = index;
  });
  // +1 where a span opens, -1 after it closes; the running sum peaks at the answer.
  const steps = new Map<number, number>();
  for (const { first, last } of spans.values()) {
    steps.set(first, (steps.get(first) ?? 0) + 1);
    steps.set(last + 1, (steps.get(last + 1) ?? 0) - 1);
  }
  let inside = 0;
  let most = 0;
  for (const index of [...steps.keys()].sort((a, b) => a - b)) {
    inside += steps.get(index)!;
    most = Math.max(most, inside);
  }
  return most;
}

/**
 * The first grant to a client other than `excluded`, received after `from`, with which `permits`
 * grants to such clients were believed at once. A lock: the next grant to another client. A
 * semaphore: the moment the others held every permit, so the one `excluded` held had come back.
 */
function othersInUse(
  grants: readonly Grant[],
  excluded: string | undefined,
  from: number,
  permits: number,
): Grant | undefined {
  const others = grants.filter((g) => g.client !== excluded);
  return others.find(
    (g) =>
      g.acquiredAt > from &&
      others.filter(
        (o) => o === g || (o.acquiredAt <= g.acquiredAt && g.acquiredAt < o.believedEnd),
      ).length >= permits,
  );
}

/** Writes a client reported after its grant was no longer believed, accepted and rejected. */
function lapsedWrites(
  ordered: readonly ClientEvent[],
  grants: readonly Grant[],
): { lapsedWritesAccepted: number; lapsedWritesRejected: number } {
  let lapsedWritesAccepted = 0;
  let lapsedWritesRejected = 0;
  for (const event of ordered) {
    if (event.type !== 'written') continue;
    const grant = grants.findLast((g) => g.client === event.client && g.acquiredAt <= event.at);
    if (grant === undefined || event.at < grant.believedEnd) continue;
    if (event.accepted) lapsedWritesAccepted += 1;
    else lapsedWritesRejected += 1;
  }
  return { lapsedWritesAccepted, lapsedWritesRejected };
}

/** A lock's tokens in the order the grants were received: each above every earlier one. */
function lockTokenOrder(grants: readonly Grant[]): {
  tokenRegressions: number;
  tokenDuplicates: number;
} {
  let tokenRegressions = 0;
  let tokenDuplicates = 0;
  let maxToken = -1n;
  for (const grant of grants) {
    if (grant.token < maxToken) tokenRegressions += 1;
    else if (grant.token === maxToken) tokenDuplicates += 1;
    else maxToken = grant.token;
  }
  return { tokenRegressions, tokenDuplicates };
}

/**
 * A semaphore's tokens: a duplicate is a token an earlier grant had; a regression is a grant
 * whose token is below that of a grant whose acquire had returned before this one was asked for
 * (both read by the clients on the machine's one monotonic clock, so no IPC delay reorders them).
 */
function permitTokenOrder(grants: readonly Grant[]): {
  tokenRegressions: number;
  tokenDuplicates: number;
} {
  const seen = new Set<bigint>();
  let tokenDuplicates = 0;
  for (const grant of grants) {
    if (seen.has(grant.token)) tokenDuplicates += 1;
    seen.add(grant.token);
  }
  let tokenRegressions = 0;
  for (const grant of grants) {
    const earlier = grants.filter((g) => g.grantedAt < grant.askedAt);
    if (earlier.some((g) => g.token > grant.token)) tokenRegressions += 1;
  }
  return { tokenRegressions, tokenDuplicates };
}

/** Rebuild each client's grants from its events. */
function grantsOf(ordered: readonly ClientEvent[]): Grant[] {
  const grants: Grant[] = [];
  const open = new Map<string, Grant>();
  const asked = new Map<string, number>();
  const end = Number.POSITIVE_INFINITY;
  for (const event of ordered) {
    const grant = open.get(event.client);
    switch (event.type) {
      case 'acquiring':
        asked.set(event.client, event.at);
        break;
      case 'acquired': {
        const g: Grant = {
          client: event.client,
          token: event.token,
          acquiredAt: event.at,
          askedAt: asked.get(event.client) ?? event.at,
          grantedAt: event.grantedAt ?? event.at,
          believedUntil: event.at + event.remainingMs,
          believedEnd: end,
          rawEnd: end,
          lostAt: undefined,
        };
        grants.push(g);
        open.set(event.client, g);
        asked.delete(event.client);
        break;
      }
      case 'validity':
        if (grant)
          grant.believedUntil = Math.max(grant.believedUntil, event.at + event.remainingMs);
        break;
      case 'lost':
        if (grant) {
          grant.lostAt ??= event.at;
          grant.believedEnd = Math.min(grant.believedEnd, event.at);
        }
        break;
      case 'releasing':
        if (grant) {
          grant.believedEnd = Math.min(grant.believedEnd, event.at);
          grant.rawEnd = Math.min(grant.rawEnd, event.at);
          open.delete(event.client);
        }
        break;
    }
  }
  for (const g of grants) {
    g.believedEnd = Math.min(g.believedEnd, g.believedUntil);
    if (!Number.isFinite(g.rawEnd)) g.rawEnd = g.believedEnd;
  }
  return grants;
}

/**
 * Grants beyond `permits` at once: for each grant b (non-empty [acquiredAt, end)), the grants to
 * other clients made before it and still running at its start, less `permits` − 1. For a lock,
 * the pairs of grants to different clients whose intervals intersect.
 */
function overlaps(grants: readonly Grant[], endOf: (g: Grant) => number, permits: number): number {
  const sorted = [...grants].sort((a, b) => a.acquiredAt - b.acquiredAt);
  let count = 0;
  for (let j = 0; j < sorted.length; j++) {
    const b = sorted[j]!;
    if (b.acquiredAt >= endOf(b)) continue;
    let running = 0;
    for (let i = 0; i < j; i++) {
      const a = sorted[i]!;
      if (a.client !== b.client && b.acquiredAt < endOf(a)) running += 1;
    }
    count += Math.max(0, running - (permits - 1));
  }
  return count;
}

/** p-th percentile (0..100) of `values` by nearest rank; undefined for none. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}
