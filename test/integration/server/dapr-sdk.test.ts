/**
 * The official Dapr JavaScript SDK (`@dapr/dapr`, pinned devDependency), unmodified, against
 * `fencelock serve` processes over HTTP and over gRPC (`--grpc-port`), on the real Redis and on
 * a SQLite file, with the API token given to the sidecar as `DAPR_API_TOKEN` and to the SDK as
 * `daprApiToken`, and without a token. The SDK's `start()` probes the sidecar's metadata before
 * its first call (for up to 30 s at 500 ms intervals); it must resolve at once.
 */
import { CommunicationProtocolEnum, DaprClient, LogLevel } from '@dapr/dapr';
import { Settings } from '@dapr/dapr/utils/Settings.util.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoreHarness } from '../handed/stores.js';
import { HARNESSED_STORES } from './harnessed-stores.js';
import {
  BUILD_TIMEOUT_MS,
  buildCli,
  call,
  dropRedisKeys,
  type ServerProcess,
  serveStore,
  sleep,
  TOKEN,
  uniqueKey,
} from './support.js';

beforeAll(buildCli, BUILD_TIMEOUT_MS);
afterAll(dropRedisKeys);

/**
 * The SDK's interval between the probes of `start()` (a static of its `Settings`, private in its
 * types), shortened for the refused-token cases only: there `start()` probes 60 times before it
 * gives up, 30 s at the SDK's 500 ms. The SDK's code paths are the same.
 */
const probeSettings = Settings as unknown as { daprSidecarPollingDelayMs: number };

/** Dapr's unlock statuses, as the SDK's `LockStatus` numbers them. */
const SUCCESS = 0;
const LOCK_DOES_NOT_EXIST = 1;
const LOCK_BELONGS_TO_OTHERS = 2;

const PROTOCOLS = [
  { protocol: 'HTTP', communicationProtocol: CommunicationProtocolEnum.HTTP },
  { protocol: 'gRPC', communicationProtocol: CommunicationProtocolEnum.GRPC },
] as const;

/** A sidecar process and where each protocol reaches it. */
interface Sidecar {
  readonly process: ServerProcess;
  readonly httpPort: string;
  readonly grpcPort: string;
}

async function startSidecar(storeUrl: string, env: NodeJS.ProcessEnv): Promise<Sidecar> {
  const process = await serveStore(storeUrl, ['--grpc-port', '0'], env);
  const grpcPort = /:(\d+)$/.exec(process.grpcAddress ?? '')?.[1];
  if (grpcPort === undefined) throw new Error(`no gRPC address in ${process.stderr()}`);
  return { process, httpPort: new URL(process.url).port, grpcPort };
}

describe.each(HARNESSED_STORES)('the Dapr JS SDK against fencelock serve ($name)', ({ make }) => {
  let harness: StoreHarness;
  let withToken: Sidecar;
  let open: Sidecar;

  beforeAll(async () => {
    const store = make();
    harness = store.harness;
    // The token reaches the sidecar through Dapr's own variable (no --token-file).
    [withToken, open] = await Promise.all([
      startSidecar(store.url(), { DAPR_API_TOKEN: TOKEN }),
      startSidecar(store.url(), {}),
    ]);
  });

  afterAll(async () => {
    expect(await withToken?.process.stop()).toBe(0);
    expect(await open?.process.stop()).toBe(0);
    await harness?.close();
  });

  describe.each(PROTOCOLS)('over $protocol', ({ protocol, communicationProtocol }) => {
    const clients: DaprClient[] = [];
    const client = (sidecar: Sidecar, daprApiToken?: string) => {
      const made = new DaprClient({
        daprHost: '127.0.0.1',
        daprPort: protocol === 'HTTP' ? sidecar.httpPort : sidecar.grpcPort,
        communicationProtocol,
        logger: { level: LogLevel.Error },
        ...(daprApiToken === undefined ? {} : { daprApiToken }),
      });
      clients.push(made);
      return made;
    };

    afterAll(async () => {
      await Promise.all(clients.map((c) => c.stop()));
    });

    it('start() resolves at once; lock, lock by another owner, unlock statuses, metadata', async () => {
      const dapr = client(withToken, TOKEN);
      const started = performance.now();
      await dapr.start();
      expect(performance.now() - started).toBeLessThan(2_000);

      const key = uniqueKey(`sdk-${protocol}`);
      expect(await dapr.lock.lock('lockstore', key, 'owner-a', 30)).toEqual({ success: true });
      expect(await dapr.lock.lock('lockstore', key, 'owner-b', 30)).toEqual({ success: false });
      expect(await dapr.lock.unlock('lockstore', key, 'owner-b')).toEqual({
        status: LOCK_BELONGS_TO_OTHERS,
      });
      // Another owner's unlock deleted nothing: the holder's release still succeeds.
      expect(await dapr.lock.unlock('lockstore', key, 'owner-a')).toEqual({ status: SUCCESS });
      expect(await dapr.lock.unlock('lockstore', key, 'owner-a')).toEqual({
        status: LOCK_DOES_NOT_EXIST,
      });
      // Free again: the other owner takes it.
      expect(await dapr.lock.lock('lockstore', key, 'owner-b', 30)).toEqual({ success: true });
      expect(await dapr.lock.unlock('lockstore', key, 'owner-b')).toEqual({ status: SUCCESS });

      const metadata = await dapr.metadata.get();
      expect(metadata.id).toBe('fencelock');
      expect(metadata.components).toEqual([
        { name: 'lockstore', type: 'lock.fencelock', version: 'v1', capabilities: [] },
      ]);
    });

    it('a lock ends after expiryInSeconds; then another owner gets it', async () => {
      const dapr = client(withToken, TOKEN);
      const key = uniqueKey(`sdk-expiry-${protocol}`);
      expect(await dapr.lock.lock('lockstore', key, 'owner-a', 1)).toEqual({ success: true });
      expect(await dapr.lock.lock('lockstore', key, 'owner-b', 1)).toEqual({ success: false });
      await sleep(1_300);
      expect(await dapr.lock.unlock('lockstore', key, 'owner-a')).toEqual({
        status: LOCK_DOES_NOT_EXIST,
      });
      expect(await dapr.lock.lock('lockstore', key, 'owner-b', 30)).toEqual({ success: true });
      expect(await dapr.lock.unlock('lockstore', key, 'owner-b')).toEqual({ status: SUCCESS });
    });

    it('another store name is refused', async () => {
      const dapr = client(withToken, TOKEN);
      // HTTP: the SDK's error holds the answer's JSON; gRPC: ConnectError's `[code] message`.
      await expect(dapr.lock.lock('otherstore', uniqueKey('sdk-store'), 'o', 30)).rejects.toThrow(
        protocol === 'HTTP'
          ? /"status":400.*ERR_LOCK_STORE_NOT_FOUND|ERR_LOCK_STORE_NOT_FOUND.*"status":400/
          : /^\[invalid_argument\] lock store "otherstore" not found/,
      );
    });

    it('without a token on either side, the flow runs the same', async () => {
      const dapr = client(open);
      await dapr.start();
      const key = uniqueKey(`sdk-open-${protocol}`);
      expect(await dapr.lock.lock('lockstore', key, 'owner-a', 30)).toEqual({ success: true });
      expect(await dapr.lock.lock('lockstore', key, 'owner-b', 30)).toEqual({ success: false });
      expect(await dapr.lock.unlock('lockstore', key, 'owner-a')).toEqual({ status: SUCCESS });
    });

    it('a wrong or missing token is refused: start() gives up, nothing is locked', async () => {
      const pollingMs = probeSettings.daprSidecarPollingDelayMs;
      probeSettings.daprSidecarPollingDelayMs = 10;
      try {
        for (const daprApiToken of [`${TOKEN}-wrong`, undefined]) {
          const dapr = client(withToken, daprApiToken);
          const key = uniqueKey(`sdk-refused-${protocol}`);
          await expect(dapr.lock.lock('lockstore', key, 'owner-a', 30)).rejects.toThrow(
            'DAPR_SIDECAR_COULD_NOT_BE_STARTED',
          );
          const inspect = await call(
            withToken.process.url,
            `/v1/locks/${encodeURIComponent(key)}`,
            {
              token: TOKEN,
            },
          );
          expect(inspect.body.holder).toBeNull();
        }
      } finally {
        probeSettings.daprSidecarPollingDelayMs = pollingMs;
      }
    });
  });
});
