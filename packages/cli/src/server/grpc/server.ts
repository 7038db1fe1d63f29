/**
 * The sidecar's gRPC server (@grpc/grpc-js, plaintext HTTP/2): Dapr's runtime service
 * (`dapr.proto.runtime.v1.Dapr`: TryLockAlpha1, UnlockAlpha1, GetMetadata; every other Dapr
 * method UNIMPLEMENTED) and fencelock's own `fencelock.v1.Locks` (unary methods, and the
 * server-streaming `Observe` of an election's leaders). It shares the HTTP side's
 * rules: the API token (`dapr-api-token` metadata or `authorization: Bearer`, one constant-time
 * check), the 16 KiB limit on a request, the shutdown signal (new calls and waiting acquires
 * end with UNAVAILABLE), and the lock operations themselves (`lock-operations.ts`).
 */
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerDuplexStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  type sendUnaryData,
  status,
  type UntypedServiceImplementation,
} from '@grpc/grpc-js';
import { apiTokenChecker, DAPR_API_TOKEN_HEADER } from '../auth.js';
import { MULTI_KEY_BODY_LIMIT_BYTES } from '../body-limits.js';
import { HttpError } from '../http-errors.js';
import type { LockOperationsContext } from '../lock-operations.js';
import { SERVED_DAPR_METHODS, UNSERVED_DAPR_METHODS } from './dapr-methods.js';
import { daprService } from './dapr-service.js';
import { locksService } from './locks-service.js';
import { loadServices } from './protos.js';
import type { ServiceMethods } from './service-methods.js';
import { toServiceError } from './status.js';
import { UnreadableRequest, withStrictStrings } from './strict-strings.js';

/** Largest request message, bytes: the HTTP multi-key routes' body limit (body-limits.ts). */
export const MAX_REQUEST_BYTES = MULTI_KEY_BODY_LIMIT_BYTES;

/** How long a shutdown waits for calls still running before it cuts their connections, ms. */
const SHUTDOWN_GRACE_MS = 5_000;

/** What the gRPC server needs beyond the lock operations. */
export interface GrpcServerOptions {
  /** API token every call must carry; without one, calls are not authenticated. */
  readonly token?: string | undefined;
  /** Reported by GetMetadata. */
  readonly appId: string;
  /** Reported by GetMetadata. */
  readonly runtimeVersion: string;
  /** Called with an error that is not one of the sidecar's answers (a bug); answered INTERNAL. */
  readonly onUnexpected: (error: unknown) => void;
}

/** A gRPC server built by `createGrpcServer`. */
export interface GrpcServer {
  /**
   * Bind `host:port` (`port` 0: a free one) and serve.
   * @returns the bound port.
   */
  listen(host: string, port: number): Promise<number>;
  /**
   * Stop accepting calls, let running ones finish (waiting acquires end with UNAVAILABLE once
   * `ctx.shutdown` is aborted), and cut what is left after a grace period. Idempotent.
   */
  close(): Promise<void>;
}

/** Build the gRPC server of a sidecar (not listening until `listen`). */
export function createGrpcServer(
  ctx: LockOperationsContext,
  options: GrpcServerOptions,
): GrpcServer {
  const services = loadServices();
  const server = new Server({
    'grpc.max_receive_message_length': MAX_REQUEST_BYTES,
  });
  const check = options.token === undefined ? undefined : apiTokenChecker(options.token);

  /** The refusal of a call before its work: shutting down, or a missing or wrong token. */
  const refusal = (metadata: Metadata): HttpError | undefined => {
    if (ctx.shutdown.aborted) {
      return new HttpError(503, {
        errorCode: 'ERR_SHUTTING_DOWN',
        message: 'the sidecar is shutting down',
      });
    }
    if (check === undefined) return undefined;
    const carried = {
      authorization: single(metadata.get('authorization')),
      daprApiToken: single(metadata.get(DAPR_API_TOKEN_HEADER)),
    };
    if (check(carried)) return undefined;
    return new HttpError(401, {
      errorCode: 'ERR_UNAUTHORIZED',
      message: `missing or wrong API token (metadata ${DAPR_API_TOKEN_HEADER}: <token>, or authorization: Bearer <token>)`,
    });
  };

  const implement = (service: ServiceMethods): UntypedServiceImplementation => {
    const handlers: UntypedServiceImplementation = {};
    for (const [name, work] of Object.entries(service.methods)) {
      handlers[name] = (
        call: ServerUnaryCall<unknown, unknown>,
        callback: sendUnaryData<unknown>,
      ) => {
        const refused = refusal(call.metadata);
        if (refused !== undefined) {
          callback(toServiceError(refused, {}));
          return;
        }
        if (call.request instanceof UnreadableRequest) {
          const { field, reason } = call.request;
          callback(
            service.fail(
              name,
              new HttpError(400, {
                errorCode: 'ERR_INVALID_ARGUMENT',
                field,
                message: `invalid ${field}: ${reason}`,
              }),
            ),
          );
          return;
        }
        const { signal, settled } = untilGone(call);
        const trailer = new Metadata();
        work(call.request as never, signal, trailer).then(
          (response) => {
            settled();
            callback(null, response, trailer);
          },
          (error: unknown) => {
            settled();
            if (!(error instanceof HttpError)) {
              options.onUnexpected(error);
              callback({ code: status.INTERNAL, details: 'internal error' });
              return;
            }
            callback(service.fail(name, error));
          },
        );
      };
    }
    for (const [name, work] of Object.entries(service.streams ?? {})) {
      handlers[name] = (call: ServerWritableStream<unknown, unknown>) => {
        // A status is sent by emitting it as the stream's error (grpc-js then ends the call).
        const refused = refusal(call.metadata);
        if (refused !== undefined) {
          call.emit('error', toServiceError(refused, {}));
          return;
        }
        if (call.request instanceof UnreadableRequest) {
          const { field, reason } = call.request;
          call.emit(
            'error',
            service.fail(
              name,
              new HttpError(400, {
                errorCode: 'ERR_INVALID_ARGUMENT',
                field,
                message: `invalid ${field}: ${reason}`,
              }),
            ),
          );
          return;
        }
        const { signal, settled } = untilGone(call);
        work(call.request as never, signal, (message) => {
          if (!signal.aborted) call.write(message);
        }).then(
          () => {
            settled();
            call.end();
          },
          (error: unknown) => {
            settled();
            if (!(error instanceof HttpError)) {
              options.onUnexpected(error);
              call.emit('error', { code: status.INTERNAL, details: 'internal error' });
              return;
            }
            call.emit('error', service.fail(name, error));
          },
        );
      };
    }
    return handlers;
  };

  server.addService(
    withStrictStrings(services.dapr, services.types),
    implement(daprService(ctx, { appId: options.appId, runtimeVersion: options.runtimeVersion })),
  );
  server.addService(
    withStrictStrings(services.locks, services.types),
    implement(locksService(ctx)),
  );
  const served = SERVED_DAPR_METHODS.join(', ');
  for (const method of UNSERVED_DAPR_METHODS) {
    const path = `/dapr.proto.runtime.v1.Dapr/${method}`;
    // A stream handler answers at once, whatever the method's shape (unary or streaming).
    server.register(
      path,
      (call: ServerDuplexStream<Buffer, Buffer>) => {
        const refused = refusal(call.metadata);
        call.emit(
          'error',
          refused !== undefined
            ? toServiceError(refused, {})
            : {
                code: status.UNIMPLEMENTED,
                details: `${path}: not served by fencelock, which serves only Dapr's lock and metadata methods (${served}) and fencelock.v1.Locks`,
              },
        );
      },
      (message: Buffer) => message,
      (bytes: Buffer) => bytes,
      'bidi',
    );
  }

  let closing: Promise<void> | undefined;
  return {
    listen(host, port) {
      const address = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
      return new Promise((resolve, reject) => {
        server.bindAsync(
          `${address}:${port}`,
          ServerCredentials.createInsecure(),
          (error, bound) => (error === null ? resolve(bound) : reject(error)),
        );
      });
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        const cutOff = setTimeout(() => server.forceShutdown(), SHUTDOWN_GRACE_MS);
        server.tryShutdown(() => {
          clearTimeout(cutOff);
          resolve();
        });
      });
      return closing;
    },
  };
}

/**
 * A signal aborted once the caller is gone: it cancels, or its deadline passes here (a grant that
 * lands after that would reach nobody; lock-operations.ts releases it if it can). `settled`
 * stops watching.
 */
function untilGone(call: {
  once(event: 'cancelled', listener: () => void): unknown;
  off(event: 'cancelled', listener: () => void): unknown;
  getDeadline(): { valueOf(): unknown };
}): { signal: AbortSignal; settled: () => void } {
  const gone = new AbortController();
  const onCancelled = () => gone.abort();
  call.once('cancelled', onCancelled);
  const leftMs = Number(call.getDeadline().valueOf()) - Date.now();
  const deadline = Number.isFinite(leftMs)
    ? setTimeout(onCancelled, Math.max(0, leftMs))
    : undefined;
  return {
    signal: gone.signal,
    settled: () => {
      call.off('cancelled', onCancelled);
      clearTimeout(deadline);
    },
  };
}

/** One metadata value as a string; several (or a binary one) as an array, which no check accepts. */
function single(values: readonly (string | Buffer)[]): string | readonly string[] | undefined {
  if (values.length === 0) return undefined;
  if (values.length === 1 && typeof values[0] === 'string') return values[0];
  return values.map(String);
}
