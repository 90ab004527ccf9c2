// What dev-check.mjs and copy-rate.mjs share: a copy's make dev runner
// (spawned by the caller, output piped) waited for until it serves.

/**
 * Resolves once `runner` says it is ready; rejects, with its last output,
 * if it exits first or takes longer than `minutes`. Once ready, its output
 * is only drained.
 */
export function ready(runner, minutes) {
  return new Promise((resolve, reject) => {
    let output = "";
    const fail = (why) => {
      clearTimeout(timer);
      reject(new Error(`${why}:\n${output.slice(-2000)}`));
    };
    const timer = setTimeout(() => fail(`make dev not ready in ${minutes} min`), minutes * 60_000);
    timer.unref();
    const onData = (chunk) => {
      output = (output + chunk).slice(-4000);
      if (!/Ready on http/.test(output)) return;
      clearTimeout(timer);
      for (const stream of [runner.stdout, runner.stderr]) {
        stream.off("data", onData);
        stream.resume();
      }
      resolve();
    };
    runner.stdout.on("data", onData);
    runner.stderr.on("data", onData);
    runner.on("exit", () => fail("make dev exited"));
  });
}
