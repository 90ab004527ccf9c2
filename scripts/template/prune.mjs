// The pruning primitives choose.mjs applies to a generated copy: code is cut
// by what it already says (a `#[cfg(feature = …)]`, a `// needs: …` line),
// never by line numbers, and each cut takes a whole item as its formatter
// (rustfmt, prettier) laid it out: its first line, every line indented
// deeper, and the closing line at its own indent.

const indent = (line) => line.match(/^[ \t]*/)[0].length;
// Rust and JavaScript brackets, and a shell block (`then` … `fi`, `do` …
// `done`; `case … in` … `esac` is found by esacOf).
const CLOSERS = /^([}\])]|fi$|done$|esac$|else$|elif )/;
const OPENS = /([{([]|; then|; do|^\s*else|^\s*case .* in)$/;

/**
 * The comment opener of a file's language, from its name: `--` is a
 * comment in SQL alone (in shell it starts an option), `#` in shell, the
 * Makefile, TOML and YAML.
 */
function commentOf(file) {
  if (/\.sql$/.test(file)) return "--";
  if (/\.(rs|mjs|cjs|js)$/.test(file)) return "//";
  return "#";
}

const CASE = /^\s*case .* in$/;

/**
 * The `esac` that closes the shell `case` at `start`, whose arms may sit at
 * its own indent; a case left open is an error, never the rest of the file.
 */
function esacOf(lines, start) {
  let depth = 0;
  for (let i = start; i < lines.length; i++) {
    if (CASE.test(lines[i])) depth++;
    else if (/^esac\b/.test(lines[i].trim()) && --depth === 0) return i;
  }
  throw new Error(`no esac closes the case at line ${start + 1}: ${lines[start].trim()}`);
}

/**
 * The last line of the item that starts at `start`: the lines indented
 * deeper than it, and a closing line at its indent (`}`, `)`, `]`), which
 * goes on when it opens again (`) -> T {`).
 */
export function itemEnd(lines, start, { shell = false } = {}) {
  // A marked arm is a line, or a pattern with its body indented deeper.
  if (shell && CASE.test(lines[start])) return esacOf(lines, start);
  const at = indent(lines[start]);
  let end = start;
  if (!OPENS.test(lines[start].trimEnd())) {
    // One line, or a statement whose continuation lines are indented.
    while (end + 1 < lines.length && lines[end + 1].trim() && indent(lines[end + 1]) > at) end++;
    return end;
  }
  for (let i = start + 1; i < lines.length; i++) {
    const line = lines[i];
    if (!line.trim() || indent(line) > at) continue;
    if (CLOSERS.test(line.trim())) {
      end = i;
      if (OPENS.test(line.trimEnd())) continue;
      return end;
    }
    return end;
  }
  return end;
}

/**
 * The doc comments and attributes directly above `start`, and with
 * `comments` the plain `//` comments too.
 */
function leadStart(lines, start, comments = false) {
  const lead = comments ? /^\s*(\/\/(?!!)|#\[)/ : /^\s*(\/\/\/|#\[)/;
  let first = start;
  while (first > 0 && lead.test(lines[first - 1])) first--;
  return first;
}

/** Removes lines `from..=to`, then any blank line left doubled. */
function cut(lines, from, to) {
  lines.splice(from, to - from + 1);
  if (from > 0 && from < lines.length && !lines[from].trim() && !lines[from - 1].trim()) lines.splice(from, 1);
}

// ---- cfg expressions, in three values: true, false, or what remains ----

function parseCfg(text) {
  const tokens = text.match(/[A-Za-z_][A-Za-z0-9_]*|"[^"]*"|[(),=]/g);
  let i = 0;
  const pred = () => {
    const name = tokens[i++];
    if (tokens[i] === "=") {
      i++;
      return { key: name, value: tokens[i++].slice(1, -1) };
    }
    if (tokens[i] !== "(") return { key: name };
    i++;
    const args = [];
    while (tokens[i] !== ")") {
      args.push(pred());
      if (tokens[i] === ",") i++;
    }
    i++;
    return { op: name, args };
  };
  return pred();
}

/** `removed`: the features the copy no longer has. */
function evaluate(node, removed) {
  if (node.key === "feature") return removed.has(node.value) ? false : node;
  if (!node.op) return node;
  const args = node.args.map((arg) => evaluate(arg, removed));
  if (node.op === "not") return args[0] === true ? false : args[0] === false ? true : { op: "not", args };
  const absorbing = node.op === "any";
  if (args.includes(absorbing)) return absorbing;
  const rest = args.filter((arg) => arg !== !absorbing);
  if (rest.length === 0) return !absorbing;
  return rest.length === 1 ? rest[0] : { op: node.op, args: rest };
}

function print(node) {
  if (node.op) return `${node.op}(${node.args.map(print).join(", ")})`;
  return node.value === undefined ? node.key : `${node.key} = "${node.value}"`;
}

/**
 * Rust: every item under a `#[cfg]` that the removed features make false is
 * cut with its docs; an attribute they make true is dropped; one they only
 * shorten is rewritten. Returns the text and the `mod` names cut (whose
 * files go too).
 */
export function pruneCfg(text, removed) {
  const lines = text.split("\n");
  const mods = [];
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i].match(/^(\s*)#\[cfg\((.*)$/);
    if (!open) continue;
    // The attribute may span lines (rustfmt breaks a long one).
    let last = i;
    let attr = lines[i].trim();
    while (!attr.endsWith(")]")) attr += " " + lines[++last].trim();
    // A macro's own attributes (`$feature`) are not this copy's to decide.
    if (attr.includes("$")) continue;
    const value = evaluate(parseCfg(attr.slice("#[cfg(".length, -2)), removed);
    if (value === true) {
      lines.splice(i, last - i + 1);
      i--;
    } else if (value === false) {
      let start = last + 1;
      while (/^\s*(\/\/\/|#\[)/.test(lines[start])) start++;
      const mod = lines[start].match(/^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+);/);
      if (mod) mods.push(mod[1]);
      const from = leadStart(lines, i);
      cut(lines, from, itemEnd(lines, start));
      i = from - 1;
    } else if (print(value) !== attr.slice("#[cfg(".length, -2)) {
      lines.splice(i, last - i + 1, `${open[1]}#[cfg(${print(value)})]`);
    }
  }
  return { text: lines.join("\n"), mods };
}

/**
 * Cuts each item whose first line matches `pattern` (an arm, a table line,
 * a declaration), with the doc comments above it (with `comments`, any
 * comment lines right above it).
 */
export function cutItems(text, pattern, { comments = false } = {}) {
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (!pattern.test(lines[i])) continue;
    const from = leadStart(lines, i, comments);
    cut(lines, from, itemEnd(lines, i));
    i = from - 1;
  }
  return lines.join("\n");
}

/**
 * What a `needs:` comment asks: `// needs: stripe, demos` (all of them) or
 * `// needs one of: svix, standard-webhooks`, with the file's own comment
 * opener (`commentOf`). `null` on any other line.
 */
function needsOf(line, comment = "//") {
  const text = line.trimStart();
  const match = text.startsWith(comment) && text.slice(comment.length).match(/^ needs( one of)?: (.*)$/);
  if (!match) return null;
  const names = match[2].split(/,\s*/);
  return (missing) => (match[1] ? names.every((n) => missing.has(n)) : names.some((n) => missing.has(n)));
}

/** Whether `line` is a comment in a language whose comments open with `comment`. */
const isComment = (line, comment) => line.trimStart().startsWith(comment);

/** How many lines the file's opening comment block runs to. */
function headerEnd(lines, comment) {
  const end = lines.findIndex((line) => !isComment(line, comment));
  return end < 0 ? lines.length : end;
}

/** Whether a file's opening comment says it needs something left out. */
export function fileNeedsMissing(text, missing, file) {
  const comment = commentOf(file);
  const lines = text.split("\n");
  return lines.slice(0, headerEnd(lines, comment)).some((line) => needsOf(line, comment)?.(missing));
}

/**
 * Cuts each item marked by a `needs:` line above it whose needs include
 * something left out; drops the markers of those that stay. `file` names
 * the language (`commentOf`): in shell, a marked `case` arm goes alone,
 * and a cut that would leave a block empty (`then` right above `fi`) is
 * refused, since the copy would not parse.
 */
export function pruneNeeds(text, missing, file) {
  const comment = commentOf(file);
  const shell = /\.sh$/.test(file) || /^#!.*\b(sh|bash)\b/.test(text);
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const needs = needsOf(lines[i], comment);
    if (!needs) continue;
    if (i < headerEnd(lines, comment)) {
      // The file's own needs, met: it stays, without the marker.
      lines.splice(i--, 1);
      continue;
    }
    if (needs(missing)) {
      const start = pastComments(lines, i + 1, comment);
      if (start >= lines.length) throw new Error(`${file}: a needs: line with no item after it: ${lines[i]}`);
      const marker = lines[i];
      cut(lines, i, itemEnd(lines, start, { shell }));
      if (shell && leavesEmptyBlock(lines, i)) throw new Error(`${file}: cutting under "${marker.trim()}" leaves an empty block; mark the whole block`);
    } else {
      lines.splice(i, 1);
    }
    i--;
  }
  return lines.join("\n");
}

/** Whether the shell block around line `at` (where a cut was) holds no command. */
function leavesEmptyBlock(lines, at) {
  let before = at - 1;
  while (before >= 0 && (!lines[before].trim() || isComment(lines[before], "#"))) before--;
  let after = at;
  while (after < lines.length && (!lines[after].trim() || isComment(lines[after], "#"))) after++;
  const opens = before >= 0 && /(\bthen|\bdo|^\s*else|\{)$/.test(lines[before].trimEnd());
  const closes = after < lines.length && /^(fi|done|else|elif|\})(\s|;|$)/.test(lines[after].trim());
  return opens && closes;
}

/**
 * The first line at or after `i` that is not a comment (opened with
 * `comment`) or, in Rust, an attribute or a block comment.
 */
function pastComments(lines, i, comment) {
  const rust = comment === "//";
  while (i < lines.length) {
    const line = lines[i].trim();
    if (rust && line.startsWith("/*")) {
      while (!lines[i].includes("*/")) i++;
      i++;
    } else if (rust && line.startsWith("#[") && !line.endsWith("]")) {
      // An attribute rustfmt broke over lines.
      while (i < lines.length && !lines[i].trimEnd().endsWith(")]")) i++;
      i++;
    } else if ((rust && line.startsWith("#[")) || isComment(line, comment)) {
      i++;
    } else {
      return i;
    }
  }
  return i;
}

/** A Markdown `<!-- needs: a, b -->` line's test, as `needsOf`'s; `null` on any other line. */
function docNeedsOf(line) {
  const match = line.trimEnd().match(/^\s*<!-- needs( one of)?: (.*) -->$/);
  return match ? needsOf(`// needs${match[1] ?? ""}: ${match[2]}`) : null;
}

/**
 * The last line of the Markdown block that starts at `start`: a heading's
 * whole section (to the next heading of its level or higher), a list item
 * with its deeper lines, a fenced block, or a paragraph.
 */
function blockEnd(lines, start) {
  const first = lines[start];
  const heading = first.match(/^(#{1,6}) /);
  let end = start;
  if (heading) {
    // A `#` line inside a fenced block is a shell comment, not a heading.
    let fenced = false;
    const level = (line) => (fenced ? 7 : (line?.match(/^(#{1,6}) /)?.[1].length ?? 7));
    // The next section's own marker, right above its heading, is not this one's.
    const nextMarked = (i) => !fenced && docNeedsOf(lines[i]) && level(lines[i + 1]) <= heading[1].length;
    while (end + 1 < lines.length && level(lines[end + 1]) > heading[1].length && !nextMarked(end + 1)) {
      if (lines[++end].trimStart().startsWith("```")) fenced = !fenced;
    }
    while (end > start && !lines[end].trim()) end--;
    return end;
  }
  if (first.trimStart().startsWith("```")) {
    while (end + 1 < lines.length && !lines[++end].trimStart().startsWith("```"));
    return end;
  }
  const item = /^\s*([-*]|\d+\.) /.test(first);
  while (end + 1 < lines.length && lines[end + 1].trim()) {
    if (item && indent(lines[end + 1]) <= indent(first)) break;
    end++;
  }
  // A paragraph that introduces a list or a fenced block (it ends with
  // `:`) takes it.
  const next = lines[end + 2] ?? "";
  if (!item && lines[end].trimEnd().endsWith(":") && !lines[end + 1]?.trim()) {
    if (next.trimStart().startsWith("```")) return blockEnd(lines, end + 2);
    if (/^\s*([-*]|\d+\.) /.test(next)) {
      end += 2;
      while (end + 1 < lines.length && lines[end + 1].trim()) end++;
    }
  }
  return end;
}

/**
 * Markdown: cuts each block marked by a `<!-- needs: … -->` line whose
 * needs include something left out; drops the markers of those that stay.
 * `null` when the marker opens the file and says it goes whole.
 */
export function pruneDocNeeds(text, missing) {
  const lines = text.split("\n");
  const opening = docNeedsOf(lines[0]);
  if (opening?.(missing)) return null;
  if (opening) lines.splice(0, lines[1]?.trim() ? 1 : 2);
  for (let i = 0; i < lines.length; i++) {
    const needs = docNeedsOf(lines[i]);
    if (!needs) continue;
    if (!lines[i + 1]?.trim()) throw new Error(`a needs: line not right above its block: ${lines[i]}`);
    if (needs(missing)) cut(lines, i, blockEnd(lines, i + 1));
    else lines.splice(i, 1);
    i--;
  }
  return lines.join("\n");
}
