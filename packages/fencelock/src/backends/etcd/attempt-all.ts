/**
 * Single attempts at several locks in one etcd transaction (`EtcdBackend.attemptAll`), every key
 * granted or none, by the rule of a single attempt (`queueVerdict`): a new contender key is the
 * newest of its line, so a writer is granted when its line has no contender, a reader when it has
 * no writer.
 *
 * - The transaction puts every contender key when each line passes its guard, and otherwise reads
 *   every line (writing nothing). The first guard needs no read: no key at all under a writer's
 *   folder, no key named as a writer's (`<dir>w-`) under a reader's (`freeLineGuard`). It is
 *   stricter than the rule only where keys this backend did not write lie in the folder, or for
 *   a downgrade (the caller's own write lock is in line).
 * - When it fails, the reads decide (`lineVerdicts`): every key would be granted (those keys
 *   ignored) and the transaction is sent again guarded by "no key under any folder written since
 *   that read" (`unwrittenSince`); or a key is taken, and the answer is "not granted", nothing
 *   written.
 * - The contender keys' create revision, the fencing token, is the revision of the transaction
 *   that put them. The etcd3 client may send a transaction again after a lost reply: the puts
 *   return the keys' previous versions, so a key put twice keeps its first create revision as its
 *   token, and a repeated transaction whose guard then fails finds every key in line.
 */
import type { ICompare, IKeyValue, IRequestOp, ITxnRequest } from 'etcd3';
import type { LockMode } from '../../core/backend.js';
import { type QueueVerdict, queueVerdict } from '../../core/predecessor.js';
import { type ContenderEntry, contendersOf, modePrefix } from './contender-key.js';
import { noKeyUnder, unwrittenSince } from './key-range.js';

/** One lock's single attempt: its contender key, not yet known to be in line. */
export interface LineAttempt {
  /** The lock's folder. */
  readonly dir: string;
  /** The contender's key and the value and lease it is put with. */
  readonly key: string;
  readonly value: string;
  readonly leaseId: string;
  readonly owner: string;
  readonly mode: LockMode;
  /** As `AttemptRequest.heldWriter` (a downgrade). */
  readonly heldWriter?: string | undefined;
  /**
   * The lock's lock-delay marker key (lock-delay.ts), under `<dir>w-`: the guards cover it, and
   * the line's read (with values) finds it.
   */
  readonly marker: string;
}

/**
 * The guard under which `attempt`'s key is granted without a read: no key under the folder of a
 * writer; no key named as a writer's under the folder of a reader.
 */
export function freeLineGuard(attempt: LineAttempt): ICompare {
  return noKeyUnder(attempt.mode === 'write' ? attempt.dir : modePrefix(attempt.dir, 'write'));
}

/** The guards that hold while no line changed since a read at `revision` (but for deletions). */
export function unchangedGuards(attempts: readonly LineAttempt[], revision: bigint): ICompare[] {
  return attempts.map((attempt) => unwrittenSince(attempt.dir, revision));
}

/**
 * The transaction: with `guards`, put every contender key when all hold, else read every line
 * (`list(i)`, the read of the i-th line); without, read only. Responses: the i-th put, or the
 * i-th line.
 */
export function attemptAllTxn(
  attempts: readonly LineAttempt[],
  guards: readonly ICompare[] | undefined,
  list: (attempt: LineAttempt) => IRequestOp,
): ITxnRequest {
  const lists = attempts.map(list);
  if (guards === undefined) return { success: lists };
  return {
    compare: [...guards],
    success: attempts.map((attempt) => ({
      request_put: {
        key: Buffer.from(attempt.key),
        value: Buffer.from(attempt.value),
        lease: attempt.leaseId,
        prev_kv: true,
      },
    })),
    failure: lists,
  };
}

/** What the lines read together say to single attempts at all of them. */
export type LinesVerdict =
  /** Every contender key is in its line already, and granted: its fencing token. */
  | { readonly outcome: 'granted'; readonly tokens: readonly bigint[] }
  /** No contender key is in line; each would be granted if put now. */
  | { readonly outcome: 'free' }
  /**
   * A key is taken (or a downgrade is blocked): each line's verdict on its contender. `inLine`
   * says whether the contender keys are there (to withdraw).
   */
  | {
      readonly outcome: 'refused';
      readonly verdicts: readonly QueueVerdict<ContenderEntry>[];
      readonly inLine: boolean;
    }
  /** Some contender keys are in line, others gone (a lease ended between two attempts). */
  | { readonly outcome: 'vanished' };

/**
 * The verdict of the lines `kvs[i]` (the i-th line read at `revision`, oldest first) on each
 * attempt: its key's place in line when there, else a place after `revision`.
 */
export function lineVerdicts(
  attempts: readonly LineAttempt[],
  kvs: readonly (readonly IKeyValue[])[],
  revision: bigint,
): LinesVerdict {
  const mine = attempts.map((attempt, i) =>
    contendersOf(kvs[i] ?? [], attempt.dir).find((entry) => entry.key === attempt.key),
  );
  const inLine = mine.filter((entry) => entry !== undefined).length;
  if (inLine > 0 && inLine < attempts.length) return { outcome: 'vanished' };
  const verdicts = attempts.map((attempt, i) =>
    queueVerdict(
      contendersOf(kvs[i] ?? [], attempt.dir),
      { owner: attempt.owner, mode: attempt.mode, order: mine[i]?.order ?? revision + 1n },
      attempt.heldWriter,
    ),
  );
  if (verdicts.some((verdict) => verdict.outcome !== 'granted')) {
    return { outcome: 'refused', verdicts, inLine: inLine > 0 };
  }
  return inLine > 0
    ? { outcome: 'granted', tokens: mine.map((entry) => entry!.order) }
    : { outcome: 'free' };
}
