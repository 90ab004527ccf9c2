//! Where the app under test is, and its test Postgres: the cluster
//! `scripts/postgres.sh` keeps as `postgres-test` (the one the end-to-end
//! tests use), started once per test process if it is not running, and
//! left running for the next `cargo test`.

use std::path::PathBuf;

/// The app under test: the folder of the Cargo.toml whose tests run.
pub(super) fn app_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default()
}

/// The test cluster's connection string (`TEST_POSTGRES_URL` if set),
/// asked once per process.
#[cfg(feature = "postgres")]
pub(super) fn postgres_url() -> Result<String, String> {
    static URL: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    URL.get_or_init(|| match std::env::var("TEST_POSTGRES_URL") {
        Ok(url) => Ok(url),
        Err(_) => start(),
    })
    .clone()
}

/// Starts the test cluster (a no-op when it runs) and says where it is.
#[cfg(feature = "postgres")]
fn start() -> Result<String, String> {
    let root = app_root();
    let Some(root) = root
        .ancestors()
        .find(|dir| dir.join("scripts/postgres.sh").is_file())
    else {
        return Err("no scripts/postgres.sh in this copy: set TEST_POSTGRES_URL".into());
    };
    let run = |verb: &str| {
        let mut command = std::process::Command::new("sh");
        command
            .args(["scripts/postgres.sh", verb])
            .current_dir(root)
            .env("PG_CLUSTER", "postgres-test")
            // The server alone: each test makes a database of its own.
            .env("PG_DB", "postgres")
            .env("PG_MIGRATE", "0")
            // The test cluster's own port, from the checkout's path.
            .env_remove("PG_PORT");
        if let Some(dir) = std::env::var_os("PG_DIR") {
            let mut test = dir;
            test.push("-test");
            command.env("PG_DIR", test);
        }
        let output = command
            .output()
            .map_err(|e| format!("sh scripts/postgres.sh {verb}: {e}"))?;
        let said = String::from_utf8_lossy(&output.stderr).trim().to_string();
        match output.status.success() {
            true => Ok(String::from_utf8_lossy(&output.stdout).trim().to_string()),
            false => Err(format!(
                "the test Postgres did not start (scripts/postgres.sh {verb}): {said}"
            )),
        }
    };
    run("start")?;
    run("url")
}
