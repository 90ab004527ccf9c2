// What dev-check.mjs and copy-rate.mjs share: a copy's make dev runner
// (spawned by the caller, output piped) waited for until it serves.

/**
 * Resolves once `runner` says it is ready; rejects, with its last output,
 * if it exits first or takes longer than `minutes`.
 */
export function ready(runner, minutes) {
  return new Promise((resolve, reject) => {
    let output = "";
    const timer = setTimeout(() => reject(new Error(`make dev not ready in ${minutes} min:\n${output.slice(-2000)}`)), minutes * 60_000);
    const onData = (chunk) => {
      output += chunk;
      if (/Ready on http/.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    runner.stdout.on("data", onData);
    runner.stderr.on("data", onData);
    runner.on("exit", () => reject(new Error(`make dev exited:\n${output.slice(-2000)}`)));
  });
}
