/**
 * The checker of a torture run: three oracles over what the clients reported
 * (stamped by the harness on receipt, one monotonic clock) and what the fenced register logged.
 *
 * 1. The fenced register: stale writes accepted (an accepted write whose token is lower than a
 *    token accepted before it, or equal to one another client wrote with, recomputed offline
 *    from the log, so a mistake in the register's SQL cannot hide one) must be 0; stale writes rejected say whether the fault bit at all.
 * 2. Overlapping critical sections as the library believed them: each grant is believed from
 *    its `acquired` event until the first of the start of its release, its loss, or the end of
 *    the validity the client last reported; overlaps of grants to different clients are double
 *    grants. Raw overlaps (acquired → start of release: "the code ran") are counted too: pauses
 *    make them expected.
 * 3. Token monotonicity: over grants in the order the harness received them, no token may be
 *    lower than (regression) or equal to (duplicate) an earlier one.
 * Plus liveness (time from a fault to the next grant to another client, in TTLs) and
 * loss-detection latency (from the moment the engine had demonstrably dropped the lease, i.e.
 * another client was granted, or from the holder's resume if it was paused then, to the
 * holder's `lost` event).
 *
 * Pure functions: unit-tested on synthetic histories, including the broken ones.
 */
import type { WriteRecord } from './register.js';

/** A client event as the harness stamped it (`at`: harness monotonic ms). */
export type ClientEvent =
  | {
      readonly at: number;
      readonly client: string;
      readonly type: 'acquired';
      readonly token: bigint;
      readonly remainingMs: number;
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
  /** Accepted writes vs. the register's value; non-zero means the register lost updates. */
  readonly lostIncrements: number;
  readonly believedOverlaps: number;
  readonly rawOverlaps: number;
  readonly tokenRegressions: number;
  readonly tokenDuplicates: number;
  /** Fault → next grant to another client, ms (one per fault that saw a later grant). */
  readonly livenessMs: readonly number[];
  /** Loss-detection latencies, ms. */
  readonly lossDetectionMs: readonly number[];
  /** Writes made after the library had already reported the lease lost. */
  readonly writesAfterKnownLoss: number;
}

/** Judge one run. `fenced` says whether the register checked tokens (false: self-test). */
export function checkRun(
  events: readonly ClientEvent[],
  writes: readonly WriteRecord[],
  registerValue: bigint,
  faults: readonly FaultMark[],
): RunVerdict {
  const ordered = [...events].sort((a, b) => a.at - b.at);
  const grants = grantsOf(ordered);
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

  let staleAccepted = 0;
  let staleRejected = 0;
  let maxAccepted = -1n;
  let maxWriter: string | undefined;
  let accepted = 0;
  for (const write of writes) {
    if (write.accepted) {
      accepted += 1;
      // A lower token than one accepted before is stale; so is the same token from another
      // writer: two holders were given one token (it repeated), and the register cannot tell
      // them apart.
      if (write.token < maxAccepted) staleAccepted += 1;
      else if (write.token === maxAccepted && write.writer !== maxWriter) staleAccepted += 1;
      else {
        maxAccepted = write.token;
        maxWriter = write.writer;
      }
    } else {
      staleRejected += 1;
    }
  }

  let tokenRegressions = 0;
  let tokenDuplicates = 0;
  let maxToken = -1n;
  for (const grant of grants) {
    if (grant.token < maxToken) tokenRegressions += 1;
    else if (grant.token === maxToken) tokenDuplicates += 1;
    else maxToken = grant.token;
  }

  const livenessMs: number[] = [];
  const lossDetectionMs: number[] = [];
  for (const fault of faults) {
    const next = grants.find((g) => g.acquiredAt > fault.at && g.client !== fault.target);
    if (next !== undefined) livenessMs.push(next.acquiredAt - fault.at);
    if (fault.target === undefined) continue;
    const hit = [...grants]
      .reverse()
      .find((g) => g.client === fault.target && g.acquiredAt <= fault.at);
    if (hit?.lostAt === undefined) continue;
    const other = grants.find((g) => g.client !== hit.client && g.acquiredAt > hit.acquiredAt);
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
    lostIncrements: Number(registerValue) - accepted,
    believedOverlaps: overlaps(grants, (g) => g.believedEnd),
    rawOverlaps: overlaps(grants, (g) => g.rawEnd),
    tokenRegressions,
    tokenDuplicates,
    livenessMs,
    lossDetectionMs,
    writesAfterKnownLoss: ordered.filter((e) => e.type === 'written' && e.knewLost).length,
  };
}

/** Rebuild each client's grants from its events. */
function grantsOf(ordered: readonly ClientEvent[]): Grant[] {
  const grants: Grant[] = [];
  const open = new Map<string, Grant>();
  const end = Number.POSITIVE_INFINITY;
  for (const event of ordered) {
    const grant = open.get(event.client);
    switch (event.type) {
      case 'acquired': {
        const g: Grant = {
          client: event.client,
          token: event.token,
          acquiredAt: event.at,
          believedUntil: event.at + event.remainingMs,
          believedEnd: end,
          rawEnd: end,
          lostAt: undefined,
        };
        grants.push(g);
        open.set(event.client, g);
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

/** Pairs of grants to different clients whose [acquiredAt, end) intervals intersect. */
function overlaps(grants: readonly Grant[], endOf: (g: Grant) => number): number {
  const sorted = [...grants].sort((a, b) => a.acquiredAt - b.acquiredAt);
  let count = 0;
  for (let i = 0; i < sorted.length; i++) {
    const a = sorted[i]!;
    for (let j = i + 1; j < sorted.length; j++) {
      const b = sorted[j]!;
      if (b.acquiredAt >= endOf(a)) break;
      if (b.client !== a.client && b.acquiredAt < endOf(b)) count += 1;
    }
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
