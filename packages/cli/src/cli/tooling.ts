/**
 * `@fencelock/cli/tooling`: what a command-line program needs to behave like `fencelock` —
 * option checks that throw `UsageError` (exit code 2), `runProgram` (exit codes and one-line,
 * password-redacted messages) and `findInRepository`. The repository's demos and torture harness
 * are built on it; it is not needed to use the `fencelock` binary or the sidecar.
 */

export { findInRepository } from './repository.js';
export { runProgram } from './run-program.js';
export {
  parseIntegerOption,
  parseKeyArgument,
  parseStoreOption,
  UsageError,
} from './usage.js';
