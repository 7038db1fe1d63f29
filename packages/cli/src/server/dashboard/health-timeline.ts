/**
 * The dashboard's health charts: the sidecar's own lock metrics (the events its Prometheus
 * metrics count, through `LockActivity`) kept per store in `BUCKET_MS` buckets over the last
 * `WINDOW_MS`. A bucket holds counts and the same histogram buckets as `/metrics`
 * (`WAIT_BUCKETS_SECONDS`, `HOLD_BUCKETS_SECONDS`), so its memory is fixed whatever the traffic;
 * quantiles are read from them as Prometheus' `histogram_quantile` does (linear inside the bucket).
 */
import {
  HOLD_BUCKETS_SECONDS,
  LockActivity,
  type LockLabels,
  type LockMetricsSink,
  WAIT_BUCKETS_SECONDS,
} from 'fencelock/metrics';

/** Width of one bucket, ms. */
export const BUCKET_MS = 5_000;
/** How far back the charts reach, ms (15 minutes). */
export const WINDOW_MS = 15 * 60_000;
const BUCKETS = WINDOW_MS / BUCKET_MS;

/** One bucket of one store, as the dashboard draws it. Null where nothing was measured. */
export interface HealthPoint {
  /** Start of the bucket, ms since the epoch. */
  readonly at: number;
  readonly grantsPerSecond: number;
  readonly waitP50Ms: number | null;
  readonly waitP99Ms: number | null;
  readonly holdP99Ms: number | null;
  /** Renewals the engine refused or did not answer, in the bucket. */
  readonly renewFailures: number;
  /** Leases lost while their holder believed it held them, in the bucket. */
  readonly leasesLost: number;
}

/** The points of one store, oldest first, one per bucket of the window (empty ones included). */
export interface HealthSeries {
  readonly backend: string;
  readonly store: string;
  readonly points: readonly HealthPoint[];
}

interface Bucket {
  at: number;
  grants: number;
  renewFailures: number;
  leasesLost: number;
  readonly waits: number[];
  readonly holds: number[];
}

/**
 * Per-store buckets fed by `LockActivity`. `now` is the wall clock (the charts' axis), injected
 * for tests.
 */
export class HealthTimeline implements LockMetricsSink {
  readonly #stores = new Map<LockLabels, Bucket[]>();
  readonly #now: () => number;
  #stop: (() => void) | undefined;

  constructor(now: () => number = Date.now) {
    this.#now = now;
  }

  /** Start counting this process's lock events. @returns stop (idempotent). */
  start(): () => void {
    this.#stop ??= new LockActivity().subscribe(this);
    return () => {
      this.#stop?.();
      this.#stop = undefined;
    };
  }

  acquire(labels: LockLabels, outcome: string, waitSeconds: number): void {
    const bucket = this.#bucket(labels);
    if (outcome !== 'granted') return;
    bucket.grants++;
    count(bucket.waits, WAIT_BUCKETS_SECONDS, waitSeconds);
  }

  release(labels: LockLabels, outcome: string, holdSeconds: number | undefined): void {
    const bucket = this.#bucket(labels);
    if (outcome === 'released' && holdSeconds !== undefined) {
      count(bucket.holds, HOLD_BUCKETS_SECONDS, holdSeconds);
    }
  }

  renew(labels: LockLabels, ok: boolean): void {
    const bucket = this.#bucket(labels);
    if (!ok) bucket.renewFailures++;
  }

  lost(labels: LockLabels): void {
    this.#bucket(labels).leasesLost++;
  }

  /** Every store seen so far, each with one point per bucket of the last `WINDOW_MS`. */
  series(): HealthSeries[] {
    const current = bucketStart(this.#now());
    const first = current - (BUCKETS - 1) * BUCKET_MS;
    return [...this.#stores].map(([labels, ring]) => ({
      backend: labels.backend,
      store: labels.store,
      points: Array.from({ length: BUCKETS }, (_, i) => {
        const at = first + i * BUCKET_MS;
        const bucket = ring[slotOf(at)];
        return pointOf(at, bucket?.at === at ? bucket : undefined);
      }),
    }));
  }

  #bucket(labels: LockLabels): Bucket {
    let ring = this.#stores.get(labels);
    if (ring === undefined) {
      ring = [];
      this.#stores.set(labels, ring);
    }
    const at = bucketStart(this.#now());
    const slot = slotOf(at);
    let bucket = ring[slot];
    if (bucket === undefined) {
      bucket = emptyBucket(at);
      ring[slot] = bucket;
    } else if (bucket.at !== at) {
      Object.assign(bucket, { at, grants: 0, renewFailures: 0, leasesLost: 0 });
      bucket.waits.fill(0);
      bucket.holds.fill(0);
    }
    return bucket;
  }
}

function emptyBucket(at: number): Bucket {
  return {
    at,
    grants: 0,
    renewFailures: 0,
    leasesLost: 0,
    waits: new Array<number>(WAIT_BUCKETS_SECONDS.length + 1).fill(0),
    holds: new Array<number>(HOLD_BUCKETS_SECONDS.length + 1).fill(0),
  };
}

function bucketStart(ms: number): number {
  return Math.floor(ms / BUCKET_MS) * BUCKET_MS;
}

function slotOf(at: number): number {
  return (at / BUCKET_MS) % BUCKETS;
}

function pointOf(at: number, bucket: Bucket | undefined): HealthPoint {
  if (bucket === undefined) {
    const empty = { waitP50Ms: null, waitP99Ms: null, holdP99Ms: null };
    return { at, grantsPerSecond: 0, ...empty, renewFailures: 0, leasesLost: 0 };
  }
  return {
    at,
    grantsPerSecond: bucket.grants / (BUCKET_MS / 1000),
    waitP50Ms: quantileMs(bucket.waits, WAIT_BUCKETS_SECONDS, 0.5),
    waitP99Ms: quantileMs(bucket.waits, WAIT_BUCKETS_SECONDS, 0.99),
    holdP99Ms: quantileMs(bucket.holds, HOLD_BUCKETS_SECONDS, 0.99),
    renewFailures: bucket.renewFailures,
    leasesLost: bucket.leasesLost,
  };
}

/** Count `seconds` in the first bucket whose upper bound holds it; the last slot is +Inf. */
function count(counts: number[], bounds: readonly number[], seconds: number): void {
  let i = 0;
  while (i < bounds.length && seconds > bounds[i]!) i++;
  counts[i]!++;
}

/**
 * The `q` quantile of a histogram, ms, as Prometheus' `histogram_quantile`: the bucket where
 * the rank falls, linear between its bounds (from 0 for the first); the highest finite bound
 * when it falls in +Inf. Null for an empty histogram.
 */
export function quantileMs(
  counts: readonly number[],
  bounds: readonly number[],
  q: number,
): number | null {
  const total = counts.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let below = 0;
  for (let i = 0; i < counts.length; i++) {
    const inBucket = counts[i]!;
    if (below + inBucket >= rank && inBucket > 0) {
      if (i === bounds.length) return bounds[bounds.length - 1]! * 1000;
      const lower = i === 0 ? 0 : bounds[i - 1]!;
      const upper = bounds[i]!;
      return (lower + (upper - lower) * ((rank - below) / inBucket)) * 1000;
    }
    below += inBucket;
  }
  return bounds[bounds.length - 1]! * 1000;
}
