//! `ferry-campaign`: the fault campaign (issue 14; `ferry_tests::campaign`, `docs/campaign.md`).
//! Five lab hosts, three vaults, ten apps, a seeded nemesis; prints the report and exits 0 when
//! every promise held, 1 on violations, 2 when it could not run. Needs root (network
//! namespaces) and the test package's binaries built beside it:
//!
//!     cargo build --release -p ferry-tests --bins
//!     sudo ./target/release/ferry-campaign --seed 1 --ops 50000 --faults 200 --json

use std::process::ExitCode;
use std::time::Duration;

use ferry_core::bugs::Bug;
use ferry_tests::campaign::{self, nemesis::KINDS, Options};

const USAGE: &str = "usage: ferry-campaign [--seed N] [--ops N] [--faults N] [--kinds k1,k2] \
[--bug NAME] [--pace-ms N] [--dir PATH] [--json]";

fn parse(args: &[String]) -> Result<(Options, bool), String> {
    let mut options = Options::default();
    let mut json = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |name: &str, text: String| {
            text.parse::<u64>()
                .map_err(|_| format!("{name} takes a whole number, not {text:?}"))
        };
        match arg.as_str() {
            "--seed" => options.seed = number("--seed", value("--seed")?)?,
            "--ops" => options.ops = number("--ops", value("--ops")?)?,
            "--faults" => options.min_faults = number("--faults", value("--faults")?)?,
            "--pace-ms" => {
                options.pace = Duration::from_millis(number("--pace-ms", value("--pace-ms")?)?)
            }
            "--dir" => options.dir = Some(value("--dir")?.into()),
            "--kinds" => {
                options.kinds = value("--kinds")?.split(',').map(str::to_string).collect();
                if let Some(bad) = options.kinds.iter().find(|k| !KINDS.contains(&k.as_str())) {
                    return Err(format!(
                        "no fault kind {bad:?}; known: {}",
                        KINDS.join(", ")
                    ));
                }
            }
            "--bug" => {
                let name = value("--bug")?;
                options.bug = Some(Bug::from_name(&name).ok_or_else(|| {
                    format!(
                        "no bug {name:?}; known: {}",
                        campaign::bug_names().join(", ")
                    )
                })?);
            }
            "--json" => json = true,
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok((options, json))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (options, json) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    match campaign::run(&options) {
        Ok(report) => {
            if json {
                // The words go to standard error, so a log keeps both.
                eprint!("{}", report.text());
                println!("{}", report.to_json());
            } else {
                print!("{}", report.text());
            }
            if report.violations.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(why) => {
            eprintln!("ferry-campaign could not run: {why}");
            ExitCode::from(2)
        }
    }
}
