//! The `ferry` binary, built inside the test package so integration tests always run the
//! current code (cargo rebuilds a package's own binaries for its tests). It has the test-only
//! switches compiled in, and this `main` is the only place that arms them:
//! `FERRY_INJECT_BUG=<name>` turns one known bug on for the whole process (the fault
//! campaign's `--bug`), and the `FERRY_DANGEROUS_*` variables arm the gateway's fault points
//! (docs/operations.md, "Test-only fault injection"). Without them this is the shipped `ferry`.

use ferry_core::bugs::{self, Bug, BUG_VAR};
use ferry_gateway::owner::fault::{self, Faults};
use ferry_peer::wire::ProtocolRange;

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
    match faults_from_env() {
        Ok(Some(faults)) => {
            fault::arm(faults);
        }
        Ok(None) => {}
        Err(why) => {
            // A test that misspells its fault would otherwise pass without it.
            eprintln!("{why}");
            return std::process::ExitCode::from(2);
        }
    }
    ferry_gateway::cli::main()
}

/// The fault points the `FERRY_DANGEROUS_*` variables ask for, if any; read once, here.
fn faults_from_env() -> Result<Option<Faults>, String> {
    let var = |name: &str| std::env::var(name).ok();
    let points = var("FERRY_DANGEROUS_FAULT");
    let protocols = var("FERRY_DANGEROUS_PROTOCOLS");
    let clock = var("FERRY_DANGEROUS_CLOCK_OFFSET_MS");
    let settle = var("FERRY_DANGEROUS_SETTLE_STATE");
    if points.is_none() && protocols.is_none() && clock.is_none() && settle.is_none() {
        return Ok(None);
    }
    Ok(Some(Faults {
        points: points.unwrap_or_default(),
        protocols: protocols
            .map(|spec| {
                ProtocolRange::parse(&spec).ok_or_else(|| {
                    format!("FERRY_DANGEROUS_PROTOCOLS={spec:?} is not a range A-B with 0 < A <= B")
                })
            })
            .transpose()?,
        clock_offset_ms: parsed(clock, "FERRY_DANGEROUS_CLOCK_OFFSET_MS")?,
        settle_state: parsed(settle, "FERRY_DANGEROUS_SETTLE_STATE")?,
    }))
}

fn parsed<T: std::str::FromStr>(value: Option<String>, name: &str) -> Result<Option<T>, String> {
    value
        .map(|text| {
            text.parse()
                .map_err(|_| format!("{name}={text:?} is not a number"))
        })
        .transpose()
}
