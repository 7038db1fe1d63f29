/**
 * The versions demo's figures: the result types, what each version must show for the demo to
 * count as reproduced, and the rendering for people (a block per version, a summary table and a
 * verdict) — `--json` prints the same result as one object instead.
 */
import { VERSION_PLANS, type VersionId } from './defaults.js';

/** One thing that happened, at `atMs` after the version started. */
export interface Step {
  readonly atMs: number;
  readonly text: string;
}

/** The counts of one version. */
export interface VersionCounts {
  /** Locks granted. */
  readonly grants: number;
  /** Acquire attempts refused because the key was held (unknown for fencelock's wait: 0). */
  readonly refusedAttempts: number;
  /** Time clients spent waiting to acquire, granted or not, ms. */
  readonly waitedMs: number;
  /** Grants made while another client still held the lock as far as it knew. */
  readonly overlaps: number;
  /** Releases that deleted another owner's lock. */
  readonly wrongDeletions: number;
  /** Writes the resource accepted. */
  readonly writesAccepted: number;
  /** Accepted writes whose writer's grant was no longer the newest (a later grant existed). */
  readonly staleAccepted: number;
  /** Writes the resource refused as stale (fencing token older than one it had accepted). */
  readonly staleRejected: number;
  /** Whether the lock stayed held by a dead process for the whole observation window. */
  readonly deadlock: boolean;
}

/** One version's run. */
export interface VersionResult extends VersionCounts {
  readonly version: VersionId;
  /** The lock design. */
  readonly design: string;
  /** The fault it met. */
  readonly fault: string;
  /** The failure it is expected to show. */
  readonly expected: string;
  /** What was done, in order. */
  readonly steps: readonly Step[];
  /** What broke (or, for v5, what held), in one sentence. */
  readonly broke: string;
  /** Client whose write the resource holds at the end (null: never written). */
  readonly finalWriter: string | null;
  /** Process ids of the version's clients (all exited by the time the result is returned). */
  readonly pids: readonly number[];
  /** Wall time of the version, ms. */
  readonly elapsedMs: number;
  /** Whether the expected failure (v1–v4) or protection (v5) was observed. */
  readonly reproduced: boolean;
}

/** The whole run. */
export interface VersionsResult {
  /** Redis URL the demo ran on. */
  readonly store: string;
  /** Lease length of v2–v5, ms. */
  readonly ttlMs: number;
  /** Prefix of every key the run made (all deleted at the end). */
  readonly namespace: string;
  readonly versions: readonly VersionResult[];
  /** Keys under `namespace` left after the clean-up (0 unless the clean-up failed). */
  readonly keysLeft: number;
  /** Wall time of the whole run, ms. */
  readonly elapsedMs: number;
  /** True when every version showed what it is expected to show. */
  readonly ok: boolean;
}

/** Whether a version's counts show its expected outcome (see `VERSION_PLANS[...].expected`). */
export function isReproduced(version: VersionId, c: VersionCounts): boolean {
  switch (version) {
    case 'v1':
      return c.deadlock;
    case 'v2':
      return c.wrongDeletions >= 1;
    case 'v3':
      return c.overlaps >= 1;
    case 'v4':
      return c.overlaps >= 1 && c.staleAccepted >= 1;
    case 'v5':
      return c.staleRejected >= 1 && c.staleAccepted === 0;
  }
}

/** One version as a text block: design, fault, the steps with their times, what broke. */
export function formatVersion(r: VersionResult): string {
  const width = Math.max(...r.steps.map((s) => `${s.atMs}`.length), 1) + 3;
  return [
    `${r.version}  ${r.design}`,
    `    fault: ${r.fault}`,
    ...r.steps.map((s) => `    ${`${s.atMs} ms`.padStart(width)}  ${s.text}`),
    `    ${r.version === 'v5' ? 'held' : 'broke'}: ${r.broke}`,
    '',
  ].join('\n');
}

/** The counts of every version as a text table, ending with a newline. */
export function formatTable(result: VersionsResult): string {
  const header = [
    'version',
    'design',
    'grants',
    'refused attempts',
    'overlaps',
    'wrong deletions',
    'stale writes accepted',
    'stale writes rejected',
    'deadlock',
  ];
  const rows = result.versions.map((r) => [
    r.version,
    VERSION_PLANS[r.version].short,
    String(r.grants),
    String(r.refusedAttempts),
    String(r.overlaps),
    String(r.wrongDeletions),
    String(r.staleAccepted),
    String(r.staleRejected),
    r.deadlock ? 'yes' : 'no',
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const numeric = (i: number) => i >= 2 && i <= 7;
  const cells = (row: readonly string[]) =>
    `│ ${row.map((v, i) => (numeric(i) ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join(' │ ')} │`;
  const line = (l: string, m: string, r: string) =>
    `${l}${widths.map((w) => '─'.repeat(w + 2)).join(m)}${r}`;
  return [
    line('┌', '┬', '┐'),
    cells(header),
    line('├', '┼', '┤'),
    ...rows.map(cells),
    line('└', '┴', '┘'),
    '',
  ].join('\n');
}

/** The one-line verdict printed under the table. */
export function verdict(result: VersionsResult): string {
  const byId = new Map(result.versions.map((r) => [r.version, r]));
  const v5 = byId.get('v5');
  if (v5 !== undefined && v5.staleAccepted > 0) {
    return `FAILED: v5 accepted ${v5.staleAccepted} stale write(s) despite the fencing token check.`;
  }
  const missed = result.versions.filter((r) => !r.reproduced);
  if (missed.length > 0) {
    return `NOT REPRODUCED: ${missed.map((r) => `${r.version} (expected ${r.expected})`).join('; ')}.`;
  }
  const naiveStale = result.versions
    .filter((r) => r.version !== 'v5')
    .reduce((n, r) => n + r.staleAccepted, 0);
  return (
    `Only v5 made progress with 0 stale writes accepted (${v5?.staleRejected ?? 0} rejected by ` +
    `fencing token); v1 deadlocked, and v2–v4 let ${naiveStale} stale write${naiveStale === 1 ? '' : 's'} through.`
  );
}
