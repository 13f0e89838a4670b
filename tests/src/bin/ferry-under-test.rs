//! The `ferry` binary, built inside the test package so integration tests always run the
//! current code (cargo rebuilds a package's own binaries for its tests). It has the test-only
//! bug switches compiled in: `FERRY_INJECT_BUG=<name>` turns one on for the whole process (the
//! fault campaign's `--bug`); without it this is the shipped `ferry`.

use ferry_core::bugs::{self, Bug, BUG_VAR};

fn main() -> std::process::ExitCode {
    if let Ok(name) = std::env::var(BUG_VAR) {
        match Bug::from_name(&name) {
            Some(bug) => bugs::inject_process(Some(bug)),
            None => {
                eprintln!(
                    "{BUG_VAR}={name:?} names no bug; known: {:?}",
                    Bug::ALL.map(Bug::name)
                );
                return std::process::ExitCode::from(2);
            }
        }
    }
    ferry_gateway::cli::main()
}
