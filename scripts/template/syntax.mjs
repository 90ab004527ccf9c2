// Whether every file of a generated copy that has a syntax parses, each by
// the tool that owns it:
// - shell (by its name, or its `#!` line) by `bash -n` and shellcheck;
// - JavaScript by `node --check`; TOML by Python's tomllib and, for
//   wrangler.toml, wrangler's own reader; JSON and YAML parsed;
// - the Makefile by `make -n` over its targets, the recipes it prints by
//   `sh -n`;
// and that no `needs:` marker is left anywhere. A file already checked with
// the same text is not checked again (`seen`): thirty copies take seconds.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { parseAllDocuments } from "yaml";

import { walk } from "./refs.mjs";

const BINARY = /\.(png|wasm)$/;
const MARKER = /^\s*(\/\/|#|--|<!--) needs( one of)?: /m;

/** Runs `cmd`; its output when it fails (or its exit status, if it says nothing), else null. */
function failure(cmd, args, options = {}) {
  const run = spawnSync(cmd, args, { encoding: "utf8", ...options });
  if (run.error) throw new Error(`${cmd}: ${run.error.message} (make test's setup-template installs shellcheck; python3 is 3.11 or newer)`);
  if (run.status === 0) return null;
  return `${run.stdout}${run.stderr}`.trim() || `${cmd} exited ${run.status ?? run.signal}`;
}

/** Whether a file is a shell script: by its name, or by its `#!` line (`.ci/run`). */
const isShell = (file, text) => /\.sh$/.test(file) || /^#!.*\b(sh|bash)\b/.test(text);

/** TOML files parsed by Python's tomllib, in one run: `file: error` lines. */
function tomlErrors(dir, files) {
  const script = [
    "import sys, tomllib",
    "for f in sys.argv[1:]:",
    "    try:",
    "        tomllib.load(open(f, 'rb'))",
    "    except Exception as e:",
    "        print(f'{f}: {e}')",
  ].join("\n");
  return execFileSync("python3", ["-c", script, ...files], { cwd: dir, encoding: "utf8" })
    .split("\n")
    .filter(Boolean);
}

/**
 * `file: what` for each file of the copy in `dir` that does not parse or
 * keeps a `needs:` marker. `seen` (a Set) carries checked texts across calls.
 */
export async function syntaxErrors(dir, seen = new Set()) {
  const files = walk(dir).filter((file) => !file.endsWith("/") && !BINARY.test(file));
  const errors = [];
  const fresh = (file, text) => {
    const key = `${file.split(".").at(-1)}:${createHash("sha256").update(text).digest("hex")}`;
    if (seen.has(key)) return false;
    seen.add(key);
    return true;
  };
  const shells = [];
  const tomls = [];
  for (const file of files) {
    const text = readFileSync(join(dir, file), "utf8");
    if (MARKER.test(text)) errors.push(`${file}: a needs: marker is left: ${text.match(MARKER)[0].trim()}`);
    if (!fresh(file, text)) continue;
    const at = (what) => what && errors.push(`${file}: ${what}`);
    if (isShell(file, text)) {
      at(failure("bash", ["-n", file], { cwd: dir }));
      shells.push(file);
    } else if (/\.(mjs|cjs|js)$/.test(file)) {
      at(failure(process.execPath, ["--check", file], { cwd: dir }));
    } else if (/\.json$/.test(file)) {
      try {
        JSON.parse(text);
      } catch (e) {
        at(e.message);
      }
    } else if (/\.ya?ml$/.test(file)) {
      for (const doc of parseAllDocuments(text)) for (const e of doc.errors ?? []) at(e.message);
    } else if (/\.toml$/.test(file)) {
      tomls.push(file);
    }
  }
  if (shells.length) {
    const out = failure("shellcheck", ["--severity=warning", "--format=gcc", ...shells], { cwd: dir });
    if (out) errors.push(...out.split("\n"));
  }
  if (tomls.length) errors.push(...tomlErrors(dir, tomls));
  if (files.includes("wrangler.toml")) {
    // wrangler's own reader: the copy's bindings, vars and triggers as wrangler takes them.
    const { unstable_readConfig } = await import("wrangler");
    try {
      unstable_readConfig({ config: join(dir, "wrangler.toml") }, { hideWarnings: true });
    } catch (e) {
      errors.push(`wrangler.toml: ${e.message}`);
    }
  }
  if (files.includes("Makefile")) {
    // Every target it declares, dry run: a prerequisite with no rule fails,
    // and the recipes' shell, as make would run it, must parse.
    const phony = readFileSync(join(dir, "Makefile"), "utf8").match(/^\.PHONY:(.*)$/m)?.[1].trim().split(/\s+/) ?? [];
    const run = spawnSync("make", ["-n", "-s", "--no-print-directory", ...phony], { cwd: dir, encoding: "utf8", env: { ...process.env, MAKEFLAGS: "" } });
    if (run.status !== 0) {
      errors.push(`Makefile: ${run.stderr.split("\n").filter((line) => /\*\*\*|error/i.test(line)).join("; ") || `make exited ${run.status}`}`);
    } else {
      const out = failure("sh", ["-n"], { input: run.stdout });
      if (out) errors.push(`Makefile: a recipe's shell does not parse: ${out}`);
    }
  }
  return errors;
}
