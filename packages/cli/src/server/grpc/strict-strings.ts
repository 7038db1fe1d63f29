/**
 * Strict UTF-8 for the string fields of gRPC requests, as the HTTP side has for JSON bodies
 * (`utf8Body` in http-errors.ts): protobufjs decodes invalid bytes in a string as U+FFFD, so two
 * different byte strings (`k\xFF` and `k\xFE`) would name one lock key or one owner. Proto3 says
 * a string field holds valid UTF-8; this checks it before decoding.
 *
 * Every request message of the sidecar's services is flat (strings and integers only): the
 * string fields are read from the request type, and the other length-delimited fields (unknown
 * to this version) are skipped.
 */
import { isUtf8 } from 'node:buffer';
import type { ServiceDefinition } from '@grpc/grpc-js';
import protobuf from 'protobufjs';

/**
 * A request that cannot be read: a string field (named as in the .proto) that is not valid
 * UTF-8, or (`field` "request") bytes that are not a well-formed message of the request type.
 * Answered INVALID_ARGUMENT, never the INTERNAL grpc-js gives a decoder that throws.
 */
export class UnreadableRequest {
  readonly field: string;
  readonly reason: string;

  constructor(field: string, reason: string) {
    this.field = field;
    this.reason = reason;
  }
}

/** `service` with request decoders that answer `UnreadableRequest` instead of throwing. */
export function withStrictStrings(service: ServiceDefinition): ServiceDefinition {
  const strict: Record<string, ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(service)) {
    const names = fieldNames(method);
    strict[name] = {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        const bad = firstInvalidString(bytes, names);
        if (bad !== undefined) return bad;
        try {
          return method.requestDeserialize(bytes);
        } catch (error) {
          return new UnreadableRequest(
            'request',
            `not a ${name} request (${(error as Error).message})`,
          );
        }
      },
    };
  }
  return strict as ServiceDefinition;
}

/**
 * The first known string field whose bytes are not UTF-8, or the whole request when the bytes
 * are not a well-formed message (a length past the end would otherwise be decoded from what is
 * there, U+FFFD included). Unknown fields are skipped unread, as proto3 asks of a reader.
 */
function firstInvalidString(
  bytes: Buffer,
  names: ReadonlyMap<number, string>,
): UnreadableRequest | undefined {
  try {
    const reader = protobuf.Reader.create(bytes);
    while (reader.pos < reader.len) {
      const tag = reader.uint32();
      const wireType = tag & 7;
      const name = names.get(tag >>> 3);
      if (wireType === 2 && name !== undefined) {
        if (!isUtf8(reader.bytes())) {
          return new UnreadableRequest(
            name,
            'expected valid UTF-8, received bytes that are not UTF-8',
          );
        }
      } else {
        reader.skipType(wireType);
      }
    }
  } catch (error) {
    return new UnreadableRequest(
      'request',
      `not a well-formed message (${(error as Error).message})`,
    );
  }
  return undefined;
}

/** Numbers of a method's string fields → their names in the .proto (snake_case). */
function fieldNames(method: object): Map<number, string> {
  const type = (method as { requestType?: { type?: { field?: unknown } } }).requestType?.type;
  const fields = (type?.field ?? []) as readonly { name: string; number: number; type: string }[];
  return new Map(
    fields
      .filter((f) => f.type === 'TYPE_STRING')
      .map((f) => [f.number, f.name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)]),
  );
}
