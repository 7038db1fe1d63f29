/**
 * Release of a lease granted before the engine stopped answering (docs/semantics.md, "Engines
 * that do not answer"): a fault proxy in front of a real engine forwards the grant, then either
 * holds every byte (silent) or resets the connections and refuses new ones (closed). The release
 * rejects within the store's bound with `BackendError` in the one form, naming the proxy's
 * address; the key then expires by its TTL on the engine.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { BackendError, createLocker, type Locker } from '../../../packages/fencelock/src/index.js';
import {
  ETCD_CLIENT_PORT_BASE,
  PG_PORT,
  REDIS_PORT,
  ZK_CLIENT_PORT_BASE,
} from '../../helpers/engines.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';

const T = 500;
const SLACK_MS = 400;

interface Engine {
  readonly name: string;
  readonly port: number;
  readonly url: (port: number) => string;
  /** Longest a release may take, ms (see the table in docs/semantics.md). */
  readonly boundMs: number;
}

const ENGINES: readonly Engine[] = [
  {
    name: 'redis',
    port: REDIS_PORT,
    url: (p) => `redis://127.0.0.1:${p}?commandTimeoutMs=${T}`,
    boundMs: 2 * T,
  },
  {
    name: 'etcd',
    port: ETCD_CLIENT_PORT_BASE + 1,
    url: (p) => `etcd://127.0.0.1:${p}/outage${process.pid}?dialTimeoutMs=${T}`,
    // etcd3 tries a request that got no answer again, each try with its own deadline.
    boundMs: 4 * T,
  },
  {
    name: 'postgres',
    port: PG_PORT,
    url: (p) => `postgres://fencelock@127.0.0.1:${p}/fencelock?commandTimeoutMs=${T}`,
    boundMs: 2 * T + 1_000,
  },
  {
    name: 'zookeeper',
    port: ZK_CLIENT_PORT_BASE,
    url: (p) => `zk://127.0.0.1:${p}/outage${process.pid}?connectTimeoutMs=${T}`,
    // Each request is given connectTimeoutMs; with the connection down, the members are then
    // asked whether they refuse, for up to a fifth of it (reach.ts).
    boundMs: T + T / 5,
  },
];

let proxy: TcpProxy | undefined;
let locker: Locker | undefined;
afterEach(async () => {
  await locker?.close();
  await proxy?.close();
  locker = undefined;
  proxy = undefined;
});

describe.each(ENGINES)('$name: release when the engine stops answering', (engine) => {
  it.each([
    { kind: 'silent', reasons: ['no-answer'] },
    { kind: 'closed', reasons: ['connection-refused', 'connection-closed'] },
  ])('$kind: BackendError within the bound', async ({ kind, reasons }) => {
    proxy = await startTcpProxy({ targetPort: engine.port });
    locker = createLocker(engine.url(proxy.port));
    const lease = await locker.acquire(`outage-release-${kind}-${process.pid}`, {
      ttlMs: 2_000,
      autoRenew: false,
    });
    if (kind === 'silent') proxy.blackhole();
    else proxy.cut();
    const startedAt = performance.now();
    const error = await lease.release().then(
      () => undefined,
      (e: unknown) => e,
    );
    const ms = performance.now() - startedAt;
    expect(error).toBeInstanceOf(BackendError);
    const e = error as BackendError;
    expect(reasons).toContain(e.unreachable);
    expect(e.address).toBe(`127.0.0.1:${proxy.port}`);
    expect(e.message).toContain(`127.0.0.1:${proxy.port} unreachable: `);
    expect(ms).toBeLessThan(engine.boundMs + SLACK_MS);
  });
});
