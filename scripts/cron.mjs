// The five-field cron expressions of `[triggers] crons`, matched against a
// minute in UTC, for the local ticker in scripts/dev.mjs. Covers `*`, numbers,
// ranges, steps, lists and three-letter month and day names; anything else
// is refused at start-up rather than guessed: Cloudflare's `L`, `W`, `#`, and
// numeric days of the week, which Cloudflare counts 1–7 from Sunday where
// Unix cron counts 0–6 (write SUN–SAT).

const FIELDS = [
  { name: "minute", min: 0, max: 59, of: (d) => d.getUTCMinutes() },
  { name: "hour", min: 0, max: 23, of: (d) => d.getUTCHours() },
  { name: "day of month", min: 1, max: 31, of: (d) => d.getUTCDate() },
  {
    name: "month",
    min: 1,
    max: 12,
    of: (d) => d.getUTCMonth() + 1,
    names: ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
  },
  {
    name: "day of week",
    min: 0,
    max: 6,
    of: (d) => d.getUTCDay(),
    names: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    namesOnly: true,
  },
];

/** The set of values one field allows, e.g. "1-5" → {1,2,3,4,5}. */
function values(text, field) {
  const allowed = new Set();
  const number = (token) => {
    const named = field.names?.indexOf(token.toUpperCase()) ?? -1;
    const numeric = !field.namesOnly && /^\d+$/.test(token) ? Number(token) : NaN;
    const n = named >= 0 ? named + field.min : numeric;
    if (!(n >= field.min && n <= field.max)) throw new Error(`cron: bad ${field.name} "${token}"`);
    return n;
  };
  for (const part of text.split(",")) {
    const [range, stepText, extra] = part.split("/");
    const step = stepText === undefined ? 1 : Number(stepText);
    if (extra !== undefined || !/^\d+$/.test(stepText ?? "1") || step < 1) throw new Error(`cron: bad step in "${part}"`);
    let [low, high] = [field.min, field.max];
    if (range !== "*") {
      const bounds = range.split("-");
      if (bounds.length > 2) throw new Error(`cron: bad range "${part}"`);
      low = number(bounds[0]);
      high = bounds.length === 2 ? number(bounds[1]) : stepText === undefined ? low : field.max;
      if (high < low) throw new Error(`cron: reversed range "${part}"`);
    }
    for (let n = low; n <= high; n += step) allowed.add(n);
  }
  return allowed;
}

/** Whether `cron` fires in the minute starting at `date` (UTC). */
export function cronMatches(cron, date) {
  const parts = cron.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`cron: "${cron}" must have five fields`);
  const hits = FIELDS.map((field, i) => values(parts[i], field).has(field.of(date)));
  const [minute, hour, dom, month, dow] = hits;
  // As in cron: when both day fields are restricted (neither starts with
  // `*`), either one may match.
  const restricted = (field) => !field.startsWith("*");
  const days = restricted(parts[2]) && restricted(parts[4]) ? dom || dow : dom && dow;
  return minute && hour && month && days;
}
