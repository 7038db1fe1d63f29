/**
 * The sidecar: an HTTP server (fastify) in front of one Locker, for callers in any language.
 * It speaks Dapr's distributed-lock API (with the metadata and health routes Dapr's SDKs call),
 * fencelock's `/v1/locks` extensions (routes/locks.ts), leader elections under
 * `/v1/elections/{name}` (campaign, renew, proclaim, resign, the leader, and its changes as
 * Server-Sent Events: routes/elections.ts), `GET /healthz` and `GET /metrics` (Prometheus), a live dashboard at `/ui` (routes/dashboard.ts), and,
 * with `listenGrpc`, the same over gRPC (Dapr's runtime service and `fencelock.v1.Locks`, with
 * the elections as its Campaign, RenewLeadership, Proclaim, Resign, Leader and Observe methods,
 * see `grpc/server.ts`). It keeps no lock state of its own: every handler validates,
 * calls the Locker's owner-addressed operations and maps the answer, so several sidecars over one
 * store agree (on Redis, Redlock, SQLite and PostgreSQL; on etcd and ZooKeeper a grant lives in
 * the engine session of the sidecar that made it).
 */
import Fastify, { type FastifyError, type FastifyInstance, type FastifyRequest } from 'fastify';
import type { Locker } from 'fencelock';
import { createLocker, InvalidArgumentError, MAX_TIMER_MS } from 'fencelock';
import { collectPrometheusMetrics, type PrometheusMetrics } from 'fencelock/metrics/prometheus';
import { Registry } from 'prom-client';
import { packageVersion } from '../version.js';
import {
  apiTokenChecker,
  DAPR_API_TOKEN_HEADER,
  isLoopbackHost,
  MIN_TOKEN_CHARS,
  OPEN_PATHS,
} from './auth.js';
import { BODY_LIMIT_BYTES } from './body-limits.js';
import { createDashboard } from './dashboard/dashboard.js';
import { createGrpcServer, type GrpcServer } from './grpc/server.js';
import { daprAnswer, fromFastifyError, HttpError, sendError, utf8Body } from './http-errors.js';
import type { RouteContext } from './routes/context.js';
import { DAPR_PATH_PREFIX, registerDaprRoutes } from './routes/dapr.js';
import { DAPR_HEALTH_PATHS, notReady, registerDaprRuntimeRoutes } from './routes/dapr-runtime.js';
import { dashboardAccess, registerDashboardRoutes } from './routes/dashboard.js';
import { registerElectionRoutes } from './routes/elections.js';
import { registerLockRoutes } from './routes/locks.js';
import { registerOpsRoutes } from './routes/ops.js';
import { allowedFor } from './schemas.js';

/** Options of `createSidecar`. */
export interface SidecarOptions {
  /**
   * The store: a store URL (the sidecar creates its locker and closes it on `close()`), or a
   * Locker (the caller keeps it and closes it).
   */
  readonly store: string | Locker;
  /**
   * Bearer token every request but the health probes and the dashboard's page and sign-in
   * (`dashboardAccess`) must carry (`Authorization: Bearer <token>`), at least 16 characters;
   * the dashboard's data routes also take its session cookie. Without one, requests are not authenticated and `listen` accepts
   * loopback hosts only.
   */
  readonly token?: string;
  /** Store name in Dapr's paths (`/v1.0-alpha1/lock/<storeName>`). @default 'lockstore' */
  readonly storeName?: string;
  /** Dapr's app id, reported by `GET /v1.0/metadata`. @default 'fencelock' */
  readonly appId?: string;
  /** Longest `waitMs` a caller may ask for, ms. @default 60000 */
  readonly maxWaitMs?: number;
  /**
   * Registry served on `GET /metrics`; fencelock's metrics are registered in it (and removed
   * on `close()`). @default a new registry
   */
  readonly registry?: Registry;
  /** Fastify's logger option (pino). @default false */
  readonly logger?: boolean | { readonly level: string };
}

/** A sidecar built by `createSidecar`. */
export interface Sidecar {
  /** The fastify instance (routes registered, not listening until `listen`). */
  readonly app: FastifyInstance;
  /** The locker behind the routes. */
  readonly locker: Locker;
  /** The registry served on `GET /metrics`. */
  readonly registry: Registry;
  /**
   * Start listening. `port` 0 picks a free port.
   * @param options `host` @default '127.0.0.1'; `port` @default 3500
   * @returns the base URL, e.g. `http://127.0.0.1:3500`.
   * @throws InvalidArgumentError for a host that is not loopback when no token is set, or a bad
   *   port.
   */
  listen(options?: { readonly host?: string; readonly port?: number }): Promise<string>;
  /**
   * Start the gRPC server beside the HTTP one: Dapr's runtime service
   * (`dapr.proto.runtime.v1.Dapr`: TryLockAlpha1, UnlockAlpha1, GetMetadata) and
   * `fencelock.v1.Locks`, from the .proto files shipped in the package's `proto/` folder, with
   * the same token, limits and shutdown. Once per sidecar. `port` 0 picks a free port.
   * @param options `host` @default '127.0.0.1'; `port` @default 50001
   * @returns the bound address, `host:port` (an IPv6 host in brackets).
   * @throws InvalidArgumentError for a host that is not loopback when no token is set, a bad
   *   port, or a second call.
   */
  listenGrpc(options?: { readonly host?: string; readonly port?: number }): Promise<string>;
  /**
   * Graceful shutdown: new requests get 503 (gRPC: UNAVAILABLE), waiting acquires and campaigns
   * end with 503 `ERR_SHUTTING_DOWN` (gRPC: UNAVAILABLE), election observers' streams end,
   * requests in flight finish, the servers close, the metrics leave the registry, and a locker
   * the sidecar created is closed. Leases granted through the sidecar are not released: the
   * sidecar does not know them (it keeps no state), so they end by their TTL unless their owners
   * release them (through any sidecar on the same store). On etcd and ZooKeeper they end with
   * the sidecar's engine session. Idempotent.
   */
  close(): Promise<void>;
}

/** Default port: Dapr's HTTP port, so Dapr clients find the sidecar where they expect it. */
export const DEFAULT_PORT = 3500;
/** Default gRPC port of `listenGrpc`: Dapr's gRPC port. */
export const DEFAULT_GRPC_PORT = 50001;
/** Default Dapr store name. */
export const DEFAULT_STORE_NAME = 'lockstore';
/** Default Dapr app id. */
export const DEFAULT_APP_ID = 'fencelock';
/**
 * Default longest wait of `POST /v1/locks/{key}/acquire` and of
 * `POST /v1/elections/{name}/campaign` (where it is also the default wait), ms.
 */
export const DEFAULT_MAX_WAIT_MS = 60_000;

/** Answers of a sidecar shutting down: expected, not logged as failures. */
const SHUTDOWN_CODES = new Set(['ERR_SHUTTING_DOWN', 'ERR_HEALTH_NOT_READY']);

/** How long a shutdown waits for requests still arriving before it closes their connections, ms. */
const SHUTDOWN_GRACE_MS = 5_000;

/**
 * Build a sidecar (routes, auth, validation, metrics) without listening yet.
 * @throws InvalidArgumentError for a bad option (a malformed store URL, a short token…), before
 *   any network call. A store URL it echoes has its password redacted.
 */
export function createSidecar(options: SidecarOptions): Sidecar {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', 'an options object with store', options);
  }
  const { token } = options;
  if (token !== undefined && (typeof token !== 'string' || token.length < MIN_TOKEN_CHARS)) {
    throw new InvalidArgumentError(
      'token',
      `a string of at least ${MIN_TOKEN_CHARS} characters`,
      typeof token === 'string' ? `${token.length} characters` : token,
    );
  }
  const storeName = options.storeName ?? DEFAULT_STORE_NAME;
  if (typeof storeName !== 'string' || !/^[\w.-]{1,128}$/.test(storeName)) {
    throw new InvalidArgumentError(
      'storeName',
      'a name of 1 to 128 letters, digits, "_", "." or "-"',
      storeName,
    );
  }
  const appId = options.appId ?? DEFAULT_APP_ID;
  if (typeof appId !== 'string' || !/^[\w.-]{1,128}$/.test(appId)) {
    throw new InvalidArgumentError(
      'appId',
      'a name of 1 to 128 letters, digits, "_", "." or "-"',
      appId,
    );
  }
  const maxWaitMs = options.maxWaitMs ?? DEFAULT_MAX_WAIT_MS;
  if (
    typeof maxWaitMs !== 'number' ||
    !Number.isInteger(maxWaitMs) ||
    maxWaitMs < 0 ||
    maxWaitMs > MAX_TIMER_MS
  ) {
    throw new InvalidArgumentError('maxWaitMs', `an integer in [0, ${MAX_TIMER_MS}]`, maxWaitMs);
  }
  const registry = options.registry ?? new Registry();
  if (!(registry instanceof Registry)) {
    throw new InvalidArgumentError('registry', 'a prom-client Registry', registry);
  }
  const ownsLocker = typeof options.store === 'string';
  const locker =
    // A refusal of the URL never shows its password (`InvalidArgumentError` redacts it).
    typeof options.store === 'string' ? createLocker(options.store) : options.store;

  const shutdown = new AbortController();
  const allowed = (field: string) => allowedFor(field, maxWaitMs);
  const answer = (error: unknown, request: FastifyRequest): HttpError => {
    if (error instanceof HttpError) {
      if (error.statusCode >= 500 && !SHUTDOWN_CODES.has(error.body.errorCode)) {
        request.log.warn({ errorCode: error.body.errorCode }, error.message);
      }
      return error;
    }
    const mapped = fromFastifyError(error as FastifyError, allowed);
    if (mapped !== undefined) return mapped;
    request.log.error({ err: error }, 'unexpected error');
    return new HttpError(500, { errorCode: 'ERR_INTERNAL', message: 'internal error' });
  };
  const ctx: RouteContext = {
    locker,
    storeName,
    maxWaitMs,
    shutdown: shutdown.signal,
    allowed,
    answer,
  };

  const app = Fastify({
    logger: options.logger ?? false,
    // Lock keys may be up to 1024 UTF-8 bytes, i.e. 3072 characters once percent-encoded.
    routerOptions: { maxParamLength: 4096 },
    bodyLimit: BODY_LIMIT_BYTES,
    // A client that stalls its request (headers or body) is cut off after 30 to 60 s (Node
    // checks every 30 s); a waiting acquire is not affected (its request was received in full).
    // A shutdown does not wait for such a client beyond SHUTDOWN_GRACE_MS.
    requestTimeout: 30_000,
    // Requests during shutdown get our own 503 (ERR_SHUTTING_DOWN), from the hook below.
    return503OnClosing: false,
    // A path that is not valid percent-encoding (FST_ERR_BAD_URL) or another early error,
    // answered in the sidecar's shape; on Dapr's paths in Dapr's terms (ERR_MALFORMED_REQUEST).
    frameworkErrors: (error, request, reply) => {
      const dapr = request.url.startsWith(DAPR_PATH_PREFIX);
      const pathField = dapr
        ? 'storeName'
        : request.url.startsWith('/v1/elections/')
          ? 'name'
          : 'key';
      const early =
        error.code === 'FST_ERR_BAD_URL'
          ? new HttpError(400, {
              errorCode: 'ERR_INVALID_ARGUMENT',
              field: pathField,
              message: `invalid ${pathField}: the path is not valid percent-encoded UTF-8`,
            })
          : (error.statusCode ?? 500) < 500
            ? new HttpError(error.statusCode ?? 400, {
                errorCode: 'ERR_INVALID_ARGUMENT',
                field: 'request',
                message: `invalid request: ${error.message}`,
              })
            : new HttpError(500, { errorCode: 'ERR_INTERNAL', message: 'internal error' });
      void sendError(reply, dapr ? daprAnswer(early) : early);
    },
    ajv: {
      // "1000" is not a number, and an unknown field is an error, not something to drop.
      customOptions: {
        coerceTypes: false,
        removeAdditional: false,
        allErrors: false,
        verbose: true,
      },
    },
  });

  const metrics: PrometheusMetrics = collectPrometheusMetrics({ registry });

  app.addHook('onRequest', async (request) => {
    if (shutdown.signal.aborted) {
      if ((DAPR_HEALTH_PATHS as readonly string[]).includes(request.url)) throw notReady();
      throw new HttpError(503, {
        errorCode: 'ERR_SHUTTING_DOWN',
        message: 'the sidecar is shutting down',
      });
    }
  });
  // Answers sent once shutdown began close their connection: a keep-alive connection left
  // idle after its last answer would hold the server open until the keep-alive timeout.
  app.addHook('onSend', async (_request, reply) => {
    if (shutdown.signal.aborted) reply.header('connection', 'close');
  });

  const dashboard = createDashboard(locker, shutdown.signal);
  const check = token === undefined ? undefined : apiTokenChecker(token);
  if (check !== undefined) {
    app.addHook('onRequest', async (request) => {
      if (request.method === 'GET' && OPEN_PATHS.has(request.url)) return;
      const access = dashboardAccess(request.method, request.url);
      if (access === 'open') return;
      if (access === 'session-or-token' && dashboard.sessions.valid(request.headers.cookie)) {
        return;
      }
      const carried = {
        authorization: request.headers.authorization,
        daprApiToken: request.headers[DAPR_API_TOKEN_HEADER],
      };
      if (!check(carried)) {
        throw new HttpError(401, {
          errorCode: 'ERR_UNAUTHORIZED',
          message: `missing or wrong API token (Authorization: Bearer <token>, or ${DAPR_API_TOKEN_HEADER}: <token>)`,
        });
      }
    });
  }

  // JSON bodies must be valid UTF-8 (see `utf8Body`); Dapr's routes have a parser of their own.
  // Fastify's text/plain parser goes too: a JSON text sent as text/plain is a 415, as any other
  // type that is not JSON, not a string body that fails the schema's "object".
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('text/plain');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const text = utf8Body(body as Buffer);
    if (text instanceof HttpError) done(text, undefined);
    else void parseJson(request, text, done);
  });

  app.setErrorHandler((error: FastifyError, request, reply) =>
    sendError(reply, answer(error, request)),
  );
  app.setNotFoundHandler((request, reply) =>
    sendError(
      reply,
      new HttpError(404, {
        errorCode: 'ERR_NOT_FOUND',
        message: `no route ${request.method} ${request.url.split('?')[0]}`,
      }),
    ),
  );

  registerDaprRoutes(app, ctx);
  const runtimeVersion = `fencelock ${packageVersion()}`;
  registerDaprRuntimeRoutes(app, { appId, runtimeVersion, storeName });
  registerLockRoutes(app, ctx);
  registerElectionRoutes(app, ctx);
  registerOpsRoutes(app, { registry, shutdown: shutdown.signal });
  registerDashboardRoutes(app, ctx, dashboard, check);

  let closing: Promise<void> | undefined;
  let grpc: GrpcServer | undefined;
  return {
    app,
    locker,
    registry,
    async listen(listenOptions = {}) {
      const { host, port } = checkListen(listenOptions, DEFAULT_PORT, token !== undefined);
      await app.listen({ host, port });
      const address = app.server.address();
      const bound = typeof address === 'object' && address !== null ? address.port : port;
      return `http://${bracketed(host)}:${bound}`;
    },
    async listenGrpc(listenOptions = {}) {
      const { host, port } = checkListen(listenOptions, DEFAULT_GRPC_PORT, token !== undefined);
      if (grpc !== undefined) {
        throw new InvalidArgumentError('listenGrpc', 'one call per sidecar', 'a second call');
      }
      if (shutdown.signal.aborted) {
        throw new InvalidArgumentError('listenGrpc', 'a call before close()', 'a closed sidecar');
      }
      grpc = createGrpcServer(ctx, {
        token,
        appId,
        runtimeVersion,
        onUnexpected: (error) => app.log.error({ err: error }, 'unexpected error (gRPC)'),
      });
      const bound = await grpc.listen(host, port);
      return `${bracketed(host)}:${bound}`;
    },
    close() {
      closing ??= (async () => {
        shutdown.abort();
        // Waiting requests end at once (503, from the shutdown signal); a client still sending
        // its request gets a few seconds, then its connection is closed: Node stops enforcing
        // `requestTimeout` once the server closes, so a stalled upload would hold this forever.
        const cutOff = setTimeout(() => app.server.closeAllConnections(), SHUTDOWN_GRACE_MS);
        try {
          await Promise.all([app.close(), grpc?.close()]);
        } finally {
          clearTimeout(cutOff);
          dashboard.close();
          metrics.unsubscribe();
          if (ownsLocker) await locker.close();
        }
      })();
      return closing;
    },
  };
}

/**
 * The host and port of a `listen` / `listenGrpc` call, checked: a host name or address (only a
 * loopback one without a token), a port in [0, 65535].
 * @throws InvalidArgumentError naming `host` or `port`.
 */
function checkListen(
  options: { readonly host?: string; readonly port?: number },
  defaultPort: number,
  hasToken: boolean,
): { host: string; port: number } {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? defaultPort;
  if (typeof host !== 'string' || host.length === 0) {
    throw new InvalidArgumentError('host', 'a host name or IP address', host);
  }
  if (!hasToken && !isLoopbackHost(host)) {
    throw new InvalidArgumentError(
      'host',
      'a loopback address (127.0.0.1, ::1, localhost) when no token is set',
      host,
    );
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InvalidArgumentError('port', 'an integer in [0, 65535]', port);
  }
  return { host, port };
}

/** An IPv6 address in brackets, for a URL or `host:port`. */
function bracketed(host: string): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}
