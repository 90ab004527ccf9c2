// CPU time of a process group, for the benchmarks that run `wrangler dev`
// (its node, wrangler and workerd processes share the runner's group).
import { readdirSync, readFileSync } from "node:fs";

/** CPU ms (user + system) of each live process in group `pgid`, by name. */
export function groupCpuMs(pgid) {
  const byName = {};
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[2]) !== pgid) continue;
      byName[name] = (byName[name] ?? 0) + ((Number(fields[11]) + Number(fields[12])) * 1000) / 100;
    } catch {
      // gone meanwhile
    }
  }
  return byName;
}
