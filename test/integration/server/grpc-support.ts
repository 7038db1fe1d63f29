/**
 * gRPC clients of the sidecar for tests, built by @grpc/proto-loader from the .proto files the
 * package ships (`packages/cli/proto`), as a user of any language would generate theirs: Dapr's
 * runtime service and `fencelock.v1.Locks`, over real sockets.
 */
import {
  type CallOptions,
  type Client,
  type ClientUnaryCall,
  credentials,
  type GrpcObject,
  loadPackageDefinition,
  Metadata,
  type ServiceClientConstructor,
  type ServiceError,
  type StatusObject,
} from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { ROOT } from './support.js';

/** The folder of the shipped .proto files. */
export const PROTO_ROOT = `${ROOT}packages/cli/proto`;

const definition = loadPackageDefinition(
  loadSync(['dapr/runtime/v1/dapr_lock.proto', 'fencelock/v1/locks.proto'], {
    includeDirs: [PROTO_ROOT],
    keepCase: false,
    longs: String,
    enums: Number,
    defaults: true,
    oneofs: true,
  }),
);

function clientClass(path: string): ServiceClientConstructor {
  let node: unknown = definition;
  for (const part of path.split('.')) node = (node as GrpcObject)[part];
  return node as ServiceClientConstructor;
}

/** Clients of both services at `address` (`host:port`). */
export interface GrpcClients {
  readonly locks: Client;
  readonly dapr: Client;
  close(): void;
}

export function grpcClients(address: string): GrpcClients {
  const locks = new (clientClass('fencelock.v1.Locks'))(address, credentials.createInsecure());
  const dapr = new (clientClass('dapr.proto.runtime.v1.Dapr'))(
    address,
    credentials.createInsecure(),
  );
  return {
    locks,
    dapr,
    close() {
      locks.close();
      dapr.close();
    },
  };
}

/** Options of one call. */
export interface UnaryOptions {
  /** Sent as `dapr-api-token`. */
  readonly token?: string;
  /** Extra metadata entries. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** The call's deadline, ms from now. */
  readonly deadlineMs?: number;
  /** Cancels the call. */
  readonly signal?: AbortSignal;
}

/** A method of a client that proto-loader built: request, metadata, options, callback. */
type UnaryMethod = (
  request: object,
  metadata: Metadata,
  options: CallOptions,
  // biome-ignore lint/suspicious/noExplicitAny: see UnaryAnswer
  callback: (error: ServiceError | null, response: any) => void,
) => ClientUnaryCall;

/** A successful answer: the response and the trailing metadata. */
export interface UnaryAnswer {
  // biome-ignore lint/suspicious/noExplicitAny: test assertions read arbitrary message fields
  readonly response: any;
  readonly trailer: Metadata;
}

/** Call `method` on `client`; rejects with the `ServiceError` of a non-OK status. */
export function unary(
  client: Client,
  method: string,
  request: object,
  options: UnaryOptions = {},
): Promise<UnaryAnswer> {
  const metadata = new Metadata();
  if (options.token !== undefined) metadata.set('dapr-api-token', options.token);
  for (const [k, v] of Object.entries(options.metadata ?? {})) metadata.set(k, v);
  const callOptions: CallOptions =
    options.deadlineMs === undefined ? {} : { deadline: Date.now() + options.deadlineMs };
  return new Promise((resolve, reject) => {
    // grpc-js calls back before it emits the status (with the trailers): settle on the status.
    let settle: ((trailer: Metadata) => void) | undefined;
    const fn = (client as unknown as Record<string, UnaryMethod>)[method]!;
    const call = fn.call(
      client,
      request,
      metadata,
      callOptions,
      // biome-ignore lint/suspicious/noExplicitAny: see UnaryAnswer
      (error: ServiceError | null, response: any) => {
        settle = (trailer) => (error === null ? resolve({ response, trailer }) : reject(error));
      },
    );
    call.on('status', (status: StatusObject) => settle?.(status.metadata));
    options.signal?.addEventListener('abort', () => call.cancel(), { once: true });
  });
}

/** The gRPC error of a call that must fail: code, message and the sidecar's trailers. */
export async function failure(
  answer: Promise<unknown>,
): Promise<{ code: number; details: string; errorCode?: string; field?: string }> {
  try {
    await answer;
  } catch (error) {
    const e = error as ServiceError;
    const errorCode = e.metadata?.get('fencelock-error-code')[0];
    const field = e.metadata?.get('fencelock-field')[0];
    return {
      code: e.code,
      details: e.details,
      ...(errorCode === undefined ? {} : { errorCode: String(errorCode) }),
      ...(field === undefined ? {} : { field: String(field) }),
    };
  }
  throw new Error('the call succeeded');
}
