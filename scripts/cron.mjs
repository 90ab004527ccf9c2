// The five-field cron expressions of `[triggers] crons`, matched against a
// minute in UTC, for the local ticker in scripts/dev.mjs. Covers `*`, numbers,
// ranges, steps, lists and three-letter month and day names; anything else
// (Cloudflare's `L`, `W`, `#`) is refused at start-up rather than guessed.

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
    max: 7,
    of: (d) => d.getUTCDay(),
    names: ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
  },
];

/** The set of values one field allows, e.g. "1-5" → {1,2,3,4,5}. */
function values(text, field) {
  const allowed = new Set();
  const number = (token) => {
    const named = field.names?.indexOf(token.toUpperCase()) ?? -1;
    const n = named >= 0 ? named + (field.min === 1 ? 1 : 0) : /^\d+$/.test(token) ? Number(token) : NaN;
    if (!(n >= field.min && n <= field.max)) throw new Error(`cron: bad ${field.name} "${token}"`);
    return n;
  };
  for (const part of text.split(",")) {
    const [range, stepText] = part.split("/");
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1) throw new Error(`cron: bad step in "${part}"`);
    let [low, high] = [field.min, field.max];
    if (range !== "*") {
      const [a, b] = range.split("-");
      low = number(a);
      high = b === undefined ? (stepText === undefined ? low : field.max) : number(b);
    }
    for (let n = low; n <= high; n += step) allowed.add(field.name === "day of week" ? n % 7 : n);
  }
  return allowed;
}

/** Whether `cron` fires in the minute starting at `date` (UTC). */
export function cronMatches(cron, date) {
  const parts = cron.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`cron: "${cron}" must have five fields`);
  const hits = FIELDS.map((field, i) => values(parts[i], field).has(field.of(date)));
  const [minute, hour, dom, month, dow] = hits;
  // As in cron: when both day fields are restricted, either one may match.
  const days = parts[2] !== "*" && parts[4] !== "*" ? dom || dow : dom && dow;
  return minute && hour && month && days;
}
