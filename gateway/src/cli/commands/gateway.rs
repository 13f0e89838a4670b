//! The commands about this gateway itself: `serve`, `stop`, `status`, `id`, `doctor`, `ui`.

use std::time::Duration;

use ferry_kit::admin::{DoctorReport, NoArguments, OwnerQueue, Status, Stopping, UiCode};
use ferry_kit::Kit;
use serde::Serialize;

use super::{fail, kit_failure, output, show, show_post};
use crate::cli::{Exit, ServeArgs};
use crate::config::Config;
use crate::home::Home;

pub(super) async fn serve(home: Home, args: ServeArgs) -> Exit {
    let mut config = match Config::load(&home.config_path()) {
        Ok(config) => config,
        Err(err) => return fail(Exit::Usage, &err.to_string()),
    };
    if let Some(api) = args.api {
        config.api = api;
    }
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if args.label.is_some() {
        config.label = args.label;
    }
    if args.no_mdns {
        config.mdns = false;
    }
    config.tailnet.extend(args.tailnet);
    match crate::daemon::run(home, config).await {
        Ok(()) => Exit::Done,
        Err(err) => fail(Exit::Usage, &err.to_string()),
    }
}

pub(super) async fn stop(kit: &Kit, json: bool) -> Exit {
    show_post(
        kit,
        json,
        "/v1/admin/stop",
        &NoArguments {},
        |_: Stopping| {
            println!("stopping: in-flight writes drain, then the gateway exits");
        },
    )
    .await
}

pub(super) async fn status(kit: &Kit, json: bool) -> Exit {
    show(kit, json, "/v1/status", print_status).await
}

fn print_status(status: Status) {
    // The addresses as a JSON list, as this line has always shown them.
    let addresses = output::to_text(&status.addresses, false).unwrap_or_default();
    for (field, value) in [
        ("node_id", status.node_id),
        ("label", status.label.into_string()),
        ("api", output::cell(status.api)),
        ("addresses", addresses),
        ("uptime_s", status.uptime_s.to_string()),
        ("peers", status.peers.to_string()),
        ("home", status.home),
        ("version", status.version),
        ("protocols", status.protocols),
    ] {
        println!("{field:<10} {value}");
    }
    print_owner_queue(&status.owner_queue);
    for mismatch in &status.version_mismatches {
        println!("{:<10} {mismatch}", "mismatch");
    }
}

/// The owner's queue in `ferry status`: depth by class, the rules, the busiest callers.
fn print_owner_queue(queue: &OwnerQueue) {
    let rules = if queue.rules_on {
        let node = match queue.per_node {
            0 => String::new(),
            n => format!("{n} per caller node, "),
        };
        let rate = match (queue.rate_per_minute, queue.node_rate_per_minute) {
            (0, 0) => "no rate limit".to_string(),
            (app, 0) => format!("{app} a minute per app"),
            (0, node) => format!("{node} a minute per node"),
            (app, node) => format!("{app} a minute per app, {node} per node"),
        };
        format!(
            "{} per caller app, {node}{rate}, depth {}",
            queue.per_caller, queue.queue_depth
        )
    } else {
        format!("capacity rules off, depth {}", queue.queue_depth)
    };
    println!(
        "{:<10} {} interactive, {} background waiting ({rules})",
        "queue", queue.interactive, queue.background
    );
    for caller in &queue.top_callers {
        println!(
            "{:<10} {}/{}: {} in flight, {} admitted, {} refused",
            "caller", caller.node, caller.app, caller.in_flight, caller.admitted, caller.refused
        );
    }
}

/// `ferry id --json`.
#[derive(Debug, Serialize)]
struct CliId {
    node_id: String,
    label: String,
    /// Where peers reach this gateway: the addresses a running gateway bound, else the
    /// configured one.
    addresses: Vec<String>,
}

pub(super) async fn id(home: &Home, kit: &Kit, json: bool) -> Exit {
    let key = match home.node_key() {
        Ok(key) => key,
        Err(err) => return fail(Exit::Usage, &err.to_string()),
    };
    if !json {
        println!("{}", key.node_id());
        return Exit::Done;
    }
    // A running gateway knows the addresses it actually bound; otherwise the configured one.
    let (label, addresses) = match kit.get_typed::<Status>("/v1/status").await {
        Ok(status) => (status.label.into_string(), status.addresses),
        Err(_) => {
            let config = Config::load(&home.config_path()).unwrap_or_default();
            (
                config.label_or_hostname().into_string(),
                vec![config.listen.to_string()],
            )
        }
    };
    output::json(&CliId {
        node_id: key.node_id().to_string(),
        label,
        addresses,
    });
    Exit::Done
}

pub(super) async fn doctor(kit: &Kit, json: bool) -> Exit {
    let _notice = crate::cli::progress::WaitNotice::after(
        Duration::from_millis(500),
        format!(
            "asking every trusted peer (up to {} s each)",
            crate::doctor::PROBE_BOUND.as_secs()
        ),
    );
    let report: DoctorReport = match kit.get_typed("/v1/doctor").await {
        Ok(report) => report,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&report);
    } else {
        for finding in &report.findings {
            let mark = if finding.ok { "ok     " } else { "PROBLEM" };
            println!("{mark}  {}: {}", finding.subject, finding.says);
            if let Some(fix) = &finding.fix {
                println!("         fix: {fix}");
            }
        }
        let problems = report.findings.iter().filter(|f| !f.ok).count();
        println!(
            "{}",
            match problems {
                0 => "no problems found".to_string(),
                1 => "1 problem found".to_string(),
                n => format!("{n} problems found"),
            }
        );
    }
    if report.ok {
        Exit::Done
    } else {
        Exit::Refused
    }
}

pub(super) async fn ui(kit: &Kit, json: bool, print: bool, read_only: bool) -> Exit {
    let path = if read_only {
        "/v1/admin/ui-code?read_only=true"
    } else {
        "/v1/admin/ui-code"
    };
    let code: UiCode = match kit.post_typed(path, &NoArguments {}).await {
        Ok(code) => code,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&code);
        return Exit::Done;
    }
    if !print {
        // The link holds the code: it goes to the browser in a file only this user can read,
        // never on a command line (see `ui`).
        match crate::cli::ui::write_handover(
            &crate::cli::ui::handover_dir(),
            &code.url,
            Duration::from_secs(code.expires_in_s),
        ) {
            Ok(page) if crate::cli::ui::open_in_browser(page.as_os_str()) => {
                println!(
                    "opened the status page (if no browser appeared, or it could not read {}, \
                     run `ferry ui --print`)",
                    page.display()
                );
                return Exit::Done;
            }
            Ok(page) => {
                let _ = std::fs::remove_file(page);
            }
            Err(err) => eprintln!("could not write the page that opens the status page: {err}"),
        }
    }
    println!("{}", code.url);
    eprintln!(
        "open this link within {} s; it works once (the page then keeps its own {} session)",
        code.expires_in_s,
        if code.read_only {
            "read-only"
        } else {
            "acting"
        }
    );
    Exit::Done
}
