// What the sidecar load tests (bench/sidecar-load.mjs over HTTP, bench/sidecar-grpc-load.mjs over
// gRPC) share around their measurement: usage errors, integer options, and a run that cannot
// outlive its sidecar or hang CI.

/**
 * Report bad usage of `tool` and exit 2.
 * @param {string} tool the script's name, e.g. `sidecar-load`.
 * @param {string} message
 */
export function usageError(tool, message) {
  process.stderr.write(`${tool}: ${message} (--help lists the options)\n`);
  process.exit(2);
}

/**
 * A reader of whole-number options of `tool`: `integerOption(name, min, max)` returns the value
 * of `--name` from `values` (parseArgs' strings), or exits 2 naming the option and the range.
 */
export function integerOptions(tool, values) {
  return (name, min, max) => {
    const raw = values[name];
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || n < min || n > max) {
      usageError(
        tool,
        `--${name}: expected an integer in [${min}, ${max}], received ${JSON.stringify(raw)}`,
      );
    }
    return n;
  };
}

/** Whether the child process `proc` (undefined: not spawned) has not exited yet. */
export const running = (proc) =>
  proc !== undefined && proc.exitCode === null && proc.signalCode === null;

/**
 * Guard a run of `tool`: whatever ends this process (a throw, process.exit, SIGINT, SIGTERM)
 * kills the sidecar `sidecar()` returns, synchronously; and a run still going after `limitS`
 * seconds (an engine that stops answering, a sidecar that never listens or never exits) exits 1
 * instead of holding CI.
 * @returns the deadline timer, to clear once the run has finished.
 */
export function guardRun(tool, sidecar, limitS, limitDetail) {
  process.on('exit', () => {
    const child = sidecar();
    if (running(child)) child.kill('SIGKILL');
  });
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ]) {
    process.once(signal, () => {
      process.stderr.write(`${tool}: ${signal}: stopping\n`);
      process.exit(code);
    });
  }
  return setTimeout(() => {
    process.stderr.write(`${tool}: not finished after ${limitS} s${limitDetail}: giving up\n`);
    process.exit(1);
  }, limitS * 1000);
}
