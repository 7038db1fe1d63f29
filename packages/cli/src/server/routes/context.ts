/** What the route handlers share: the locker, settings, and the shutdown signal. */
import type { FastifyRequest } from 'fastify';
import type { Locker } from 'fencelock';
import type { HttpError } from '../http-errors.js';

/** Passed to every route module by the app. */
export interface RouteContext {
  /** The locker every handler calls; handlers hold no lock state of their own. */
  readonly locker: Locker;
  /** Store name accepted in Dapr's paths. */
  readonly storeName: string;
  /** Longest `waitMs` a caller may ask for, ms. */
  readonly maxWaitMs: number;
  /** Aborted when the sidecar starts shutting down: waiting acquires end with 503. */
  readonly shutdown: AbortSignal;
  /** The allowed range of a request field, for 400 answers. */
  readonly allowed: (field: string) => string;
  /**
   * The answer (in fencelock's codes) to an error thrown while serving `request`: an HttpError
   * as it is, fastify's validation and body errors mapped, anything else a logged 500. Route
   * scopes with their own error handler (Dapr's) start from it.
   */
  readonly answer: (error: unknown, request: FastifyRequest) => HttpError;
}
