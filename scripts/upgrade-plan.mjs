// What `make upgrade` says before it acts (scripts/upgrade.mjs): the
// versions, the CHANGELOG entries between them, the engine files it will
// replace, add or remove, the migrations it will append, and what the owner
// must do. Pure functions of texts and lists, so they are unit-tested.

/** `x.y.z[-pre][+build]` as `[x, y, z, pre]` (`pre` "" for none); `null` if it is not one. */
export function semver(version) {
  const match = /^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$/.exec(version ?? "");
  return match ? [...match.slice(1, 4).map(Number), match[4] ?? ""] : null;
}

/** -1, 0 or 1 as `a` is older than, the same as, or newer than `b`; a pre-release comes before its release. */
export function compare(a, b) {
  const [x, y] = [semver(a), semver(b)];
  if (!x || !y) throw new Error(`not a version: ${x ? b : a}`);
  for (let i = 0; i < 3; i++) if (x[i] !== y[i]) return x[i] < y[i] ? -1 : 1;
  if (x[3] === y[3]) return 0;
  if (!x[3] || !y[3]) return x[3] ? -1 : 1;
  return x[3].localeCompare(y[3], "en", { numeric: true }) < 0 ? -1 : 1;
}

/**
 * The CHANGELOG's entries newer than `from`, up to `to`, newest first:
 * each `{ version, text }`, `text` being its `## [x.y.z]` section whole.
 */
export function entriesBetween(changelog, from, to) {
  const sections = changelog.split(/^(?=## \[)/m).filter((text) => text.startsWith("## ["));
  // The link definitions at the file's end belong to no entry.
  const text = (section) => section.replace(/^\[[^\]]+\]: .*$/gm, "").trimEnd();
  return sections
    .map((section) => ({ version: /^## \[([^\]]+)\]/.exec(section)[1], text: text(section) }))
    .filter(({ version }) => semver(version) && compare(version, from) > 0 && compare(version, to) <= 0);
}

/**
 * What a release changed under an owner's code without the compiler
 * noticing: a pattern in the app's Rust that means something else since
 * that version, and what to write instead.
 */
export const RETIRED = [
  {
    since: "0.3.0",
    pattern: /\bFOR\s+UPDATE\b/i,
    say: "a row lock is now Statement::new(\"SELECT …\", params).for_update(), without FOR UPDATE in the SQL: D1 no longer removes it (CHANGELOG 0.3.0)",
  },
];

/**
 * Each line of `files` (a map of path to text) holding a pattern retired
 * after `before`, up to `after`: `{ path, line, say }`.
 */
export function retiredUses(files, before, after) {
  const due = RETIRED.filter(({ since }) => compare(before, since) < 0 && compare(since, after) <= 0);
  const found = [];
  for (const [path, text] of files) {
    text.split("\n").forEach((line, i) => {
      for (const { pattern, say } of due) if (pattern.test(line)) found.push({ path, line: i + 1, say });
    });
  }
  return found;
}

/** Which engine files the new engine replaces, adds and removes (maps of path to bytes). */
export function fileChanges(ours, theirs) {
  const changed = [...theirs.keys()].filter((path) => ours.has(path) && !ours.get(path).equals(theirs.get(path)));
  const added = [...theirs.keys()].filter((path) => !ours.has(path));
  const removed = [...ours.keys()].filter((path) => !theirs.has(path));
  return { changed: changed.sort(), added: added.sort(), removed: removed.sort() };
}

/** Migration files of one folder that share a number: which would run first is up to their names. */
export function numberClashes(files) {
  const byNumber = new Map();
  for (const file of files.filter((f) => /^\d{4}_/.test(f))) {
    const number = file.slice(0, 4);
    byNumber.set(number, [...(byNumber.get(number) ?? []), file]);
  }
  return [...byNumber.values()].filter((same) => same.length > 1);
}

/** The plan, as printed: one line a fact, the CHANGELOG entries whole. */
export function planText({ name, before, after, from, changes, migrations, worker, entries, carry }) {
  const direction = compare(after, before);
  const lines = [
    "make upgrade: the plan",
    `  ${name} ${before} -> ${after}${direction === 0 ? " (the same version)" : direction < 0 ? " (a downgrade)" : ""}, from ${from}`,
  ];
  const { changed, added, removed } = changes;
  if (changed.length + added.length + removed.length === 0) lines.push("  crates/engine: already this engine, nothing to replace");
  else lines.push(`  crates/engine: ${changed.length} files replaced, ${added.length} added, ${removed.length} removed`);
  for (const [what, paths] of [["added", added], ["removed", removed]]) {
    for (const path of paths) lines.push(`    ${what}: ${path}`);
  }
  lines.push(migrations.length ? `  migrations appended: ${migrations.join(", ")}` : "  migrations appended: none");
  if (worker) lines.push(`  Cargo.toml: worker ${worker.from} -> ${worker.to}, as the engine uses`);
  lines.push(...carryLines(carry));
  if (entries.length) {
    lines.push(`  CHANGELOG, after ${before}:`);
    for (const { text } of entries) lines.push(...text.split("\n").map((line) => (line ? `    ${line}` : "")), "");
  } else if (direction > 0) {
    lines.push(`  CHANGELOG: no entry after ${before}; read the engine's changes before deploying`);
  }
  return lines.join("\n");
}

/** What the plan says of the template's files (scripts/upgrade-carry.mjs): where they come from, and each one's fate. */
export function carryLines(carry) {
  if (!carry) return ["  template files (src/, tests/, scripts/, docs/, …): not carried (ENGINE is no checkout of the template, or this no generated copy)"];
  if (carry.why) return [`  template files (src/, tests/, scripts/, docs/, …): not carried: ${carry.why}`];
  const { answers, was, base, score, size, dirty, plan } = carry;
  const { name, providers, demos, dashboard, store } = answers;
  const lines = [
    `  generated as: ${name}, providers ${providers.join(",")}, demos ${demos}, dashboard ${dashboard}, store ${was && was !== store ? `${was} -> ${store}` : store}${answers.inferred ? " (read from the copy: it has no template.lock)" : ""}`,
    `  template files: from commit ${base.slice(0, 12)} (this copy's; ${score} of its ${size} files as it made them) to the checkout's${dirty ? " (with its uncommitted changes)" : ""}`,
  ];
  if (!plan.length) return [...lines, "    none changed"];
  const SAY = {
    replace: "replaced",
    add: "added",
    remove: "removed",
    merge: "merged with your changes",
    conflict: "CONFLICT: your changes and the template's overlap; left marked",
    kept: "kept as you have it",
  };
  for (const { path, action, why: reason } of plan) lines.push(`    ${SAY[action]}: ${path}${reason ? ` (${reason})` : ""}`);
  return lines;
}
