//! The previous release, built from this repository's own history, for the deploy-skew tests
//! (`tests/tests/compat.rs`, `tests/tests/lab_upgrade.rs`): a gateway of this version must work
//! beside one of the version before it (SPEC 11).
//!
//! The source of [`PREVIOUS`]'s commit is taken with `git archive` (no worktree to register or
//! prune) into `target/compat/<commit>/src` and its `ferry-under-test` (the gateway with the
//! same fault points this build's tests use) built there with its own target directory, so
//! neither build disturbs the other's artifacts. The first run takes a few minutes; later runs
//! find the binary and take none. A missing commit (a shallow clone) is fetched from `origin`.
//! `FERRY_PREVIOUS_BUILD=PATH` names an already built binary of that release instead (a clone
//! without history, a packaging check).
//!
//! The nested build runs with a cleared environment (the path, the home, cargo's and rustup's
//! homes and toolchain): the outer `cargo test`'s flags, target and profile settings must not
//! leak into a build of another tree.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ferry_harness::describe;

/// What the release before this one was, and where it lives in history.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    /// The commit the release was cut from.
    pub commit: &'static str,
    /// Its version, as `ferry --version` of this build would name it (that build printed none).
    pub version: &'static str,
    /// The only wire protocol version it speaks.
    pub protocol: u16,
    /// The database schema version it writes.
    pub schema: u32,
}

/// Protocol 1, schema 2: the last commit before protocol 2 and schema 3.
pub const PREVIOUS: Release = Release {
    commit: "d07b2c771217c58be073277477d63cc536634d65",
    version: "0.1.0",
    protocol: 1,
    schema: 2,
};

/// A cold build of the whole gateway on a two-core machine takes about four minutes.
const BUILD_BOUND: Duration = Duration::from_secs(25 * 60);

/// The repository this package is part of.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// Names an already built binary of [`PREVIOUS`] to use instead of building it.
pub const PREBUILT_VAR: &str = "FERRY_PREVIOUS_BUILD";

/// The previous release's gateway binary, built on first use (once per test process, success
/// or failure: a failed build is not tried again by every test; cargo's lock on the target
/// directory keeps concurrent test processes from building it twice). Panics with what went
/// wrong, and the command's output, if it cannot be had.
pub fn previous_build() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| match std::env::var_os(PREBUILT_VAR) {
        Some(path) => Ok(PathBuf::from(path)).and_then(|path| {
            if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{PREBUILT_VAR}={} is not a file", path.display()))
            }
        }),
        None => build(&PREVIOUS),
    });
    match built {
        Ok(binary) => binary,
        Err(why) => panic!(
            "cannot build the previous release ({}) for the deploy-skew tests: {why}",
            PREVIOUS.commit
        ),
    }
}

/// What the nested build may see of this process's environment.
const BUILD_ENV: [&str; 6] = [
    "PATH",
    "HOME",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "TMPDIR",
];

fn build(release: &Release) -> Result<PathBuf, String> {
    let repo = repository();
    let dir = repo.join("target").join("compat").join(release.commit);
    let binary = dir.join("ferry-previous");
    if binary.is_file() {
        return Ok(binary);
    }
    let src = dir.join("src");
    if !src.join("Cargo.toml").is_file() {
        extract(&repo, release.commit, &dir, &src)?;
    }
    eprintln!(
        "building the previous release ({}, protocol {}) in {}: the first time takes minutes",
        &release.commit[..7],
        release.protocol,
        dir.display()
    );
    let started = Instant::now();
    // A second try on one job: a build that failed for want of memory (two rustc processes
    // linking at once) or for a flaky moment gets one more chance before seven tests fail.
    let first = cargo_build(&src, &dir, None, started);
    if let Err(why) = first {
        eprintln!("the previous release did not build ({why}); trying once more on one job");
        cargo_build(&src, &dir, Some(1), started)
            .map_err(|again| format!("{why}\nand again on one job: {again}"))?;
    }
    let built = dir.join("target/debug/ferry-under-test");
    // Copied, then renamed into place: a binary at `binary` is always whole.
    let partial = dir.join(format!("ferry-previous.{}", std::process::id()));
    std::fs::copy(&built, &partial).map_err(|err| format!("copy {}: {err}", built.display()))?;
    std::fs::rename(&partial, &binary).map_err(|err| format!("rename: {err}"))?;
    eprintln!(
        "built the previous release in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(binary)
}

/// One `cargo build` of the previous release's gateway in `src`, bounded by [`BUILD_BOUND`]
/// from `started`. Without debug info or incremental state: the binary is only run, never
/// debugged, and that halves the build's disk and the linker's memory.
fn cargo_build(src: &Path, dir: &Path, jobs: Option<u32>, started: Instant) -> Result<(), String> {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.args([
        "build",
        "--locked",
        "-p",
        "ferry-tests",
        "--bin",
        "ferry-under-test",
    ]);
    if let Some(jobs) = jobs {
        command.arg("--jobs").arg(jobs.to_string());
    }
    let mut child = command
        .current_dir(src)
        .env_clear()
        .envs(
            BUILD_ENV
                .iter()
                .filter_map(|name| Some((name, std::env::var_os(name)?))),
        )
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run cargo: {err}"))?;
    // cargo's progress goes to a pipe read on another thread, so a full pipe never stalls it.
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        }
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|err| err.to_string())? {
            break status;
        }
        if started.elapsed() > BUILD_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the build took over {BUILD_BOUND:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = reader.join().unwrap_or_default();
    if status.success() {
        return Ok(());
    }
    Err(format!(
        "cargo build failed ({status}) after {:.0} s; the end of its output:\n{}",
        started.elapsed().as_secs_f64(),
        what_went_wrong(&log)
    ))
}

/// The part of a failed build's output worth reading: the progress lines (`Compiling`,
/// `Downloaded`, …) left out, and only the last [`LOG_TAIL`] lines of the rest, so the error is
/// what a truncated CI log still shows.
fn what_went_wrong(log: &str) -> String {
    const PROGRESS: [&str; 5] = [
        "Compiling",
        "Downloaded",
        "Downloading",
        "Checking",
        "Locking",
    ];
    let kept: Vec<&str> = log
        .lines()
        .filter(|line| {
            let first = line.split_whitespace().next().unwrap_or("");
            !PROGRESS.contains(&first)
        })
        .collect();
    let tail = &kept[kept.len().saturating_sub(LOG_TAIL)..];
    if tail.is_empty() {
        "(nothing but progress lines: the build was killed, perhaps for memory)".to_string()
    } else {
        tail.join("\n")
    }
}

/// How many lines of a failed build's output [`what_went_wrong`] keeps.
const LOG_TAIL: usize = 40;

/// Writes `commit`'s tree into `src` (through a temporary directory renamed into place, so a
/// half-written tree is never taken for a whole one), fetching the commit first if this clone
/// lacks it.
fn extract(repo: &Path, commit: &str, dir: &Path, src: &Path) -> Result<(), String> {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("cannot run git: {err}"))
    };
    let object = format!("{commit}^{{commit}}");
    if !git(&["cat-file", "-e", &object])?.status.success() {
        let fetched = git(&["fetch", "--quiet", "origin", commit])?;
        if !fetched.status.success() {
            return Err(format!(
                "commit {commit} is not in this clone and could not be fetched from origin \
                 (clone with history: `git clone` without --depth): {}",
                describe(&fetched)
            ));
        }
    }
    std::fs::create_dir_all(dir).map_err(|err| format!("create {}: {err}", dir.display()))?;
    let partial = dir.join(format!("src.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|err| format!("create: {err}"))?;
    let archive = git(&["archive", "--format=tar", commit])?;
    if !archive.status.success() {
        return Err(format!("git archive: {}", describe(&archive)));
    }
    let mut tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&partial)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run tar: {err}"))?;
    if let Some(mut stdin) = tar.stdin.take() {
        std::io::Write::write_all(&mut stdin, &archive.stdout)
            .map_err(|err| format!("tar: {err}"))?;
    }
    let status = tar.wait().map_err(|err| format!("tar: {err}"))?;
    if !status.success() {
        return Err(format!("tar -x failed: {status}"));
    }
    // Another process may have put a whole tree there first: then this one is not needed.
    if std::fs::rename(&partial, src).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
        if !src.join("Cargo.toml").is_file() {
            return Err(format!("could not move the source into {}", src.display()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_builds_report_leaves_out_progress_and_keeps_the_error() {
        let log = "   Compiling syn v2.0.119\n   Compiling quinn v0.11.12\nerror: linking with `cc` failed\n  = note: collect2: fatal error: ld terminated with signal 9\n";
        let report = what_went_wrong(log);
        assert!(!report.contains("Compiling"), "{report}");
        assert!(report.contains("ld terminated with signal 9"), "{report}");
    }

    #[test]
    fn a_build_killed_with_only_progress_lines_says_so() {
        let report = what_went_wrong("   Compiling syn v2.0.119\n");
        assert!(report.contains("killed"), "{report}");
    }

    #[test]
    fn a_long_failure_keeps_only_its_last_lines() {
        let log: String = (0..100).map(|n| format!("line {n}\n")).collect();
        let report = what_went_wrong(&log);
        assert_eq!(report.lines().count(), LOG_TAIL);
        assert!(report.ends_with("line 99"), "{report}");
    }
}
