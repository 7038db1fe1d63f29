/**
 * Scenario T02: renewing after the key vanished must fail, not resurrect the lock (Redis).
 * Step 3 freezes this process's event loop while a separate Node process takes the key.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import diagnostics_channel from 'node:diagnostics_channel';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  CHANNELS,
  LockLostError,
  type LostEvent,
  type RenewEvent,
} from '../../../packages/fencelock/src/index.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';
import { monitorRedis, redisHarness, sleep, uniqueKey } from './stores.js';

/** The library's `index.js`, compiled from its sources (a private build shared by the run). */
let buildIndex: string;

let store: ReturnType<typeof redisHarness>;

beforeEach(() => {
  store = redisHarness();
});

afterEach(async () => {
  await store.close();
});

describe('T02 renew after the key vanished (redis)', () => {
  it('step 1: extend after a direct delete rejects with LockLostError and does not re-create k', async () => {
    const k = uniqueKey('t02-1');
    const { lock: lockKey } = store.keysOf(k);
    const a = store.locker().lock(k, { ttlMs: 1000, autoRenew: false });
    const lease = await a.acquire();
    expect(await store.raw.exists(lockKey)).toBe(1);

    await store.raw.del(lockKey);

    const error = await lease.extend(1000).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).code).toBe('ERR_LOCK_LOST');
    expect((error as LockLostError).reason).toBe('not-held');
    expect((error as LockLostError).message).toContain(`"${k}"`);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toBe(error);

    expect(await store.raw.exists(lockKey)).toBe(0);
    expect(a.isHeld).toBe(false);
    expect(lease.isHeld).toBe(false);
  });

  it('step 2: extend after an interloper took k rejects and leaves the interloper untouched', async () => {
    const k = uniqueKey('t02-2');
    const a = store.locker().lock(k, { ttlMs: 1000, autoRenew: false });
    const leaseA = await a.acquire();

    await store.deleteLease(k);
    const leaseB = await store.locker().acquire(k, { ttlMs: 10_000 });
    expect(leaseB.fencingToken).toBeGreaterThan(leaseA.fencingToken);

    const error = await leaseA.extend(1000).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(LockLostError);
    expect((error as LockLostError).code).toBe('ERR_LOCK_LOST');
    expect((error as LockLostError).reason).toBe('not-owner');
    expect(a.isHeld).toBe(false);

    const raw = await store.rawLease(k);
    expect(raw?.owner).toBe(leaseB.owner);
    expect(raw?.token).toBe(leaseB.fencingToken);
    expect(raw!.ttlMs).toBeGreaterThan(8000);
    expect(leaseB.isHeld).toBe(true);
  });
});

describe('T02 step 3: watchdog vs a frozen event loop (redis)', () => {
  beforeAll(async () => {
    buildIndex = join((await privateBuild('t02')).dir, 'index.js');
  }, 180_000);

  it.each([
    { variant: 'right after the grant (no renewal in flight)', renewalInFlight: false },
    { variant: 'with the first renewal in flight', renewalInFlight: true },
  ])(
    'freeze $variant: aborts once, does not re-create k, stops renewing',
    async ({ renewalInFlight }) => {
      const k = uniqueKey('t02-3');
      const { lock: lockKey } = store.keysOf(k);
      const locker = store.locker();

      // Engine view: every command naming k's lock key, with the server's time.
      const monitor = await monitorRedis(lockKey);
      const { commands } = monitor;

      const renewals: { at: number; event: RenewEvent }[] = [];
      const losses: { at: number; wallMs: number; event: LostEvent }[] = [];
      const onRenew = (message: unknown) =>
        renewals.push({ at: performance.now(), event: message as RenewEvent });
      const onLost = (message: unknown) =>
        losses.push({ at: performance.now(), wallMs: Date.now(), event: message as LostEvent });
      diagnostics_channel.subscribe(CHANNELS.renew, onRenew);
      diagnostics_channel.subscribe(CHANNELS.lost, onLost);

      const child = startProcessB(k);
      try {
        // B is connected and waiting for the go signal before A takes the key.
        await child.ready;

        const lease = await locker.acquire(k, { ttlMs: 300 });
        const grantedAt = performance.now();
        let aborts = 0;
        lease.signal.addEventListener('abort', () => {
          aborts += 1;
        });

        // B sleeps ~400 ms after `go`, then takes k (expired by then: A cannot renew) and
        // releases it, all while this event loop is frozen.
        const busyUntil = (t: number) => {
          while (performance.now() < t) {
            // synchronous busy loop: no timer, no I/O callback runs
          }
        };
        child.go();
        const freezeStart = Date.now();
        if (renewalInFlight) {
          // The watchdog's first renewal is due at grant + 100 ms. Block past it with a timer of
          // ours due just after it: both run in the same timers phase, the watchdog's first (it
          // asks for the renewal, which Redis's renewal batching sends at the end of the turn,
          // in the check phase), then ours, which freezes once that has gone out (setImmediate,
          // queued after the batch's), before the reply can be read.
          const frozen = new Promise<void>((resolve) =>
            setTimeout(() => setImmediate(() => resolve(busyUntil(performance.now() + 900))), 101),
          );
          busyUntil(grantedAt + 120);
          await frozen;
        } else {
          // Right after the grant: the first renewal (grant + 100 ms) has not been sent.
          busyUntil(performance.now() + 900);
        }
        const freezeEnd = Date.now();
        await sleep(1000);

        const b = await child.result;
        expect(b.outcome).toBe('released');
        expect(BigInt(b.token)).toBeGreaterThan(lease.fencingToken);
        // B really acted during the freeze.
        expect(b.grantedAt).toBeGreaterThanOrEqual(freezeStart);
        expect(b.releasedAt).toBeLessThanOrEqual(freezeEnd);

        // A's signal aborted exactly once, with LockLostError; one lost event for A.
        expect(aborts).toBe(1);
        expect(lease.signal.reason).toBeInstanceOf(LockLostError);
        expect((lease.signal.reason as LockLostError).code).toBe('ERR_LOCK_LOST');
        const lostA = losses.filter((l) => l.event.owner === lease.owner);
        expect(lostA).toHaveLength(1);
        const lost = lostA[0]!;

        // A did not re-create k: the key is gone and B's grant is the last one.
        expect(await store.raw.exists(lockKey)).toBe(0);
        const info = await locker.inspect(k);
        expect(info.holder).toBeNull();
        expect(info.lastFencingToken).toBe(BigInt(b.token));

        // The watchdog stopped. Renew script calls carry 2 keys (k's lock key and its lock-delay
        // key) and A's owner id.
        const renewCommands = commands.filter(
          (c) => c.args[2] === '2' && c.args[3] === lockKey && c.args[5] === lease.owner,
        );
        // The monitor works: it saw A's grant (7 keys: lock, fence counter, line, waiters,
        // readers, readers' tokens, lock-delay; then A's owner id) and B's grant. (Release and
        // abandon take 8 keys, the fence counter second too.)
        const grantsA = commands.filter(
          (c) => c.args[2] === '7' && c.args[4]?.endsWith(':fence') && c.args[10] === lease.owner,
        );
        expect(grantsA).toHaveLength(1);
        expect(commands.length).toBeGreaterThan(renewCommands.length + 1);
        // No renewal sent after the loss, and exactly the expected ones before it.
        expect(renewCommands.filter((c) => c.serverMs >= lost.wallMs)).toEqual([]);
        expect(renewCommands).toHaveLength(renewalInFlight ? 1 : 0);
        // Renew events after the loss can only be late answers to renewals sent before it.
        const renewEventsA = renewals.filter((r) => r.event.owner === lease.owner);
        expect(renewEventsA.length).toBeLessThanOrEqual(renewCommands.length);
        expect(renewEventsA.filter((r) => r.at > lost.at && !r.event.ok)).toEqual([]);
        expect(locker.activeLeases).toBe(0);

        await expect(lease.release()).resolves.toBe('not-held');
        expect(await store.raw.exists(lockKey)).toBe(0);
      } finally {
        diagnostics_channel.unsubscribe(CHANNELS.renew, onRenew);
        diagnostics_channel.unsubscribe(CHANNELS.lost, onLost);
        monitor.close();
        child.stop();
      }
    },
  );
});

interface ProcessBResult {
  token: string;
  outcome: string;
  grantedAt: number;
  releasedAt: number;
}

/**
 * Process B: a separate Node process on the built library. It connects, prints `ready`, and on
 * `go` (stdin) sleeps 400 ms, acquires `key`, releases it and prints the result as JSON.
 */
function startProcessB(key: string): {
  ready: Promise<void>;
  result: Promise<ProcessBResult>;
  go(): void;
  stop(): void;
} {
  const script = `
    import { createLocker } from ${JSON.stringify(pathToFileURL(buildIndex).href)};
    const key = ${JSON.stringify(key)};
    const locker = createLocker(${JSON.stringify(REDIS_URL)});
    await locker.inspect(key); // connect before the go signal
    process.stdout.write('ready\\n');
    process.stdin.once('data', async () => {
      await new Promise((r) => setTimeout(r, 400));
      const lease = await locker.acquire(key, { ttlMs: 5000, autoRenew: false, waitMs: 5000 });
      const grantedAt = Date.now();
      const outcome = await lease.release();
      const releasedAt = Date.now();
      process.stdout.write(JSON.stringify({ token: String(lease.fencingToken), outcome, grantedAt, releasedAt }) + '\\n');
      await locker.close();
      process.exit(0);
    });
  `;
  const child: ChildProcessWithoutNullStreams = spawn(
    process.execPath,
    ['--input-type=module', '-e', script],
    { cwd: ROOT, stdio: 'pipe' },
  );
  let out = '';
  let err = '';
  let onReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => {
    onReady = resolve;
  });
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    if (out.startsWith('ready\n')) onReady();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const failIfExited = exited.then((code) => {
    throw new Error(`process B exited (${code}) before ready: ${err}`);
  });
  const result = exited.then((code) => {
    const line = out.split('\n').find((l) => l.startsWith('{'));
    if (code !== 0 || line === undefined) {
      throw new Error(`process B failed (exit ${code}): ${err || out}`);
    }
    return JSON.parse(line) as ProcessBResult;
  });
  result.catch(() => undefined);
  failIfExited.catch(() => undefined);
  return {
    ready: Promise.race([ready, failIfExited]),
    result,
    go: () => child.stdin.write('go\n'),
    stop: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
