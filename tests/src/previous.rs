//! The previous release, built from this repository's own history, for the deploy-skew tests
//! (`tests/tests/compat.rs`, `tests/tests/lab_upgrade.rs`): a gateway of this version must work
//! beside one of the version before it (SPEC 11).
//!
//! It is built by `tests/previous/build` (the one recipe: `git archive` of the commit in
//! `tests/previous/commit` into `target/compat/<commit>/`, its `ferry-under-test` built there
//! with a target directory of its own, in a cleared environment, kept in the machine's cargo
//! home between runs). `.ci/run` starts that script early in the background; on first use in a
//! test run, [`previous_build`] runs it too, and its lock makes this wait for a build under way.
//! `FERRY_PREVIOUS_BUILD=PATH` names an already built binary of that release instead (a clone
//! without history, a packaging check).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    commit: include_str!("../previous/commit"),
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

/// Builds [`PREVIOUS`] with `tests/previous/build` (the one recipe, which `.ci/run` also starts
/// early in the background; its lock makes this wait for that build rather than run a second),
/// bounded by [`BUILD_BOUND`]. The script prints the binary's path on its last line.
fn build(release: &Release) -> Result<PathBuf, String> {
    let script = repository().join("tests/previous/build");
    let started = Instant::now();
    let mut child = Command::new(&script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run {}: {err}", script.display()))?;
    // Both pipes are read on threads of their own, so a full pipe never stalls the build.
    let stdout = read_on_a_thread(child.stdout.take());
    let stderr = read_on_a_thread(child.stderr.take());
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
    let printed = stdout.join().unwrap_or_default();
    let log = stderr.join().unwrap_or_default();
    match printed.lines().last().map(PathBuf::from) {
        Some(binary) if status.success() && binary.is_file() => {
            eprintln!(
                "the previous release ({}, protocol {}) is {} ({:.0} s)",
                &release.commit[..7],
                release.protocol,
                binary.display(),
                started.elapsed().as_secs_f64()
            );
            Ok(binary)
        }
        _ => Err(format!(
            "{} failed ({status}) after {:.0} s; the end of its output:\n{}",
            script.display(),
            started.elapsed().as_secs_f64(),
            what_went_wrong(&log)
        )),
    }
}

/// Reads all of `pipe` on a thread of its own.
fn read_on_a_thread<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        text
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_commit_is_a_whole_commit_id() {
        assert_eq!(PREVIOUS.commit.len(), 40, "{:?}", PREVIOUS.commit);
        assert!(
            PREVIOUS.commit.bytes().all(|b| b.is_ascii_hexdigit()),
            "tests/previous/commit holds {:?}, not a commit id (no newline)",
            PREVIOUS.commit
        );
    }

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
