/**
 * Renewals asked for in one turn of the event loop, sent to the engine together: the watchdog
 * renews the leases that fall due together in one turn (on backends that set
 * `capabilities.batchRenew`, it lets a renewal run a little early to join others), so a
 * process holding many leases makes one round trip per batch instead of one per lease.
 * Engine-neutral: each backend supplies how a batch is sent (one SQL statement, one Lua script).
 */
import type { LeaseRef, RenewResult } from './backend.js';

/** One renewal of a batch. */
export interface RenewalRequest {
  readonly lease: LeaseRef;
  /** The TTL to extend the lease to, ms. */
  readonly ttlMs: number;
}

/**
 * Sends a batch; answers one result per request, in order: an `Error` rejects that renewal
 * alone (e.g. Redlock's `QuorumError` for one key).
 * @throws when the whole batch failed (every renewal of it rejects with that error).
 */
export type SendRenewals = (
  batch: readonly RenewalRequest[],
) => Promise<readonly (RenewResult | Error)[]>;

interface Pending extends RenewalRequest {
  resolve(result: RenewResult): void;
  reject(error: unknown): void;
}

/** Collects renewals until the end of the current turn (`setImmediate`), then sends them. */
export class RenewalBatcher {
  readonly #send: SendRenewals;
  readonly #maxBatch: number;
  #pending: Pending[] = [];

  /** @param maxBatch most renewals per batch; more go in further batches, one after another. */
  constructor(send: SendRenewals, maxBatch: number) {
    this.#send = send;
    this.#maxBatch = maxBatch;
  }

  /** Queue a renewal; settles with its own result once its batch has been answered. */
  renew(lease: LeaseRef, ttlMs: number): Promise<RenewResult> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ lease, ttlMs, resolve, reject });
      if (this.#pending.length === 1) setImmediate(() => this.#flush());
    });
  }

  #flush(): void {
    const pending = this.#pending;
    this.#pending = [];
    const live: Pending[] = [];
    for (const renewal of pending) {
      // Ended since it was asked for (released, lost, validity over): nothing to send.
      if (renewal.lease.isHeld === false) renewal.reject(new Error(NOT_SENT));
      else live.push(renewal);
    }
    const batches = batchesOf(live, this.#maxBatch);
    // One batch after another: the renewals of one lease asked for twice in a turn (an
    // `extend()` beside the watchdog's) go in separate batches, applied in the order asked.
    void (async () => {
      for (const batch of batches) await this.#sendBatch(batch);
    })();
  }

  async #sendBatch(batch: readonly Pending[]): Promise<void> {
    try {
      const results = await this.#send(batch);
      batch.forEach((renewal, i) => {
        const result = results[i];
        if (result === undefined) renewal.reject(new Error('no answer for this renewal'));
        else if (result instanceof Error) renewal.reject(result);
        else renewal.resolve(result);
      });
    } catch (error) {
      for (const renewal of batch) renewal.reject(error);
    }
  }
}

/** Why a renewal was dropped unsent. */
const NOT_SENT = 'renewal not sent: the lease was no longer held when its batch went out';

/**
 * Split `renewals` into batches of at most `maxBatch`, each naming a lease at most once (a lease
 * asked for again goes to a later batch than its earlier request).
 */
function batchesOf(renewals: readonly Pending[], maxBatch: number): Pending[][] {
  const batches: Pending[][] = [];
  const lastBatchOf = new Map<string, number>();
  for (const renewal of renewals) {
    const id = `${renewal.lease.key}\0${renewal.lease.owner}`;
    let index = Math.max(0, (lastBatchOf.get(id) ?? -1) + 1);
    while (index < batches.length && batches[index]!.length >= maxBatch) index += 1;
    if (index === batches.length) batches.push([]);
    batches[index]!.push(renewal);
    lastBatchOf.set(id, index);
  }
  return batches;
}
