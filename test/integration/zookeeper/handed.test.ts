/**
 * Failure scenarios (as in test/integration/handed/) on ZooKeeper:
 * - T07 step 3: `ttlMs` is the session timeout asked for; the server negotiates it into its
 *   `[2, 20] × tickTime` (tickTime 500 in `scripts/services.sh`: 1000..60000 ms). The lease, the
 *   node's data (what `inspect()` reports as the holder's TTL) and the server's own record of the
 *   session (the `cons` four-letter command, `to=`) all say the negotiated value: 1500 → 1500,
 *   300 → 1000 (the server minimum, never 0), 120000 → 60000 (the server maximum). Without the
 *   watchdog the node goes when that TTL passes unrenewed.
 * - Protected mode, through the backend: a repeated `attempt` by the same owner finds its node
 *   again (one node, same token), and `abandon` by a backend instance that never saw the owner
 *   finds the owner's node by name and deletes it.
 */
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import type { ZookeeperBackend } from '../../../packages/fencelock/src/backends/zookeeper/index.js';
import type { AttemptRequest } from '../../../packages/fencelock/src/core/backend.js';
import { LockLostError } from '../../../packages/fencelock/src/index.js';
import { ZK_CLIENT_PORT_BASE } from '../../helpers/engines.js';
import { contenders, countChildren, sleep, useNamespace } from './support.js';

const fixture = useNamespace('handed');

/**
 * Ask one server for its connections (`cons`), the whole answer as text; '' from a server that
 * is down or does not answer within 2 s (the fault tests stop and pause servers: a session
 * cannot be connected to such a server anyway).
 */
function cons(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.end('cons'));
    let text = '';
    socket.setEncoding('utf8');
    socket.setTimeout(2000, () => {
      text = '';
      socket.destroy();
    });
    socket.on('data', (chunk: string) => {
      text += chunk;
    });
    socket.on('error', () => {
      text = '';
    });
    socket.on('close', () => resolve(text));
  });
}

/** The session timeout the ensemble negotiated for session `id` (hex), from the server's side. */
async function serverSessionTimeout(id: string): Promise<number> {
  const answers = await Promise.all([0, 1, 2].map((n) => cons(ZK_CLIENT_PORT_BASE + n)));
  const lines = answers
    .flatMap((text) => text.split('\n'))
    .filter((line) => line.includes(`sid=0x${id},`));
  expect(lines, `a connection of session 0x${id}`).toHaveLength(1);
  const to = /[(,]to=(\d+)[,)]/.exec(lines[0]!)?.[1];
  expect(to, lines[0]).toBeDefined();
  return Number(to);
}

function ownerId(): string {
  return randomBytes(16).toString('hex');
}

describe('T07: TTL units and granularity (ZooKeeper)', () => {
  for (const [asked, negotiated] of [
    [1500, 1500],
    [300, 1000],
    [120_000, 60_000],
  ] as const) {
    it(`ttlMs ${asked} is the session timeout the server negotiated: ${negotiated} ms`, async () => {
      const k = `t07:${asked}`;
      const locker = fixture.locker({ ttlMs: 30_000 });
      const dir = ((await locker.backend()) as ZookeeperBackend).dirOf(k);
      const startedAt = performance.now();
      const lease = await locker.acquire(k, { ttlMs: asked });
      expect(lease.ttlMs).toBe(negotiated);

      const [node, ...rest] = await contenders(fixture.admin, dir);
      expect(rest).toEqual([]);
      expect(node!.owner).toBe(lease.owner);
      expect(node!.czxid).toBe(lease.fencingToken);
      // The server's own record of the session the node lives in.
      expect(await serverSessionTimeout(node!.ephemeralOwner)).toBe(negotiated);
      // The node's data holds it, and inspect() reports it as the holder's TTL.
      const [, data] = await fixture.admin.get(node!.path, false);
      expect(String(data)).toBe(String(negotiated));
      const info = await locker.inspect(k);
      expect(info.holder).toEqual({
        owner: lease.owner,
        fencingToken: lease.fencingToken,
        ttlMs: negotiated,
      });
      expect(info.lastFencingToken).toBe(lease.fencingToken);

      // Validity is bounded by the effective TTL from the attempt, and is more than asked for
      // when the server raised it.
      expect(lease.expiresAt).toBeLessThanOrEqual(startedAt + negotiated + 1);
      expect(lease.expiresAt - startedAt).toBeGreaterThan(Math.min(asked, negotiated) * 0.9);
      if (asked < negotiated) {
        expect(lease.remainingMs).toBeGreaterThan(asked);
        // Kept alive at a third of the effective TTL: still held well past the asked 300 ms.
        await sleep(1200);
        expect(lease.isHeld).toBe(true);
        expect(await countChildren(fixture.admin, dir)).toBe(1);
      }
      expect(lease.isHeld).toBe(true);
      expect(await lease.release()).toBe('released');
      expect(await countChildren(fixture.admin, dir)).toBe(0);
    });
  }

  it('ttlMs 1500 without the watchdog: the node is gone at 2500 ms and the lease lost', async () => {
    const k = 't07:1500:unrenewed';
    const locker = fixture.locker({ ttlMs: 30_000 });
    const dir = ((await locker.backend()) as ZookeeperBackend).dirOf(k);
    const startedAt = performance.now();
    const lease = await locker.acquire(k, { ttlMs: 1500, autoRenew: false });
    expect(lease.ttlMs).toBe(1500);
    expect(lease.expiresAt).toBeLessThanOrEqual(startedAt + 1500 + 1);
    const [node] = await contenders(fixture.admin, dir);
    expect(node!.czxid).toBe(lease.fencingToken);
    expect(String((await fixture.admin.get(node!.path, false))[1])).toBe('1500');
    // Still there well inside the TTL.
    await sleep(800 - (performance.now() - startedAt));
    expect(await countChildren(fixture.admin, dir)).toBe(1);
    expect(lease.isHeld).toBe(true);

    await sleep(2500 - (performance.now() - startedAt));
    expect(await countChildren(fixture.admin, dir)).toBe(0);
    expect(lease.isHeld).toBe(false);
    expect(lease.signal.reason).toBeInstanceOf(LockLostError);
    expect(await lease.release()).toBe('not-held');
  });
});

describe('protected mode: attempt and abandon find the owner’s node by name (ZooKeeper)', () => {
  it('a repeated attempt by the same owner keeps one node and the same token', async () => {
    const backend = fixture.backend();
    const key = 'protected:idempotent';
    const dir = backend.dirOf(key);
    const holder: AttemptRequest = {
      key,
      owner: ownerId(),
      ttlMs: 5000,
      mode: 'write',
      autoRenew: true,
    };
    const first = await backend.attempt(holder);
    const again = await backend.attempt(holder);
    expect(first.granted && again.granted).toBe(true);
    if (!first.granted || !again.granted) return;
    expect(again.token).toBe(first.token);
    expect(first.ttlMs).toBe(5000);
    let nodes = await contenders(fixture.admin, dir);
    expect(nodes.map((n) => [n.owner, n.mode, n.czxid])).toEqual([
      [holder.owner, 'write', first.token],
    ]);
    expect(nodes[0]!.name).toMatch(new RegExp(`^_c_${holder.owner}-w-\\d{10}$`));

    // A waiter asking twice also keeps one node (its place in line).
    const waiter: AttemptRequest = { ...holder, owner: ownerId() };
    const queued = await backend.attempt(waiter);
    const queuedAgain = await backend.attempt(waiter);
    expect(queued).toMatchObject({ granted: false, queued: true });
    expect(queuedAgain).toMatchObject({ granted: false, queued: true });
    nodes = await contenders(fixture.admin, dir);
    expect(nodes.map((n) => [n.owner, n.mode])).toEqual([
      [holder.owner, 'write'],
      [waiter.owner, 'write'],
    ]);

    expect(await backend.release({ key, owner: holder.owner, fencingToken: first.token })).toBe(
      'released',
    );
    // The waiter is next: granted with the czxid of the node it queued with.
    const granted = await backend.attempt(waiter);
    expect(granted).toMatchObject({ granted: true, token: nodes[1]!.czxid });
    await backend.abandon(waiter);
    expect(await countChildren(fixture.admin, dir)).toBe(0);
  });

  it('abandon by a backend that never saw the owner deletes that owner’s node, and only it', async () => {
    const backend = fixture.backend();
    const stranger = fixture.backend();
    const key = 'protected:abandon';
    const dir = backend.dirOf(key);
    expect(stranger.dirOf(key)).toBe(dir);
    const holder: AttemptRequest = {
      key,
      owner: ownerId(),
      ttlMs: 5000,
      mode: 'write',
      autoRenew: true,
    };
    const waiter: AttemptRequest = { ...holder, owner: ownerId() };
    const grant = await backend.attempt(holder);
    expect(grant.granted).toBe(true);
    if (!grant.granted) return;
    expect(await backend.attempt(waiter)).toMatchObject({ granted: false, queued: true });
    const before = await contenders(fixture.admin, dir);
    expect(before.map((n) => n.owner)).toEqual([holder.owner, waiter.owner]);

    // An owner with no node: nothing is deleted.
    await stranger.abandon({ ...holder, owner: ownerId() });
    expect(await contenders(fixture.admin, dir)).toEqual(before);

    // The waiter's node, found by name from another instance (another session).
    await stranger.abandon(waiter);
    expect((await contenders(fixture.admin, dir)).map((n) => n.owner)).toEqual([holder.owner]);
    // The holder's node, whatever its token.
    await stranger.abandon(holder);
    expect(await countChildren(fixture.admin, dir)).toBe(0);
    // The backend that created it learns it no longer holds the key.
    expect(await backend.release({ key, owner: holder.owner, fencingToken: grant.token })).toBe(
      'not-held',
    );
  });

  it('release by a backend that never saw the owner compares the token (czxid) before deleting', async () => {
    const backend = fixture.backend();
    const stranger = fixture.backend();
    const key = 'protected:release';
    const dir = backend.dirOf(key);
    const holder: AttemptRequest = {
      key,
      owner: ownerId(),
      ttlMs: 5000,
      mode: 'write',
      autoRenew: true,
    };
    const grant = await backend.attempt(holder);
    expect(grant.granted).toBe(true);
    if (!grant.granted) return;
    const before = await contenders(fixture.admin, dir);
    // Another token (an older grant of the same owner id): the node is left alone.
    expect(
      await stranger.release({ key, owner: holder.owner, fencingToken: grant.token - 1n }),
    ).toBe('not-owner');
    // An owner with no node, while the key is held: not-owner, nothing deleted.
    expect(await stranger.release({ key, owner: ownerId(), fencingToken: grant.token })).toBe(
      'not-owner',
    );
    expect(await contenders(fixture.admin, dir)).toEqual(before);
    // Owner and token match: deleted, found by name.
    expect(await stranger.release({ key, owner: holder.owner, fencingToken: grant.token })).toBe(
      'released',
    );
    expect(await countChildren(fixture.admin, dir)).toBe(0);
    expect(await stranger.release({ key, owner: holder.owner, fencingToken: grant.token })).toBe(
      'not-held',
    );
  });
});
