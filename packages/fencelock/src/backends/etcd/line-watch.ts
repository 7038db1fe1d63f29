/**
 * A waiter's wait on an etcd watch: one watcher, on one key (a lock's or a later permit waiter's
 * predecessor) or on a folder (a semaphore's first waiter, whose holders are not adjacent key
 * names), started just after the revision at which the waiter read its line, so that no event
 * between that read and the watch's creation is missed (etcd's `waitDeletes` in `key.go` starts
 * its watches the same way). It ends on the first event the waiter's test answers, a watch error,
 * `maxMs`, or the signal, and cancels the watcher.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { startWait } from '../../core/wait.js';

/** What to watch: one key, or every key under a prefix. */
export type WatchTarget = { readonly key: string } | { readonly prefix: string };

/**
 * What an event (`put` or `delete` of `key`) means to the waiter: undefined to go on waiting,
 * anything else ends the wait with that answer.
 */
export type WatchTest<T> = (event: 'put' | 'delete', key: string) => T | undefined;

/**
 * Resolve with the first answer `test` gives to an event of the watch on `target` (from
 * `afterRevision + 1`), or with undefined when the watch fails (the caller then asks again),
 * after `maxMs` (ms), or promptly when `signal` aborts. Never rejects; no watcher, timer or
 * listener is left once it resolved.
 */
export async function waitForWatchEvent<T>(
  client: Etcd3,
  target: WatchTarget,
  afterRevision: bigint,
  test: WatchTest<T>,
  signal: AbortSignal,
  maxMs: number,
): Promise<T | undefined> {
  if (signal.aborted) return undefined;
  // Bounded from the start: the watch's creation counts against maxMs and the signal too.
  const { ended, wake } = startWait(signal, maxMs);
  const builder = client.watch();
  const creating = ('key' in target ? builder.key(target.key) : builder.prefix(target.prefix))
    .startRevision(String(afterRevision + 1n))
    .create();
  // A watch etcd refuses at its creation rejects `create()`: the wait ends (the contract's
  // `waitForChange` never rejects) and the waiter asks again, reading its line anew.
  const watcher = await Promise.race([
    creating.catch(() => undefined),
    ended.then(() => undefined),
  ]);
  if (watcher === undefined) {
    wake();
    // Gave up before the watch existed: cancel it whenever it arrives.
    creating.then((w) => w.cancel()).catch(() => undefined);
    return undefined;
  }
  let answer: T | undefined;
  const on = (event: 'put' | 'delete') => (kv: IKeyValue) => {
    if (answer !== undefined) return;
    answer = test(event, kv.key.toString());
    if (answer !== undefined) wake();
  };
  watcher.on('put', on('put'));
  watcher.on('delete', on('delete'));
  // A watch etcd cancels (its start revision compacted away, see watch-compacted.test.ts): the
  // caller asks again.
  watcher.on('error', wake);
  await ended;
  // Never let a cancel on a stalled connection hold the caller.
  void watcher.cancel().catch(() => undefined);
  return answer;
}
