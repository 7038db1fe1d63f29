/** What a gRPC service of the sidecar hands to the server: the work of each method, and its errors. */
import type { Metadata, ServiceError } from '@grpc/grpc-js';
import type { HttpError } from '../http-errors.js';

/**
 * A unary call's work: the request, a signal aborted when the caller cancels (or its deadline
 * passes), and trailing metadata it may fill. Throws `HttpError`s of the sidecar.
 */
export type UnaryWork = (
  request: never,
  signal: AbortSignal,
  trailer: Metadata,
) => Promise<unknown>;

/** A service's methods: the work of each, and how its errors are answered. */
export interface ServiceMethods {
  readonly methods: Readonly<Record<string, UnaryWork>>;
  /** The gRPC error of a sidecar error thrown by `method`. */
  readonly fail: (method: string, error: HttpError) => Partial<ServiceError>;
}
