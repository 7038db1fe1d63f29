/**
 * A held key (`ListedLock`) as JSON, the one shape of `fencelock ls --json` and the sidecar's
 * `GET /v1/locks`: fencing tokens as decimal strings, since they are `bigint`s that can pass
 * 2^53 (JSON numbers would round them).
 */
import type { ListedLock } from 'fencelock';

export interface ListedLockJson {
  readonly key: string;
  readonly mode: ListedLock['mode'];
  /** With `mode: 'permits'`: the semaphore's permit count. */
  readonly permits?: number;
  readonly holders: readonly {
    readonly owner: string;
    readonly fencingToken: string;
    /** Remaining engine TTL, ms. */
    readonly ttlMs: number;
  }[];
  readonly waiters: number;
}

export function listedLockJson(entry: ListedLock): ListedLockJson {
  return {
    key: entry.key,
    mode: entry.mode,
    ...(entry.permits === undefined ? {} : { permits: entry.permits }),
    holders: entry.holders.map((h) => ({
      owner: h.owner,
      fencingToken: h.fencingToken.toString(),
      ttlMs: h.ttlMs,
    })),
    waiters: entry.waiters,
  };
}
