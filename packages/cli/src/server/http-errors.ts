/**
 * How the sidecar answers errors: one JSON shape, `{ errorCode, message, field?, outcome? }`
 * (Dapr's error bodies also use `errorCode` and `message`), with a stable `errorCode` per case.
 * Bad input is always a 4xx; only an engine that cannot answer, a shutdown or a bug gives a 5xx.
 * fencelock's own routes answer with fencelock's codes; Dapr's routes answer with Dapr's
 * (`daprAnswer`, after the predefined error messages of Dapr's runtime).
 */
import type { FastifyError, FastifyReply } from 'fastify';
import {
  FencelockError,
  InvalidArgumentError,
  LockTimeoutError,
  PermitsMismatchError,
  QuorumError,
} from 'fencelock';
import {
  BODY_LIMIT_BYTES,
  ELECTION_BODY_LIMIT_BYTES,
  MULTI_KEY_BODY_LIMIT_BYTES,
} from './body-limits.js';

/** Every `errorCode` the sidecar answers with. */
export type SidecarErrorCode =
  | 'ERR_INVALID_ARGUMENT'
  | 'ERR_MALFORMED_REQUEST'
  | 'ERR_UNSUPPORTED_MEDIA_TYPE'
  | 'ERR_BODY_TOO_LARGE'
  | 'ERR_UNAUTHORIZED'
  | 'ERR_NOT_FOUND'
  | 'ERR_LOCK_STORE_NOT_FOUND'
  | 'ERR_LOCK_BUSY'
  | 'ERR_LOCK_TIMEOUT'
  | 'ERR_NOT_LOCK_OWNER'
  | 'ERR_LOCK_NOT_HELD'
  | 'ERR_PERMITS_MISMATCH'
  | 'ERR_BACKEND'
  | 'ERR_QUORUM'
  | 'ERR_TRY_LOCK'
  | 'ERR_UNLOCK'
  | 'ERR_SHUTTING_DOWN'
  | 'ERR_TOO_MANY_STREAMS'
  | 'ERR_HEALTH_NOT_READY'
  | 'ERR_INTERNAL';

/** The JSON body of an error answer. */
export interface ErrorBody {
  readonly errorCode: SidecarErrorCode;
  readonly message: string;
  /** The request field at fault (400). */
  readonly field?: string;
  /** The release / renew outcome (404, 409). */
  readonly outcome?: string;
  /** Dapr's unlock status (3: internal error), on the Dapr unlock route only. */
  readonly status?: number;
}

/** Which of Dapr's routes an answer is for. */
export type DaprOperation = 'lock' | 'unlock';

/**
 * `answer` in Dapr's terms, as Dapr's own HTTP API words it for the same case (the predefined
 * error messages and the lock API of Dapr's runtime):
 * - bad input (400 `ERR_INVALID_ARGUMENT`, including malformed JSON) → 400
 *   `ERR_MALFORMED_REQUEST`, still naming the `field`;
 * - an engine failure or another error of the store (any 5xx but a shutdown) → 500
 *   `ERR_TRY_LOCK` ("failed to try acquiring lock: …") on lock, 500 `ERR_UNLOCK` ("failed to
 *   release lock: …") with `status: 3` (Dapr's `INTERNAL_ERROR`) on unlock;
 * - anything else (401, 413, 503 `ERR_SHUTTING_DOWN`, `ERR_LOCK_STORE_NOT_FOUND`) as it is.
 * Without `operation` (an error outside the store call: a hook, a bug) a 5xx is left as it is.
 * Idempotent.
 */
export function daprAnswer(answer: HttpError, operation?: DaprOperation): HttpError {
  const { statusCode, body } = answer;
  if (statusCode === 400 && body.errorCode === 'ERR_INVALID_ARGUMENT') {
    return new HttpError(400, { ...body, errorCode: 'ERR_MALFORMED_REQUEST' });
  }
  if (
    statusCode < 500 ||
    operation === undefined ||
    ['ERR_SHUTTING_DOWN', 'ERR_TRY_LOCK', 'ERR_UNLOCK'].includes(body.errorCode)
  ) {
    return answer;
  }
  return operation === 'lock'
    ? new HttpError(500, {
        errorCode: 'ERR_TRY_LOCK',
        message: `failed to try acquiring lock: ${body.message}`,
      })
    : new HttpError(500, {
        errorCode: 'ERR_UNLOCK',
        message: `failed to release lock: ${body.message}`,
        status: 3,
      });
}

/** An answer other than 200, thrown by handlers and sent by the app's error handler. */
export class HttpError extends Error {
  readonly statusCode: number;
  readonly body: ErrorBody;

  constructor(statusCode: number, body: ErrorBody) {
    super(body.message);
    this.name = 'HttpError';
    this.statusCode = statusCode;
    this.body = body;
  }
}

const UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A request body as text, or the 400 answer when it is not valid UTF-8. A lenient decoding
 * would turn every invalid byte into U+FFFD, so that two different byte strings (`k\xFF` and
 * `k\xFE`) named one lock key or one owner.
 */
export function utf8Body(body: Buffer): string | HttpError {
  try {
    return UTF8.decode(body);
  } catch {
    return new HttpError(400, {
      errorCode: 'ERR_INVALID_ARGUMENT',
      field: 'body',
      message: 'invalid body: expected JSON in UTF-8, received bytes that are not valid UTF-8',
    });
  }
}

/** 400 naming `field`, the allowed range and what was received. */
export function invalidField(field: string, allowed: string, received: unknown): HttpError {
  return new HttpError(400, {
    errorCode: 'ERR_INVALID_ARGUMENT',
    field,
    message: `invalid ${field}: expected ${allowed}, received ${describe(received)}`,
  });
}

/**
 * Map an error from the Locker to an answer. `fields` renames core argument names to the
 * route's field names (e.g. `ttlMs` → `expiryInSeconds`); `allowed` words a field's range.
 * `shuttingDown` turns a cancelled wait into 503.
 */
export function fromLockError(
  error: unknown,
  fields: Readonly<Record<string, string>>,
  allowed: (field: string) => string,
  shuttingDown: boolean,
): HttpError {
  if (error instanceof HttpError) return error;
  if (shuttingDown && (error instanceof LockTimeoutError || isClosedLocker(error))) {
    return new HttpError(503, {
      errorCode: 'ERR_SHUTTING_DOWN',
      message: 'the sidecar is shutting down',
    });
  }
  if (error instanceof InvalidArgumentError) {
    const field = fields[error.argument] ?? error.argument;
    return invalidField(field, allowed(field), error.received);
  }
  if (error instanceof LockTimeoutError && !error.engineAnswered) {
    // No attempt was answered: the store did not answer in time, which is not a busy lock.
    return new HttpError(503, { errorCode: 'ERR_BACKEND', message: strip(error.message) });
  }
  if (error instanceof LockTimeoutError) {
    return new HttpError(409, {
      errorCode: 'ERR_LOCK_TIMEOUT',
      message: error.sawHolder
        ? `${strip(error.message)} (held by another owner)`
        : strip(error.message),
    });
  }
  if (error instanceof QuorumError) {
    return new HttpError(503, { errorCode: 'ERR_QUORUM', message: strip(error.message) });
  }
  if (error instanceof PermitsMismatchError) {
    return new HttpError(409, { errorCode: 'ERR_PERMITS_MISMATCH', message: strip(error.message) });
  }
  if (error instanceof FencelockError) {
    return new HttpError(503, { errorCode: 'ERR_BACKEND', message: strip(error.message) });
  }
  return new HttpError(500, {
    errorCode: 'ERR_INTERNAL',
    message: 'internal error',
  });
}

/**
 * Map fastify's own errors (schema validation, body parsing, content type) to an answer.
 * Returns undefined for anything else.
 */
export function fromFastifyError(
  error: FastifyError,
  allowed: (field: string) => string,
): HttpError | undefined {
  if (error.validation && error.validation.length > 0) {
    const first = error.validation[0]!;
    const params = first.params as Record<string, unknown>;
    // `/grants/0/fencingToken` → `grants[0].fencingToken`, as the operations name fields.
    const path = first.instancePath
      .split('/')
      .slice(1)
      .map((part) => (/^\d+$/.test(part) ? `[${part}]` : `.${part}`))
      .join('')
      .replace(/^\./, '');
    const inPath = (name: unknown) => (path === '' ? String(name) : `${path}.${String(name)}`);
    const field =
      first.keyword === 'required'
        ? inPath(params.missingProperty)
        : first.keyword === 'additionalProperties'
          ? inPath(params.additionalProperty)
          : path || (error.validationContext ?? 'body');
    if (first.keyword === 'additionalProperties') {
      return new HttpError(400, {
        errorCode: 'ERR_INVALID_ARGUMENT',
        field,
        message: `invalid ${field}: not a field of this request`,
      });
    }
    const received = first.keyword === 'required' ? undefined : (first as { data?: unknown }).data;
    return invalidField(field, allowed(field), received);
  }
  if (error.statusCode === 415) {
    return new HttpError(415, {
      errorCode: 'ERR_UNSUPPORTED_MEDIA_TYPE',
      message: 'send the body as JSON with Content-Type: application/json',
    });
  }
  if (error.statusCode === 413) {
    return new HttpError(413, {
      errorCode: 'ERR_BODY_TOO_LARGE',
      message: `request body too large: at most ${BODY_LIMIT_BYTES} bytes (${MULTI_KEY_BODY_LIMIT_BYTES} on acquire-all and release-all), ${ELECTION_BODY_LIMIT_BYTES} on an election's campaign and proclaim`,
    });
  }
  if (error.statusCode === 400) {
    // Malformed JSON (NaN, trailing commas…), an empty JSON body, a bad URL encoding.
    return new HttpError(400, {
      errorCode: 'ERR_INVALID_ARGUMENT',
      field: 'body',
      message: `invalid body: ${error.message}`,
    });
  }
  return undefined;
}

/** Send `error` as its JSON answer. */
export function sendError(reply: FastifyReply, error: HttpError): FastifyReply {
  if (error.statusCode === 401) reply.header('www-authenticate', 'Bearer realm="fencelock"');
  return reply.code(error.statusCode).type('application/json').send(error.body);
}

function isClosedLocker(error: unknown): boolean {
  return error instanceof InvalidArgumentError && error.argument === 'locker';
}

/** Messages go to HTTP callers without the library's `fencelock: ` prefix. */
function strip(message: string): string {
  return message.replace(/^fencelock: /, '');
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (typeof value === 'string') {
    return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  }
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) {
    return String(value);
  }
  return Array.isArray(value)
    ? 'an array'
    : typeof value === 'object'
      ? 'an object'
      : String(value);
}
