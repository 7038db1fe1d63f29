/**
 * The etcd transactions of a semaphore's line (see `EtcdBackend` and permit-line.ts): joining the
 * line without ever joining one of another permit count, and announcing grants by touching keys.
 * Both compare etcd key ranges (`Compare.range_end`, etcd 3.3 and later): a range compare holds
 * when it holds for every key in the range.
 */
import type { ICompare, IKeyValue, IRequestOp, ITxnRequest, ITxnResponse } from 'etcd3';
import { BackendError, PermitsMismatchError } from '../../errors.js';
import { type PermitContender, permitContendersOf, permitCountValue } from './permit-key.js';

/** Sends one transaction to etcd; rejects with a `BackendError` when the engine cannot answer. */
export type SendTxn = (request: ITxnRequest) => Promise<ITxnResponse>;

/**
 * Most conditional puts one attempt makes to join its line. Each one fails only because another
 * key was created under the folder meanwhile (someone else got in), so this bounds only a line
 * that changes faster than one request.
 */
export const PERMIT_JOIN_TRIES = 32;

/** Most keys one touch transaction writes: etcd's default `--max-txn-ops` (128). */
const TOUCH_BATCH_LIMIT = 128;

/** A contender about to join (or already in) a semaphore's line. */
export interface PermitJoin {
  /** The semaphore's key (for errors). */
  readonly semaphore: string;
  /** The semaphore's folder, `[key, rangeEnd)`. */
  readonly folder: { readonly key: Buffer; readonly rangeEnd: Buffer };
  /** The read of the folder with values, oldest first. */
  readonly list: IRequestOp;
  /** The contender's key. */
  readonly key: string;
  /** Its permit count. */
  readonly permits: number;
  /** The lease its key is put under (decimal id). */
  readonly leaseId: string;
  /** Whether the contender waits (`acquire`) or makes one attempt (`tryAcquire`). */
  readonly waits: boolean;
}

/** The line a contender is in: its entries, the contender's own, the revision read at. */
export interface JoinedLine {
  readonly entries: PermitContender[];
  readonly mine: PermitContender;
  readonly revision: bigint;
}

/**
 * Put the contender's key into the line unless it is there already, and never into a line of
 * another permit count. The put is conditional (`create revision == 0` of the key, and a guard on
 * the folder): first on every key under the folder holding the same count (one request when
 * others hold or wait; it fails on an empty folder, as etcd fails a Value compare on no key), then,
 * after the failed try's read found no contender of another count, on the same again when the
 * folder held contenders only, or else on no key under the folder created since that read. A
 * single attempt reads first and puts only when fewer than `permits` contenders are in line, under
 * the second guard, so it is granted at once or writes nothing.
 * @returns the line read with the put (or the read that found the key there); undefined for a
 *   single attempt that found every permit held.
 * @throws PermitsMismatchError when contenders in line use another count (nothing written).
 * @throws BackendError when the engine cannot answer, or the line changed on every try.
 */
export async function joinPermitLine(
  send: SendTxn,
  join: PermitJoin,
): Promise<JoinedLine | undefined> {
  const { folder, list, permits, waits } = join;
  const name = Buffer.from(join.key);
  const value = Buffer.from(permitCountValue(permits));
  const put: IRequestOp = { request_put: { key: name, value, lease: join.leaseId } };
  const absent: ICompare = { key: name, target: 'Create', result: 'Equal', create_revision: '0' };
  const range = { key: folder.key, range_end: folder.rangeEnd };
  const sameCount: ICompare = { ...range, target: 'Value', result: 'Equal', value };
  let guard: ICompare | undefined = waits ? sameCount : undefined;
  for (let tries = 0; tries < PERMIT_JOIN_TRIES; tries++) {
    const txn = await send(
      guard === undefined
        ? { success: [list] }
        : { compare: [absent, guard], success: [put, list], failure: [list] },
    );
    const kvs = rangeAt(txn, guard !== undefined && txn.succeeded ? 1 : 0);
    const entries = permitContendersOf(kvs, folder.key.toString());
    const revision = BigInt(txn.header.revision);
    const mine = entries.find((entry) => entry.key === join.key);
    if (mine !== undefined) return { entries, mine, revision };
    const other = entries.find((entry) => entry.permits !== permits);
    if (other !== undefined) throw new PermitsMismatchError(join.semaphore, permits, other.permits);
    if (!waits && entries.length >= permits) return undefined;
    guard =
      waits && entries.length > 0 && entries.length === kvs.length
        ? sameCount
        : { ...range, target: 'Create', result: 'Less', create_revision: String(revision + 1n) };
  }
  throw new BackendError(
    'etcd',
    'acquire',
    new Error(
      `the line of semaphore "${join.semaphore}" changed on each of ${PERMIT_JOIN_TRIES} tries`,
    ),
  );
}

/**
 * Announce grants: write each of `holders` (permit holders' keys, with their create revisions)
 * again, keeping value and lease (so its create revision, the fencing token, stays), if it still
 * has that create revision. The event wakes the later waiter watching that key. One transaction
 * per 128 keys; when one of them is gone (its deletion woke its successor already), the others are
 * written one by one. Best effort, never rejects: a touch the engine does not answer leaves that
 * waiter to its recheck.
 */
export async function announceGrants(
  send: SendTxn,
  holders: readonly { readonly key: string; readonly order: bigint }[],
): Promise<void> {
  for (let start = 0; start < holders.length; start += TOUCH_BATCH_LIMIT) {
    const chunk = holders.slice(start, start + TOUCH_BATCH_LIMIT);
    const names = chunk.map((holder) => Buffer.from(holder.key));
    const txn = await send({
      compare: chunk.map((holder, i) => ({
        key: names[i]!,
        target: 'Create',
        result: 'Equal',
        create_revision: String(holder.order),
      })),
      success: names.map((key) => ({
        request_put: { key, ignore_value: true, ignore_lease: true },
      })),
    }).catch(() => undefined);
    if (txn?.succeeded === false && chunk.length > 1) {
      await Promise.all(chunk.map((holder) => announceGrants(send, [holder])));
    }
  }
}

function rangeAt(txn: ITxnResponse, index: number): IKeyValue[] {
  return txn.responses[index]?.response_range?.kvs ?? [];
}
