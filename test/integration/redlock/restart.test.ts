/**
 * The Redlock delayed-restart rule, checked: a node restarted empty (`services.sh redlock-node
 * restart-empty`) while a lease granted on it is still valid makes the backend emit a process
 * warning naming the node and the key; a restart after the lease was released does not. And
 * fencing tokens across restarts: every node restarted empty still grants above every token
 * granted before (a node's token is never below its clock in µs).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { NODE_RESTARTED_WARNING } from '../../../packages/fencelock/src/backends/redlock/index.js';
import { createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import { REDLOCK_NODE_URLS, REDLOCK_PORT_BASE } from '../../helpers/engines.js';

const SERVICES_SH = fileURLToPath(new URL('../../../scripts/services.sh', import.meta.url));
const prefix = `fencelock-it-restart-${randomBytes(3).toString('hex')}`;
const lockers: Locker[] = [];

afterAll(async () => {
  await Promise.all(lockers.map((l) => l.close()));
});

function restartEmpty(n: number): void {
  execFileSync(SERVICES_SH, ['redlock-node', 'restart-empty', String(n)], { stdio: 'ignore' });
}

/** Process warnings with our code seen during `ms` after `action`. */
async function warningsDuring(action: () => void, ms: number): Promise<Error[]> {
  const seen: Error[] = [];
  const listener = (warning: Error & { code?: string }) => {
    if (warning.code === NODE_RESTARTED_WARNING) seen.push(warning);
  };
  process.on('warning', listener);
  try {
    action();
    const deadline = performance.now() + ms;
    while (seen.length === 0 && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    process.off('warning', listener);
  }
  return seen;
}

describe('Redlock node restarted under a live lease', () => {
  it('warns, naming the node and the key; stays quiet once the lease is released', async () => {
    const locker = createLocker(
      `redlock://${REDLOCK_NODE_URLS.slice(0, 3)
        .map((u) => u.replace('redis://', ''))
        .join(',')}?prefix=${prefix}`,
      { ttlMs: 10_000 },
    );
    lockers.push(locker);
    const lease = await locker.acquire('restart:held');
    const warned = await warningsDuring(() => restartEmpty(1), 5_000);
    expect(warned).toHaveLength(1);
    expect(warned[0]!.message).toContain(`127.0.0.1:${REDLOCK_PORT_BASE + 1}`);
    expect(warned[0]!.message).toContain('"restart:held"');
    expect(await lease.release()).toBe('released');

    // Released: a restart is no risk to anything this backend granted.
    await (await locker.acquire('restart:other')).release();
    const quiet = await warningsDuring(() => restartEmpty(2), 2_000);
    expect(quiet).toEqual([]);
  }, 20_000);
});

describe('Redlock nodes restarted empty', () => {
  it('grant tokens above every token granted before the restart', async () => {
    const store = `redlock://${REDLOCK_NODE_URLS.slice(2, 5)
      .map((u) => u.replace('redis://', ''))
      .join(',')}?prefix=${prefix}`;
    const before = createLocker(store, { ttlMs: 10_000 });
    lockers.push(before);
    const tokens: bigint[] = [];
    for (let i = 0; i < 3; i++) {
      const lease = await before.acquire('restart:tokens');
      tokens.push(lease.fencingToken);
      expect(await lease.release()).toBe('released');
    }
    await before.close();

    // Every node of this locker loses its data: no counter is left anywhere.
    for (const n of [3, 4, 5]) restartEmpty(n);
    const after = createLocker(store, { ttlMs: 10_000 });
    lockers.push(after);
    expect((await after.inspect('restart:tokens')).lastFencingToken).toBe(0n);
    const lease = await after.acquire('restart:tokens');
    expect(lease.fencingToken).toBeGreaterThan(tokens.at(-1)!);
    expect(await lease.release()).toBe('released');
  }, 30_000);
});
