// needs: postgres
// `make deploy`'s step for effects in Postgres (STORE = "postgres" and a
// [[hyperdrive]] binding in wrangler.toml; docs/postgres.md):
// - the connection string: POSTGRES_URL, or asked at the terminal (not
//   echoed); needed to create the config, optional once it exists;
// - migrations-postgres/ applied to that database with psql, each file once
//   in one transaction (scripts/postgres.sh migrate), the password in
//   psql's environment, never on its command line;
// - the Hyperdrive config: found by id or name (`{worker}-postgres`), or
//   created with caching disabled (a webhook's reads must see the last
//   commit), its id written into wrangler.toml. wrangler takes the
//   connection string on its command line, the only way it has; it never
//   reaches the output.
// `node scripts/deploy-postgres.mjs migrate` applies the migrations alone,
// to POSTGRES_URL (the deploy workflow's step).
import { spawnSync } from "node:child_process";
import { existsSync, realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";

const fail = (message) => {
  console.error(`deploy: ${message}`);
  process.exit(1);
};

/**
 * libpq's environment for a postgres:// URL, nothing of it on a command
 * line; a URL it cannot read stops here, without being echoed. By default
 * the server must prove who it is (`sslmode=verify-full`, against the
 * system's certificate authorities) and the password exchange is bound to
 * that TLS session (`channel_binding=require`), so that no one between
 * can pose as the server. The URL's own `sslmode`, `sslrootcert` and
 * `channel_binding` relax either (`explain` says how).
 */
export function libpqEnv(url, stop = fail) {
  let origin;
  try {
    const u = new URL(url);
    const params = Object.fromEntries(u.searchParams);
    origin = {
      PGHOST: hostOf(u.hostname),
      PGPORT: u.port || "5432",
      PGUSER: decodeURIComponent(u.username),
      PGPASSWORD: decodeURIComponent(u.password),
      PGDATABASE: decodeURIComponent(u.pathname.slice(1)),
      ...tls(params),
      PGCONNECT_TIMEOUT: "15",
      ok: /^postgres(ql)?:$/.test(u.protocol),
    };
  } catch {
    return stop("POSTGRES_URL is not a URL: percent-encode any / # ? @ : % in the user name or password");
  }
  const { ok, ...env } = origin;
  if (!ok || !env.PGHOST || !env.PGUSER || !env.PGPASSWORD || !env.PGDATABASE) {
    return stop("POSTGRES_URL must be postgres://user:password@host:port/database");
  }
  return env;
}

/** Without TLS there is nothing to bind the password exchange to. */
const UNENCRYPTED = ["disable", "allow", "prefer"];

/** The TLS settings of a URL's parameters, safe by default. */
export function tls(params) {
  const sslmode = params.sslmode ?? "verify-full";
  const roots = params.sslrootcert ?? (sslmode.startsWith("verify-") ? systemRoots(sslmode) : undefined);
  return {
    PGSSLMODE: sslmode,
    PGCHANNELBINDING: params.channel_binding ?? (UNENCRYPTED.includes(sslmode) ? "prefer" : "require"),
    ...(roots ? { PGSSLROOTCERT: roots } : {}),
  };
}

/**
 * The system's certificate authorities, as libpq reads them: the bundle
 * file of the distribution, or `system` (libpq 16 on, and for verify-full
 * only); undefined when there is neither (libpq then says what is missing).
 */
function systemRoots(sslmode) {
  const bundles = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];
  const bundle = bundles.find((file) => existsSync(file));
  if (bundle || sslmode !== "verify-full") return bundle;
  const version = spawnSync("psql", ["--version"], { encoding: "utf8" }).stdout?.match(/(\d+)\./)?.[1];
  return Number(version) >= 16 ? "system" : undefined;
}

/** What to change in POSTGRES_URL when psql refused the connection's security. */
export function explain(said) {
  if (/channel binding/i.test(said)) {
    return "the server does not offer channel binding (SCRAM-SHA-256-PLUS over TLS): add channel_binding=prefer to POSTGRES_URL to connect without it";
  }
  if (/root certificate file/i.test(said)) {
    return "the file POSTGRES_URL's sslrootcert names could not be read: give the path of your provider's CA file";
  }
  if (/certificate|host name|hostname/i.test(said)) {
    return "the server's certificate could not be verified against the system's authorities: add sslrootcert=<your provider's CA file> to POSTGRES_URL, or sslmode=require to encrypt without checking whom you connect to";
  }
  if (/does not support SSL/i.test(said)) {
    return "the server does not offer TLS: add sslmode=disable to POSTGRES_URL only for a database on a private network";
  }
  return undefined;
}

/** `url` without what only psql reads (Hyperdrive's TLS has flags of its own). */
function forHyperdrive(url) {
  const u = new URL(url);
  for (const name of ["sslrootcert", "channel_binding"]) u.searchParams.delete(name);
  return u.href;
}

/** A host as compared: lower case, an IPv6 address without its brackets. */
const hostOf = (host) => host.replace(/^\[|\]$/g, "").toLowerCase();

/** This environment without libpq's own variables (PGHOSTADDR, PGOPTIONS, …): only the URL's reach psql. */
const withoutLibpq = (env) => Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith("PG")));

/** Applies migrations-postgres/ to the database of `url`; stops on a failure, the URL never shown. */
export function migrate(url, stop = fail) {
  const libpq = libpqEnv(url, stop);
  console.log(
    `Postgres: connecting with sslmode=${libpq.PGSSLMODE}, channel_binding=${libpq.PGCHANNELBINDING} ` +
      "(POSTGRES_URL's sslmode, sslrootcert and channel_binding change them: docs/postgres.md)",
  );
  const migrated = spawnSync("sh", ["scripts/postgres.sh", "migrate"], {
    env: { ...withoutLibpq(process.env), ...libpq, PG_REMOTE: "1", POSTGRES_URL: "" },
    encoding: "utf8",
    stdio: ["ignore", "inherit", "pipe"],
  });
  if (migrated.status !== 0) {
    const said = migrated.stderr.replaceAll(url, "<POSTGRES_URL>").trim();
    const fix = explain(said);
    stop(`migrations-postgres/ could not be applied (psql: ${said})${fix ? `: ${fix}` : ""}`);
  }
  console.log("Postgres: migrations-postgres/ applied");
}

/**
 * The step, for each [[hyperdrive]] binding (one, HYPERDRIVE). `wrangler`,
 * `must`, `stop`, `tableRows` and `writeTableField` are deploy.mjs's; `question` asks at a
 * terminal (undefined without one).
 */
export async function deployPostgres({ config, wrangler, must, stop, tableRows, writeTableField, question, migrationsOnly }) {
  let url = process.env.POSTGRES_URL;
  // No later command (wrangler deploy, the build) inherits it.
  delete process.env.POSTGRES_URL;
  const skip = process.env.POSTGRES_MIGRATIONS === "skip";
  for (const binding of (config.hyperdrive ?? []).filter((h) => h.binding === "HYPERDRIVE")) {
    const name = `${config.name}-postgres`;
    const rows = tableRows(must(["hyperdrive", "list"]));
    const listed = rows.find((row) => row.id === binding.id) ?? rows.find((row) => row.name === name);
    if (!url && question) {
      const hint = listed ? " [Enter: skip the migrations]" : "";
      url = await question(`POSTGRES_URL, your Postgres's connection string (postgres://user:password@host:5432/db)${hint}: `, { secret: true });
    }
    if (!url && !listed) stop(`no Hyperdrive config ${name} yet: give your Postgres's connection string in POSTGRES_URL (or at a terminal)`);
    if (url) {
      const origin = libpqEnv(url, stop);
      // The config must reach the database the migrations go to (one
      // through Cloudflare Access lists no port, and is not compared).
      const same =
        !listed?.port ||
        (hostOf(listed.host) === origin.PGHOST && listed.port === origin.PGPORT && listed.user === origin.PGUSER && listed.database === origin.PGDATABASE);
      if (!same) {
        stop(`Hyperdrive ${listed.name} points at ${listed.user}@${listed.host}:${listed.port}/${listed.database}, not at POSTGRES_URL's database: \`npx wrangler hyperdrive update ${listed.id} --connection-string=…\`, or give its own URL`);
      }
      migrate(url, stop);
    } else if (question || skip) {
      // Enter at the terminal, or POSTGRES_MIGRATIONS=skip: said on purpose.
      console.log("Postgres: migrations-postgres/ not applied (give POSTGRES_URL to apply them)");
    } else {
      stop(`migrations-postgres/ needs POSTGRES_URL${migrationsOnly ? "" : " (or POSTGRES_MIGRATIONS=skip to deploy without applying them)"}`);
    }

    let id = listed?.id;
    if (id) {
      console.log(`Hyperdrive ${listed.name}: exists (${id})`);
      if (listed.caching !== "disabled") {
        console.log(`  caching is ${listed.caching}: turn it off, \`npx wrangler hyperdrive update ${id} --caching-disabled\` (docs/postgres.md)`);
      }
    } else {
      const given = forHyperdrive(url);
      const args = ["hyperdrive", "create", name, `--connection-string=${given}`, "--caching-disabled"];
      // Nothing wrangler writes keeps the command line or the request body:
      // no output file (it records argv), and its debug log sanitized.
      const env = { ...process.env, WRANGLER_LOG_SANITIZE: "true" };
      delete env.WRANGLER_OUTPUT_FILE_PATH;
      delete env.WRANGLER_OUTPUT_FILE_DIRECTORY;
      const created = wrangler(args, { input: "", quiet: true, env });
      const output = `${created.out}\n${created.err}`.replaceAll(url, "<POSTGRES_URL>").replaceAll(given, "<POSTGRES_URL>");
      id = created.out.match(/config: ([0-9a-f]{32})/)?.[1];
      if (!created.ok || !id) stop(`\`wrangler hyperdrive create ${name}\` failed:\n${output.trim()}`);
      console.log(`Hyperdrive ${name}: created (${id}), caching disabled`);
    }
    if (binding.id !== id) writeTableField("hyperdrive", "binding", binding.binding, "id", id);
  }
}


const main = process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href;
if (main) {
  if (process.argv[2] !== "migrate") fail("usage: POSTGRES_URL=… node scripts/deploy-postgres.mjs migrate");
  if (!process.env.POSTGRES_URL) fail("migrate: set POSTGRES_URL");
  migrate(process.env.POSTGRES_URL);
}
