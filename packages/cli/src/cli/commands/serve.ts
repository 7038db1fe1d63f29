/**
 * `fencelock serve --store URL`: run the lock sidecar (Dapr's distributed-lock API plus
 * fencelock's `/v1/locks` extensions, leader elections under `/v1/elections`, `/healthz`,
 * `/metrics`; with `--grpc-port`, the same over gRPC) until SIGTERM or SIGINT, then shut
 * down gracefully. All lock work happens in the sidecar factory (`src/server/app.ts`), which calls
 * the Locker; this file only parses options, reads the token and handles signals.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { parseIntegerOption, parseStoreOption, shownValue, UsageError } from '../usage.js';

/** Environment variable holding the API token when `--token-file` is not given. */
export const TOKEN_ENV = 'FENCELOCK_SERVER_TOKEN';
/** Dapr's variable for the same token (read by daprd and by Dapr's SDKs), read after TOKEN_ENV. */
export const DAPR_TOKEN_ENV = 'DAPR_API_TOKEN';

/** Raw option values of `serve`, as commander hands them over. */
interface ServeCliOptions {
  readonly store: string;
  readonly host: string;
  readonly port: string;
  readonly grpcPort?: string;
  readonly tokenFile?: string;
  readonly storeName: string;
  readonly appId: string;
  readonly maxWait: string;
}

/** Add `serve` to `program`. */
export function registerServeCommand(program: Command): void {
  program
    .command('serve')
    .description(
      'run the lock sidecar: Dapr distributed-lock API, /v1/locks extensions, /v1/elections, /healthz, /metrics, and a live dashboard at /ui',
    )
    .requiredOption(
      '--store <url>',
      'lock store URL (sqlite:<path>, redis://host:port, redlock://…, etcd://…, zk://…, postgres://…)',
    )
    .option('--host <host>', 'address to listen on (without a token: loopback only)', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0: any free port)', '3500')
    .option(
      '--grpc-port <port>',
      "also serve gRPC on this port (Dapr's runtime service: lock and metadata; fencelock.v1.Locks); 0: any free port",
    )
    .option(
      '--token-file <file>',
      `file holding the API token (>= 16 characters) every request but the health probes must carry, as a bearer token or in dapr-api-token; default: $${TOKEN_ENV}, else $${DAPR_TOKEN_ENV}`,
    )
    .option(
      '--store-name <name>',
      "store name in Dapr's paths (/v1.0-alpha1/lock/<name>)",
      'lockstore',
    )
    .option('--app-id <id>', 'Dapr app id, reported by GET /v1.0/metadata', 'fencelock')
    .option(
      '--max-wait <ms>',
      "longest waitMs a caller may ask for (an election campaign's default wait), milliseconds",
      '60000',
    )
    .addHelpText(
      'after',
      `
Leases granted through the sidecar are not released at shutdown: the sidecar keeps no lock
state, so they end by their TTL unless their owners release them (through any sidecar on the
same store). On etcd and ZooKeeper they end with this sidecar's engine session.`,
    )
    .action(async (raw: ServeCliOptions) => {
      // Validate everything before any connection is made or any port is bound.
      const store = parseStoreOption('--store', raw.store);
      const port = parseIntegerOption('--port', raw.port, 0, 65535);
      const grpcPort =
        raw.grpcPort === undefined
          ? undefined
          : parseIntegerOption('--grpc-port', raw.grpcPort, 0, 65535);
      const maxWaitMs = parseIntegerOption('--max-wait', raw.maxWait, 0, 2_147_483_647);
      const token = readToken(raw.tokenFile);
      const { createSidecar, isLoopbackHost, MIN_TOKEN_CHARS } = await import(
        '../../server/index.js'
      );
      if (token !== undefined && token.length < MIN_TOKEN_CHARS) {
        throw new UsageError(
          '--token-file',
          `invalid token: expected at least ${MIN_TOKEN_CHARS} characters, received ${token.length}`,
        );
      }
      if (token === undefined && !isLoopbackHost(raw.host)) {
        throw new UsageError(
          '--host',
          `invalid --host: without a token (--token-file, $${TOKEN_ENV} or $${DAPR_TOKEN_ENV}) the sidecar listens on loopback only, received ${shownValue(raw.host)}`,
        );
      }
      if (!/^[\w.-]{1,128}$/.test(raw.storeName)) {
        throw new UsageError(
          '--store-name',
          `invalid --store-name: expected 1 to 128 letters, digits, "_", "." or "-", received ${shownValue(raw.storeName)}`,
        );
      }

      if (!/^[\w.-]{1,128}$/.test(raw.appId)) {
        throw new UsageError(
          '--app-id',
          `invalid --app-id: expected 1 to 128 letters, digits, "_", "." or "-", received ${shownValue(raw.appId)}`,
        );
      }

      const sidecar = createSidecar({
        store,
        storeName: raw.storeName,
        appId: raw.appId,
        maxWaitMs,
        logger: { level: 'warn' },
        ...(token === undefined ? {} : { token }),
      });
      // The first SIGTERM / SIGINT shuts down gracefully; the same signal again ends the process
      // at once (its listener is gone), so a stuck engine cannot hold a shutdown forever.
      let stopping = false;
      const stopped = new Promise<void>((resolve) => {
        const stop = (signal: NodeJS.Signals) => {
          if (stopping) return;
          stopping = true;
          process.stderr.write(`fencelock serve: ${signal}: shutting down\n`);
          sidecar.close().then(resolve, (error: unknown) => {
            process.stderr.write(`fencelock serve: shutdown: ${(error as Error).message}\n`);
            process.exitCode = 1;
            resolve();
          });
        };
        process.once('SIGTERM', stop);
        process.once('SIGINT', stop);
      });
      let url: string;
      let grpcAddress: string | undefined;
      try {
        url = await sidecar.listen({ host: raw.host, port });
        if (grpcPort !== undefined) {
          grpcAddress = await sidecar.listenGrpc({ host: raw.host, port: grpcPort });
        }
      } catch (error) {
        await sidecar.close();
        throw error;
      }
      // The store URL may carry a password: show its scheme only. One write, so that a reader
      // of the first line has the whole start-up message.
      const scheme = store.slice(0, store.indexOf(':'));
      const unauthenticated =
        token === undefined
          ? `fencelock serve: no token (--token-file, $${TOKEN_ENV} or $${DAPR_TOKEN_ENV}): requests are not authenticated; listening on loopback only\n`
          : '';
      const grpcNote = grpcAddress === undefined ? '' : ` and gRPC on ${grpcAddress}`;
      process.stderr.write(
        `${unauthenticated}fencelock serve: listening on ${url}${grpcNote} (store ${scheme}, Dapr store name ${raw.storeName})\n` +
          `fencelock serve: dashboard at ${url}/ui\n`,
      );
      await stopped;
      process.stderr.write('fencelock serve: stopped\n');
    });
}

/**
 * The API token: the file's content (surrounding whitespace removed), else $FENCELOCK_SERVER_TOKEN,
 * else $DAPR_API_TOKEN (an empty variable counts as unset), else undefined (no authentication).
 * @throws UsageError when the file cannot be read or is empty.
 */
function readToken(file: string | undefined): string | undefined {
  if (file === undefined) {
    const env = process.env[TOKEN_ENV] || process.env[DAPR_TOKEN_ENV];
    return env === undefined || env === '' ? undefined : env.trim();
  }
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new UsageError(
      '--token-file',
      `invalid --token-file: cannot read ${JSON.stringify(file)} (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
    );
  }
  const token = text.trim();
  if (token === '') {
    throw new UsageError('--token-file', `invalid --token-file: ${JSON.stringify(file)} is empty`);
  }
  return token;
}
