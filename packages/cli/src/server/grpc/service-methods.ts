/**
 * What a gRPC service of the sidecar hands to the server: the work of each method (unary or
 * server-streaming), and its errors.
 */
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

/**
 * A server-streaming call's work: the request, a signal aborted when the caller cancels (or its
 * deadline passes), and `write` for each message. The stream ends (OK) when the work resolves;
 * it throws `HttpError`s of the sidecar, which end the stream with their status.
 */
export type StreamWork = (
  request: never,
  signal: AbortSignal,
  write: (message: unknown) => void,
) => Promise<void>;

/** A service's methods: the work of each, and how its errors are answered. */
export interface ServiceMethods {
  readonly methods: Readonly<Record<string, UnaryWork>>;
  /** Its server-streaming methods. */
  readonly streams?: Readonly<Record<string, StreamWork>>;
  /** The gRPC error of a sidecar error thrown by `method`. */
  readonly fail: (method: string, error: HttpError) => Partial<ServiceError>;
}
