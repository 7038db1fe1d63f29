/**
 * Strict UTF-8 for the string fields of gRPC requests, as the HTTP side has for JSON bodies
 * (`utf8Body` in http-errors.ts): protobufjs decodes invalid bytes in a string as U+FFFD, so two
 * different byte strings (`k\xFF` and `k\xFE`) would name one lock key or one owner. Proto3 says
 * a string field holds valid UTF-8; this checks it before decoding.
 *
 * The string fields are read from the request type, and those of its message fields (ReleaseAll's
 * `grants`) from their types, looked up in the package definition; the other length-delimited
 * fields (unknown to this version) are skipped.
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

/** Message types of a package definition by full name (`fencelock.v1.GrantRef`). */
export type MessageTypes = Readonly<Record<string, unknown>>;

/** `service` with request decoders that answer `UnreadableRequest` instead of throwing. */
export function withStrictStrings(
  service: ServiceDefinition,
  types: MessageTypes = {},
): ServiceDefinition {
  const strict: Record<string, ServiceDefinition[string]> = {};
  for (const [name, method] of Object.entries(service)) {
    const pkg = method.path.slice(1, method.path.lastIndexOf('.'));
    const requestType = (method as { requestType?: unknown }).requestType;
    const fields = stringFields(descriptorOf(requestType), pkg, types, new Map());
    strict[name] = {
      ...method,
      requestDeserialize: (bytes: Buffer) => {
        const bad = firstInvalidString(bytes, fields, '');
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

/** The string fields of a message type, and its message fields with theirs (by field number). */
interface StringFields {
  readonly fields: Map<number, { readonly name: string; readonly repeated: boolean }>;
  readonly messages: Map<
    number,
    { readonly name: string; readonly repeated: boolean; readonly type: StringFields }
  >;
}

/**
 * The first known string field (nested messages included) whose bytes are not UTF-8, named as in
 * the .proto with its place (`grants[1].fencing_token`), or the whole request when the bytes are
 * not a well-formed message (a length past the end would otherwise be decoded from what is
 * there, U+FFFD included). Unknown fields are skipped unread, as proto3 asks of a reader.
 */
function firstInvalidString(
  bytes: Uint8Array,
  type: StringFields,
  prefix: string,
): UnreadableRequest | undefined {
  const seen = new Map<number, number>();
  const place = (number: number, name: string, repeated: boolean) => {
    const index = seen.get(number) ?? 0;
    seen.set(number, index + 1);
    return `${prefix}${name}${repeated ? `[${index}]` : ''}`;
  };
  try {
    const reader = protobuf.Reader.create(bytes);
    while (reader.pos < reader.len) {
      const tag = reader.uint32();
      const wireType = tag & 7;
      const number = tag >>> 3;
      const string = type.fields.get(number);
      const message = type.messages.get(number);
      if (wireType === 2 && string !== undefined) {
        const name = place(number, string.name, string.repeated);
        if (!isUtf8(reader.bytes())) {
          return new UnreadableRequest(
            name,
            'expected valid UTF-8, received bytes that are not UTF-8',
          );
        }
      } else if (wireType === 2 && message !== undefined) {
        const name = place(number, message.name, message.repeated);
        const bad = firstInvalidString(reader.bytes(), message.type, `${name}.`);
        if (bad !== undefined) return bad;
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

interface FieldDescriptor {
  readonly name: string;
  readonly number: number;
  readonly type: string;
  readonly typeName?: string;
  readonly label?: string;
}

/** The descriptor of a message type of proto-loader (`{ type: DescriptorProto }`). */
function descriptorOf(messageType: unknown): readonly FieldDescriptor[] {
  const type = (messageType as { type?: { field?: unknown } } | undefined)?.type;
  return (type?.field ?? []) as readonly FieldDescriptor[];
}

/**
 * The string and message fields of a type, names in the .proto's snake_case; nested message
 * types are looked up in `types` (relative names in the package `pkg` first).
 */
function stringFields(
  fields: readonly FieldDescriptor[],
  pkg: string,
  types: MessageTypes,
  done: Map<readonly FieldDescriptor[], StringFields>,
): StringFields {
  const known = done.get(fields);
  if (known !== undefined) return known;
  const result: StringFields = { fields: new Map(), messages: new Map() };
  done.set(fields, result);
  for (const f of fields) {
    const name = f.name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    const repeated = f.label === 'LABEL_REPEATED';
    if (f.type === 'TYPE_STRING') result.fields.set(f.number, { name, repeated });
    if (f.type === 'TYPE_MESSAGE' && f.typeName) {
      const typeName = f.typeName.replace(/^\./, '');
      const nested = types[`${pkg}.${typeName}`] ?? types[typeName];
      if (nested === undefined) continue;
      const type = stringFields(descriptorOf(nested), pkg, types, done);
      result.messages.set(f.number, { name, repeated, type });
    }
  }
  return result;
}
