/**
 * The .proto files the gRPC services are built from, shipped in the package (`proto/`) so that
 * any language's toolchain can generate a client from the same files:
 * - `dapr/runtime/v1/dapr_lock.proto`: the part of Dapr's runtime service fencelock serves;
 * - `fencelock/v1/locks.proto`: fencelock's own lock service.
 * Loaded with @grpc/proto-loader: fields in lowerCamelCase (as protobuf's JSON names), 64-bit
 * integers as strings, enums as numbers, absent fields as their defaults (`''`, `0`).
 */
import { fileURLToPath } from 'node:url';
import { type GrpcObject, loadPackageDefinition, type ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type Options } from '@grpc/proto-loader';

/** The folder holding the shipped .proto files (`packages/cli/proto`, from src/ or dist/). */
export const PROTO_ROOT = fileURLToPath(new URL('../../../proto/', import.meta.url));

/** Paths of the shipped .proto files under `PROTO_ROOT`. */
export const PROTO_FILES = {
  dapr: 'dapr/runtime/v1/dapr_lock.proto',
  locks: 'fencelock/v1/locks.proto',
} as const;

/** Options of `loadSync`, shared with the tests' clients. */
export const LOADER_OPTIONS: Options = {
  keepCase: false,
  longs: String,
  enums: Number,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTO_ROOT],
};

/**
 * The service definitions of Dapr's runtime service and fencelock.v1.Locks, and every message
 * type by full name (for the strict decoding of nested messages, strict-strings.ts).
 */
export function loadServices(): {
  readonly dapr: ServiceDefinition;
  readonly locks: ServiceDefinition;
  readonly types: Readonly<Record<string, unknown>>;
} {
  const definition = loadSync([PROTO_FILES.dapr, PROTO_FILES.locks], LOADER_OPTIONS);
  const root = loadPackageDefinition(definition);
  const service = (path: string): ServiceDefinition => {
    let node: unknown = root;
    for (const part of path.split('.')) node = (node as GrpcObject)[part];
    return (node as { service: ServiceDefinition }).service;
  };
  return {
    dapr: service('dapr.proto.runtime.v1.Dapr'),
    locks: service('fencelock.v1.Locks'),
    types: definition,
  };
}
