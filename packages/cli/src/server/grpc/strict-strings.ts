/**
 * Strict UTF-8 for the string fields of gRPC requests, as the HTTP side has for JSON bodies
 * (`utf8Body` in http-errors.ts): protobufjs decodes invalid bytes in a string as U+FFFD, so two
 * different byte strings (`k\xFF` and `k\xFE`) would name one lock key or one owner. Proto3 says
 * a string field holds valid UTF-8; this checks it before decoding.
 *
 * Every request message of the sidecar's services is flat (strings and integers only), so each
 * length-delimited field at the top level is a string.
 */
import { isUtf8 } from 'node:buffer';
import type { ServiceDefinition } from '@grpc/grpc-js';
import protobuf from 'protobufjs';

/** A request whose string field `field` (named as in the .proto) is not valid UTF-8. */
export class InvalidUtf8Request {
  readonly field: string;

  constructor(field: string) {
    this.field = field;
  }
}

/** `service` with request decoders that answer `InvalidUtf8Request` for invalid UTF-8. */
export function withStrictStrings(service: ServiceDefinition): ServiceDefinition {
  const strict: Record<string, ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(service)) {
    const names = fieldNames(method);
    strict[name] = {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        const bad = firstInvalidString(bytes);
        return bad === undefined
          ? method.requestDeserialize(bytes)
          : new InvalidUtf8Request(names.get(bad) ?? `field ${bad}`);
      },
    };
  }
  return strict as ServiceDefinition;
}

/** The number of the first length-delimited field whose bytes are not UTF-8, if any. */
function firstInvalidString(bytes: Buffer): number | undefined {
  try {
    const reader = protobuf.Reader.create(bytes);
    while (reader.pos < reader.len) {
      const tag = reader.uint32();
      const wireType = tag & 7;
      if (wireType === 2) {
        if (!isUtf8(reader.bytes())) return tag >>> 3;
      } else {
        reader.skipType(wireType);
      }
    }
  } catch {
    // Not a well-formed message: the decoder itself refuses it.
  }
  return undefined;
}

/** Field numbers of a method's request type → their names in the .proto (snake_case). */
function fieldNames(method: object): Map<number, string> {
  const type = (method as { requestType?: { type?: { field?: unknown } } }).requestType?.type;
  const fields = (type?.field ?? []) as readonly { name: string; number: number }[];
  return new Map(
    fields.map((f) => [f.number, f.name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)]),
  );
}
