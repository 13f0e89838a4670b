//! What each command does. Commands that talk to a gateway use the [`Kit`]; `trust`,
//! `untrust`, `vault create` and `id` also work with no gateway running, on the state
//! directory directly (the gateway reads it when it starts).

use std::io::Read;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

use super::output::{self, cell};
use super::{Cli, Command, Exit, ServeArgs, TicketsCommand, VaultCommand, WriteFlags};
use crate::config::Config;
use crate::home::Home;
use crate::names::{Label, VaultName};
use crate::store::{self, trust, vaults};
use ferry_kit::admin::{
    CreateVault, DoctorReport, FollowVault, HeldTicket, OwnerQueue, Peer, Rotated, RouteHealth,
    Status, Stopping, TrustRequest, UiCode, UntrustRequest, Untrusted, Vault, VaultHeld,
};
use ferry_kit::{Kit, KitError, Settlement, WriteOptions, WriteResult};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The app name the CLI calls as.
const CLI_APP: &str = "ferry-cli";

pub async fn run(cli: Cli) -> Exit {
    let home = match Home::locate(cli.home.clone()) {
        Ok(home) => home,
        Err(err) => return fail(Exit::Usage, &err.to_string()),
    };
    let kit = crate::read_around::kit(&home, CLI_APP);
    let json = cli.json;
    match cli.command {
        Command::Serve(args) => serve(home, args).await,
        Command::Stop => stop(&kit, json).await,
        Command::Status => status(&kit, json).await,
        Command::Id => id(&home, &kit, json).await,
        Command::Trust {
            node_id,
            label,
            addrs,
        } => trust_peer(&home, &kit, json, node_id, label, addrs).await,
        Command::Untrust { label } => untrust_peer(&home, &kit, json, label).await,
        Command::Peers => peers(&kit, json).await,
        Command::Routes => routes(&kit, json).await,
        Command::Vault(VaultCommand::Create { name }) => {
            create_vault(&home, &kit, json, name).await
        }
        Command::Vault(VaultCommand::List) => list_vaults(&kit, json).await,
        Command::Vault(VaultCommand::Follow {
            name,
            owner,
            detach,
        }) => follow_vault(&kit, json, name, owner, detach).await,
        Command::Put {
            vault,
            key,
            value,
            file,
            write,
        } => {
            let value = match read_value(value, file) {
                Ok(value) => value,
                Err(err) => return fail(Exit::Usage, &err.to_string()),
            };
            let options = options(write);
            let _notice = write_wait_notice(&vault, &options);
            let started = ferry_peer::clock::now();
            let result = kit.put(&vault, &key, value, &options).await;
            report_write(result, json, ferry_peer::clock::since(started))
        }
        Command::Delete { vault, key, write } => {
            let options = options(write);
            let _notice = write_wait_notice(&vault, &options);
            let started = ferry_peer::clock::now();
            let result = kit.delete(&vault, &key, &options).await;
            report_write(result, json, ferry_peer::clock::since(started))
        }
        Command::Get { vault, key } => get(&kit, json, &vault, &key).await,
        Command::Calls { state } => calls(&kit, json, state).await,
        Command::Settle {
            request_id,
            wait,
            vault,
        } => settle(&kit, json, &request_id, wait, vault).await,
        Command::Tickets {
            action: None | Some(TicketsCommand::List),
        } => tickets(&kit, json).await,
        Command::Tickets {
            action: Some(TicketsCommand::Rotate),
        } => rotate_tickets(&kit, json).await,
        Command::List {
            vault,
            prefix,
            limit,
        } => list(&kit, json, &vault, &prefix, limit).await,
        Command::Watch {
            vault,
            after,
            count,
        } => watch(&kit, json, &vault, after, count).await,
        Command::Ui { print } => ui(&kit, json, print).await,
        Command::Doctor => doctor(&kit, json).await,
        Command::Completions { shell } => {
            super::generate::completions(shell, &mut std::io::stdout());
            Exit::Done
        }
        Command::Man { dir } => {
            let written = match dir {
                Some(dir) => super::generate::man_pages(&dir),
                None => super::generate::man_page(&mut std::io::stdout()),
            };
            match written {
                Ok(()) => Exit::Done,
                Err(err) => fail(Exit::Usage, &format!("cannot write the man pages: {err}")),
            }
        }
    }
}

/// Maps a failed non-write call to a message and an exit code; with `--json`, the error is
/// also a JSON object on standard output (`error`, `detail`), so scripts parse one shape.
fn kit_failure(err: KitError, json: bool) -> Exit {
    let (exit, code, detail) = match &err {
        KitError::LocalGatewayDown { detail } => (
            Exit::NothingWritten,
            "local_gateway_down".to_string(),
            detail.clone(),
        ),
        KitError::Answered {
            status,
            code,
            detail,
        } => {
            let exit = match status {
                400 | 401 => Exit::Usage,
                503 => Exit::NothingWritten,
                _ => Exit::Refused,
            };
            (exit, code.to_string(), detail.clone())
        }
        KitError::Broken { detail } => (Exit::Unknown, "broken".to_string(), detail.clone()),
        KitError::Protocol { detail } => (Exit::Unknown, "protocol".to_string(), detail.clone()),
        KitError::Invalid { detail } => (Exit::Usage, "bad_request".to_string(), detail.clone()),
    };
    if json {
        output::json(&json!({"error": code, "detail": detail}));
    }
    fail(exit, &format!("{code}: {detail}"))
}

fn fail(exit: Exit, message: &str) -> Exit {
    eprintln!("ferry: {message}");
    exit
}

/// The home's lock, for a command that writes the home itself because no gateway answered:
/// one that is starting or stopping holds it, and would not see the write until its next start.
fn lock_for_offline_write(home: &Home) -> Result<crate::home::HomeLock, Exit> {
    home.ensure()
        .and_then(|()| home.lock())
        .map_err(|err| fail(Exit::NothingWritten, &err.to_string()))
}

async fn serve(home: Home, args: ServeArgs) -> Exit {
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

/// An admin answer read as its type `T` (so a gateway that answers in another shape is an
/// error here, not a blank column), then as JSON for printing.
async fn admin_get<T: DeserializeOwned + Serialize>(
    kit: &Kit,
    path: &str,
) -> Result<Value, KitError> {
    let answer: T = kit.get_typed(path).await?;
    Ok(to_json(&answer))
}

/// An admin request whose answer is read as `T`, then as JSON for printing.
async fn admin_post<B: Serialize, T: DeserializeOwned + Serialize>(
    kit: &Kit,
    path: &str,
    body: &B,
) -> Result<Value, KitError> {
    let answer: T = kit.post_typed(path, body).await?;
    Ok(to_json(&answer))
}

/// An admin type as JSON (they are plain data: encoding cannot fail; `null` if it ever did).
fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

async fn stop(kit: &Kit, json: bool) -> Exit {
    match admin_post::<_, Stopping>(kit, "/v1/admin/stop", &json!({})).await {
        Ok(answer) => {
            if json {
                output::json(&answer);
            } else {
                println!("stopping: in-flight writes drain, then the gateway exits");
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn doctor(kit: &Kit, json: bool) -> Exit {
    let _notice = super::progress::WaitNotice::after(
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
        output::json(&to_json(&report));
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

async fn ui(kit: &Kit, json: bool, print: bool) -> Exit {
    let code: UiCode = match kit.post_typed("/v1/admin/ui-code", &json!({})).await {
        Ok(code) => code,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&to_json(&code));
        return Exit::Done;
    }
    if !print {
        // The link holds the code: it goes to the browser in a file only this user can read,
        // never on a command line (see `ui`).
        match super::ui::write_handover(
            &super::ui::handover_dir(),
            &code.url,
            Duration::from_secs(code.expires_in_s),
        ) {
            Ok(page) if super::ui::open_in_browser(page.as_os_str()) => {
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
        "open this link within {} s; it works once (the page then keeps its own read-only session)",
        code.expires_in_s
    );
    Exit::Done
}

async fn status(kit: &Kit, json: bool) -> Exit {
    match admin_get::<Status>(kit, "/v1/status").await {
        Ok(status) => {
            if json {
                output::json(&status);
            } else {
                for field in [
                    "node_id",
                    "label",
                    "api",
                    "addresses",
                    "uptime_s",
                    "peers",
                    "home",
                    "version",
                    "protocols",
                ] {
                    println!("{field:<10} {}", cell(status.get(field)));
                }
                print_owner_queue(status.get("owner_queue"));
                for mismatch in status
                    .get("version_mismatches")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    println!("{:<10} {mismatch}", "mismatch");
                }
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

/// The owner's queue in `ferry status`: depth by class, the rules, the busiest callers.
fn print_owner_queue(queue: Option<&Value>) {
    let Some(queue) = queue.and_then(|q| serde_json::from_value::<OwnerQueue>(q.clone()).ok())
    else {
        return;
    };
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

async fn id(home: &Home, kit: &Kit, json: bool) -> Exit {
    let key = match home.node_key() {
        Ok(key) => key,
        Err(err) => return fail(Exit::Usage, &err.to_string()),
    };
    let config = Config::load(&home.config_path()).unwrap_or_default();
    // A running gateway knows the addresses it actually bound; otherwise the configured one.
    let (label, addresses) = match admin_get::<Status>(kit, "/v1/status").await {
        Ok(status) => (
            cell(status.get("label")),
            status.get("addresses").cloned().unwrap_or(json!([])),
        ),
        Err(_) => (
            config.label_or_hostname().into_string(),
            json!([config.listen.to_string()]),
        ),
    };
    if json {
        output::json(
            &json!({"node_id": key.node_id().to_string(), "label": label, "addresses": addresses}),
        );
    } else {
        println!("{}", key.node_id());
    }
    Exit::Done
}

async fn trust_peer(
    home: &Home,
    kit: &Kit,
    json: bool,
    node_id: String,
    label: Label,
    addrs: Vec<String>,
) -> Exit {
    let body = TrustRequest {
        node_id,
        label: label.to_string(),
        routes: addrs,
    };
    let answer = match admin_post::<_, Peer>(kit, "/v1/admin/trust", &body).await {
        Ok(answer) => answer,
        Err(KitError::LocalGatewayDown { .. }) => {
            // No gateway running: check the same way and write the trust store directly.
            let parsed = crate::api::parse_trust_request(&body).map_err(|err| err.body.detail);
            let (_, node, routes) = match parsed {
                Ok(parsed) => parsed,
                Err(detail) => return fail(Exit::Usage, &detail),
            };
            let _lock = match lock_for_offline_write(home) {
                Ok(lock) => lock,
                Err(exit) => return exit,
            };
            let added = store::open(&home.db_path())
                .and_then(|conn| trust::add(&conn, &label, node, &routes, store::unix_ms()));
            match added {
                Ok(peer) => to_json(&crate::api::trusted_peer(&peer)),
                Err(err) => return fail(Exit::Usage, &err.to_string()),
            }
        }
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!(
            "trusted {} as {}",
            cell(answer.get("node_id")),
            cell(answer.get("label"))
        );
    }
    Exit::Done
}

async fn untrust_peer(home: &Home, kit: &Kit, json: bool, label: Label) -> Exit {
    let answer = match kit
        .post_typed::<_, Untrusted>(
            "/v1/admin/untrust",
            &UntrustRequest {
                label: label.to_string(),
            },
        )
        .await
    {
        Ok(answer) => to_json(&answer),
        Err(KitError::LocalGatewayDown { .. }) => {
            let _lock = match lock_for_offline_write(home) {
                Ok(lock) => lock,
                Err(exit) => return exit,
            };
            // No gateway runs: the sent mark on disk bounds what this home ever sent (a torn
            // one bounds nothing, so every id may have gone to the peer).
            let sent = match crate::call_log::sent_mark::read_at(&home.root().join("calls.sent")) {
                Ok(mark) => mark.unwrap_or(0),
                Err(_) => u64::MAX,
            };
            let sent_up_to_ms = crate::settlement::untrust_cover(sent, store::unix_ms());
            match store::open(&home.db_path())
                .and_then(|conn| trust::remove(&conn, &label, sent_up_to_ms))
            {
                Ok(Some(node)) => to_json(&Untrusted {
                    label: label.clone(),
                    node_id: node.to_string(),
                }),
                Ok(None) => {
                    return fail(
                        Exit::Usage,
                        &format!(
                        "no peer is trusted under the label {label:?}; `ferry peers` lists them"
                    ),
                    )
                }
                Err(err) => return fail(Exit::Usage, &err.to_string()),
            }
        }
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!("no longer trusting {}", cell(answer.get("label")));
    }
    Exit::Done
}

async fn peers(kit: &Kit, json: bool) -> Exit {
    match admin_get::<Vec<Peer>>(kit, "/v1/peers").await {
        Ok(peers) => {
            if json {
                output::json(&peers);
                return Exit::Done;
            }
            let rows: Vec<Vec<String>> = peers
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let routes = p
                        .get("routes")
                        .and_then(Value::as_array)
                        .map(|r| r.len())
                        .unwrap_or(0);
                    let trusted = if p.get("trusted") == Some(&json!(true)) {
                        "trusted"
                    } else {
                        "untrusted"
                    };
                    // A release before protocol 2 names none in its hello: its protocol says
                    // that much.
                    let release = match (p.get("release"), p.get("protocol")) {
                        (Some(Value::String(release)), _) => release.clone(),
                        (_, Some(protocol)) if protocol == &json!(1) => "before 0.2.0".into(),
                        _ => "-".into(),
                    };
                    vec![
                        cell(p.get("label")),
                        cell(p.get("node_id")),
                        trusted.into(),
                        routes.to_string(),
                        release,
                        cell(p.get("protocol")),
                        cell(p.get("last_error")),
                    ]
                })
                .collect();
            output::table(
                &[
                    "label",
                    "node id",
                    "trust",
                    "routes",
                    "release",
                    "protocol",
                    "last error",
                ],
                &rows,
            );
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn routes(kit: &Kit, json: bool) -> Exit {
    match admin_get::<Vec<RouteHealth>>(kit, "/v1/routes").await {
        Ok(routes) => {
            if json {
                output::json(&routes);
                return Exit::Done;
            }
            let rows: Vec<Vec<String>> = routes
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    [
                        "peer",
                        "kind",
                        "address",
                        "state",
                        "rtt_ms",
                        "last_heard_ms_ago",
                        "last_error",
                    ]
                    .iter()
                    .map(|f| cell(r.get(*f)))
                    .collect()
                })
                .collect();
            output::table(
                &[
                    "peer",
                    "kind",
                    "address",
                    "state",
                    "rtt ms",
                    "heard ms ago",
                    "last error",
                ],
                &rows,
            );
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn create_vault(home: &Home, kit: &Kit, json: bool, name: VaultName) -> Exit {
    let answer = match kit
        .post_typed::<_, VaultHeld>(
            "/v1/admin/vaults",
            &CreateVault {
                name: name.to_string(),
            },
        )
        .await
    {
        Ok(answer) => to_json(&answer),
        Err(KitError::LocalGatewayDown { .. }) => {
            let _lock = match lock_for_offline_write(home) {
                Ok(lock) => lock,
                Err(exit) => return exit,
            };
            let owner = match home.node_key() {
                Ok(key) => key.node_id(),
                Err(err) => return fail(Exit::Usage, &err.to_string()),
            };
            match store::open(&home.db_path())
                .and_then(|conn| vaults::create_owned(&conn, &name, owner, store::unix_ms()))
            {
                Ok(row) => to_json(&VaultHeld {
                    name: row.name,
                    owner: Config::load(&home.config_path())
                        .unwrap_or_default()
                        .label_or_hostname(),
                    role: "owner".into(),
                    revision: row.revision,
                }),
                Err(err) => return fail(Exit::Usage, &err.to_string()),
            }
        }
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!("created vault {} (owned here)", cell(answer.get("name")));
    }
    Exit::Done
}

async fn list_vaults(kit: &Kit, json: bool) -> Exit {
    match admin_get::<Vec<Vault>>(kit, "/v1/vaults").await {
        Ok(vaults) => {
            if json {
                output::json(&vaults);
                return Exit::Done;
            }
            let rows: Vec<Vec<String>> = vaults
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    [
                        "name",
                        "owner",
                        "role",
                        "revision",
                        "lag_revisions",
                        "lag_s",
                    ]
                    .iter()
                    .map(|f| cell(v.get(*f)))
                    .collect()
                })
                .collect();
            output::table(
                &["name", "owner", "role", "revision", "lag revs", "lag s"],
                &rows,
            );
            // Vault names two machines own are two vaults: each collision is said, with what
            // a call by the name reaches here.
            for v in vaults.as_array().into_iter().flatten() {
                if let Some(collision) = v.get("collision").and_then(|c| c.as_str()) {
                    println!(
                        "collision: {} (owner {}): {collision}",
                        cell(v.get("name")),
                        cell(v.get("owner"))
                    );
                }
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

/// Why `ferry put` has no value to write (nothing was sent).
#[derive(Debug, thiserror::Error)]
enum ValueError {
    #[error("cannot read {}: {source}", path.display())]
    File {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read standard input: {source}")]
    Stdin { source: std::io::Error },
    #[error("give the value, `-` to read standard input, or --file F")]
    Missing,
}

fn read_value(
    value: Option<String>,
    file: Option<std::path::PathBuf>,
) -> Result<Vec<u8>, ValueError> {
    match (value, file) {
        (_, Some(path)) => std::fs::read(&path).map_err(|source| ValueError::File { path, source }),
        (Some(dash), None) if dash == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|source| ValueError::Stdin { source })?;
            Ok(buf)
        }
        (Some(text), None) => Ok(text.into_bytes()),
        (None, None) => Err(ValueError::Missing),
    }
}

/// The write's options. The CLI makes the request id itself when none is given (the kit would
/// too), so the id is known before anything is sent.
/// After a second of waiting for a write's answer, says so, with the request id: a person who
/// gives up with Ctrl-C then still has the id to settle it with (the write goes on).
fn write_wait_notice(vault: &str, options: &WriteOptions) -> super::progress::WaitNotice {
    let id = options.request_id.clone().unwrap_or_default();
    super::progress::WaitNotice::after(
        std::time::Duration::from_secs(1),
        format!(
            "waiting for the owner of {vault} to answer (up to {} s); if you stop waiting, the write still goes on: `ferry settle {id} --vault {vault}` tells what became of it",
            options.timeout.as_deref().unwrap_or("30")
        ),
    )
}

fn options(flags: WriteFlags) -> WriteOptions {
    WriteOptions {
        if_revision: flags.if_revision,
        request_id: Some(
            flags
                .request_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string()),
        ),
        timeout: flags.timeout,
        client_timeout: None,
        background: flags.background,
    }
}

/// Prints a write's result and returns its exit code (SPEC 13). `elapsed` is the time the
/// gateway took to answer (the call itself, not this process's start), in the JSON output.
fn report_write(result: WriteResult, json: bool, elapsed: std::time::Duration) -> Exit {
    let (exit, object) = match &result {
        WriteResult::Done {
            revision,
            request_id,
        } => (
            Exit::Done,
            json!({"outcome": "done", "request_id": request_id, "revision": revision}),
        ),
        WriteResult::Refused {
            code,
            detail,
            request_id,
            current_revision,
            retry_after,
            ..
        } => {
            let mut object = json!({"outcome": "refused", "request_id": request_id, "error": code.as_str(), "detail": detail});
            if let Some(revision) = current_revision {
                object["current_revision"] = json!(revision);
            }
            if let Some(after) = retry_after {
                object["retry_after_s"] = json!(after.as_secs());
            }
            (Exit::Refused, object)
        }
        WriteResult::NotCarriedOut {
            request_id,
            reason,
            detail,
        } => (
            Exit::NothingWritten,
            json!({"outcome": "not_carried_out", "request_id": request_id, "error": "not_carried_out", "reason": reason, "detail": detail}),
        ),
        WriteResult::Unavailable { request_id, detail } => (
            Exit::NothingWritten,
            json!({"outcome": "unavailable", "request_id": request_id, "error": "unavailable", "detail": detail}),
        ),
        WriteResult::OutcomeUnknown {
            request_id,
            vault,
            owner,
            detail,
        } => (
            Exit::Unknown,
            json!({"outcome": "outcome_unknown", "request_id": request_id, "vault": vault, "owner": owner, "error": "outcome_unknown", "detail": detail}),
        ),
        WriteResult::Invalid { code, detail, .. } => (
            Exit::Usage,
            json!({"outcome": "refused", "request_id": null, "error": code.as_str(), "detail": detail}),
        ),
        WriteResult::LocalGatewayDown { detail } => (
            Exit::NothingWritten,
            json!({"outcome": "unavailable", "request_id": null, "error": "local_gateway_down", "detail": detail}),
        ),
    };
    if json {
        let mut object = object;
        object["elapsed_ms"] = json!((elapsed.as_secs_f64() * 1000.0 * 100.0).round() / 100.0);
        output::json(&object);
    } else if let WriteResult::Done {
        revision,
        request_id,
    } = &result
    {
        println!("done: revision {revision} (request {request_id})");
    } else {
        eprintln!(
            "ferry: {}: {}",
            cell(object.get("error")),
            cell(object.get("detail"))
        );
        if let WriteResult::OutcomeUnknown {
            request_id, vault, ..
        } = &result
        {
            eprintln!("ferry: the write may or may not have happened; do not resend it under a new id; `ferry settle {request_id} --vault {vault}` says what became of it");
        }
        if let (Some(after), Some(request_id)) = (result.may_resend_after(), result.request_id()) {
            eprintln!(
                "ferry: nothing was written; wait {} s (the Retry-After of the refusal), then send it again with --request-id {request_id}",
                after.as_secs().max(1)
            );
        }
    }
    exit
}

async fn get(kit: &Kit, json: bool, vault: &str, key: &str) -> Exit {
    match kit.get(vault, key).await {
        Ok(record) => {
            if json {
                let mut object = json!({"revision": record.revision, "source": record.source, "stale": record.stale});
                match String::from_utf8(record.value) {
                    Ok(text) => object["value"] = json!(text),
                    Err(bytes) => {
                        object["value_base64"] =
                            json!(base64::engine::general_purpose::STANDARD
                                .encode(bytes.into_bytes()))
                    }
                }
                output::json(&object);
            } else {
                use std::io::Write;
                let mut stdout = std::io::stdout();
                if stdout
                    .write_all(&record.value)
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    return fail(Exit::Unknown, "standard output closed");
                }
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn list(kit: &Kit, json: bool, vault: &str, prefix: &str, limit: Option<usize>) -> Exit {
    match kit.list(vault, prefix, limit).await {
        Ok(keys) => {
            if json {
                output::json(&Value::Array(
                    keys.iter()
                        .map(|k| json!({"key": k.key, "revision": k.revision}))
                        .collect(),
                ));
            } else {
                let rows: Vec<Vec<String>> = keys
                    .iter()
                    .map(|k| vec![k.key.clone(), k.revision.to_string()])
                    .collect();
                output::table(&["key", "revision"], &rows);
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

/// How long `ferry watch` waits on one page before asking again.
const WATCH_WAIT: Duration = Duration::from_secs(25);

/// The pause before `ferry watch` asks a gateway that could not be reached again.
const WATCH_RETRY: Duration = Duration::from_secs(1);

async fn watch(kit: &Kit, json: bool, vault: &str, after: u64, count: Option<u64>) -> Exit {
    let mut feed = ferry_kit::ChangeFeed::new(kit.clone(), vault, after, WATCH_WAIT);
    let mut shown = 0u64;
    let mut said_down = false;
    // Said once per quiet stretch (a new one each time the feed moves on), not per long poll.
    let mut notice: Option<(u64, super::progress::WaitNotice)> = None;
    loop {
        if count.is_some_and(|count| shown >= count) {
            return Exit::Done;
        }
        let cursor = feed.cursor();
        if notice.as_ref().map(|(at, _)| *at) != Some(cursor) {
            notice = Some((
                cursor,
                super::progress::WaitNotice::after(
                    Duration::from_secs(2),
                    format!(
                        "waiting for changes to {vault} after revision {cursor} (Ctrl-C to stop)"
                    ),
                ),
            ));
        }
        let changes = match feed.next().await {
            Ok(changes) => changes,
            // The gateway restarting (down, its connection broken under a long poll, or
            // stopping): say so once, and carry on from the same revision; a page is safe to
            // ask for again.
            Err(
                KitError::LocalGatewayDown { detail }
                | KitError::Broken { detail }
                | KitError::Answered {
                    status: 503,
                    detail,
                    ..
                },
            ) => {
                if !said_down {
                    eprintln!(
                        "waiting for the gateway ({detail}); from revision {}",
                        feed.cursor()
                    );
                    said_down = true;
                }
                tokio::time::sleep(WATCH_RETRY).await;
                continue;
            }
            Err(err) => return kit_failure(err, json),
        };
        said_down = false;
        for change in changes {
            if json {
                output::json_line(&json!({
                    "key": change.key,
                    "revision": change.revision,
                    "deleted": change.deleted,
                }));
            } else if change.deleted {
                println!("{} {} deleted", change.revision, change.key);
            } else {
                println!("{} {}", change.revision, change.key);
            }
            shown += 1;
            if count.is_some_and(|count| shown >= count) {
                return Exit::Done;
            }
        }
    }
}

async fn calls(kit: &Kit, json: bool, state: Option<String>) -> Exit {
    let path = match state.as_deref() {
        None => "/v1/calls".to_string(),
        Some(state) => format!("/v1/calls?state={state}"),
    };
    match kit.get_json(&path).await {
        Ok(calls) => {
            if json {
                output::json(&calls);
                return Exit::Done;
            }
            let rows: Vec<Vec<String>> = calls
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    ["request_id", "owner", "vault", "state", "since"]
                        .iter()
                        .map(|f| cell(c.get(*f)))
                        .collect()
                })
                .collect();
            output::table(
                &["request id", "owner", "vault", "state", "since (unix ms)"],
                &rows,
            );
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn settle(
    kit: &Kit,
    json: bool,
    request_id: &str,
    wait: Option<String>,
    vault: Option<VaultName>,
) -> Exit {
    let wait = match wait.as_deref().map(ferry_kit::contract::parse_wait) {
        None => None,
        Some(Some(wait)) => Some(wait),
        Some(None) => {
            return fail(
                Exit::Usage,
                "--wait takes seconds between 0 and 600 (e.g. 2.5)",
            )
        }
    };
    let _notice = super::progress::WaitNotice::after(
        std::time::Duration::from_secs(1),
        match wait {
            Some(wait) => format!(
                "asking the owner what became of {request_id} (waiting up to {:.1} s while it runs)",
                wait.as_secs_f64()
            ),
            None => format!("asking the owner what became of {request_id}"),
        },
    );
    let settlement = match kit.settle(request_id, vault.as_deref(), wait).await {
        Ok(settlement) => settlement,
        // Whatever went wrong with the settle query, the write's outcome is still unknown
        // (exit 4), never "nothing written" (3): a bad argument is the only exception.
        Err(err) => {
            let exit = kit_failure(err, json);
            return if exit == Exit::Usage {
                exit
            } else {
                Exit::Unknown
            };
        }
    };
    let (exit, object) = match &settlement {
        Settlement::Done { revision } => (
            Exit::Done,
            json!({"request_id": request_id, "state": "done", "status": 200, "revision": revision}),
        ),
        Settlement::Refused {
            status,
            code,
            detail,
        } => (
            Exit::Refused,
            json!({"request_id": request_id, "state": "done", "status": status, "error": code.as_str(), "detail": detail}),
        ),
        Settlement::NotCarriedOut { reason } => (
            Exit::NothingWritten,
            json!({"request_id": request_id, "state": "not_carried_out", "reason": reason}),
        ),
        Settlement::Running => (
            Exit::Unknown,
            json!({"request_id": request_id, "state": "running"}),
        ),
        Settlement::Unavailable { detail } => (
            Exit::Unknown,
            json!({"request_id": request_id, "state": "unknown", "error": "unavailable", "detail": detail}),
        ),
        Settlement::NeverSent { detail } => (
            Exit::NothingWritten,
            json!({"request_id": request_id, "state": "never_sent", "error": "unknown_call", "detail": detail}),
        ),
    };
    if json {
        output::json(&object);
    } else {
        let mut line = format!("{request_id}: {}", cell(object.get("state")));
        for field in ["revision", "error", "reason", "detail"] {
            if let Some(value) = object.get(field).filter(|v| !v.is_null()) {
                line.push_str(&format!(" {field}={}", cell(Some(value))));
            }
        }
        println!("{line}");
    }
    exit
}

async fn tickets(kit: &Kit, json: bool) -> Exit {
    match admin_get::<Vec<HeldTicket>>(kit, "/v1/tickets").await {
        Ok(tickets) => {
            if json {
                output::json(&tickets);
                return Exit::Done;
            }
            let rows: Vec<Vec<String>> = tickets
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    ["owner", "app", "vault", "verbs", "epoch", "expires_in_s"]
                        .iter()
                        .map(|f| cell(t.get(*f)))
                        .collect()
                })
                .collect();
            output::table(
                &["owner", "app", "vault", "verbs", "epoch", "expires in s"],
                &rows,
            );
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn rotate_tickets(kit: &Kit, json: bool) -> Exit {
    match admin_post::<_, Rotated>(kit, "/v1/admin/tickets/rotate", &json!({})).await {
        Ok(answer) => {
            if json {
                output::json(&answer);
            } else {
                println!(
                    "ticket epoch is now {}; every ticket issued before is refused at the door",
                    cell(answer.get("epoch"))
                );
            }
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

async fn follow_vault(kit: &Kit, json: bool, name: VaultName, owner: Label, detach: bool) -> Exit {
    let held = match kit
        .post_typed::<_, VaultHeld>(
            "/v1/admin/vaults/follow",
            &FollowVault {
                name: name.into_string(),
                owner: owner.into_string(),
            },
        )
        .await
    {
        Ok(held) => held,
        Err(err) => return kit_failure(err, json),
    };
    if !json {
        println!("following vault {} from {}", held.name, held.owner);
    }
    if !detach {
        wait_for_catch_up(kit, json, &held.name).await;
    } else if !json {
        println!("it syncs in the background (`ferry vault list` shows the lag)");
    }
    if json {
        output::json(&to_json(&held));
    }
    Exit::Done
}

/// How long the catch-up may go without any progress before the CLI stops waiting for it.
const CATCH_UP_STALL: std::time::Duration = std::time::Duration::from_secs(30);

/// Shows the replica's catch-up (a bar on a terminal, plain lines elsewhere, nothing with
/// `--json`) until it has caught up with its owner, or has made no progress for
/// [`CATCH_UP_STALL`]: the replica syncs on in the background either way, so this never fails.
async fn wait_for_catch_up(kit: &Kit, json: bool, vault: &str) {
    use super::progress::{CatchUp, Display};
    let display = Display::stderr();
    let show = |line: &str| {
        if !json {
            display.show(line);
        }
    };
    let mut catch_up = CatchUp::default();
    let mut last_move = (ferry_peer::clock::now(), None);
    loop {
        let now = ferry_peer::clock::now();
        let vaults: Vec<Vault> = match kit.get_typed("/v1/vaults").await {
            Ok(vaults) => vaults,
            Err(err) => {
                if !json {
                    display.finish();
                    eprintln!(
                        "cannot follow the replica's progress ({err}); it syncs in the background"
                    );
                }
                return;
            }
        };
        let row = vaults
            .into_iter()
            .find(|row| row.name == vault && row.role == "replica");
        if let Some((reached, sync)) = row.and_then(|row| Some((row.revision?, row.sync?))) {
            // The replica's revision (its cursor) against the owner's: a change page holds each
            // key once, so counting applied changes would fall short of the owner's revision
            // whenever a key was written twice.
            catch_up.sample(reached, now);
            if last_move.1 != Some(reached) {
                last_move = (now, Some(reached));
            }
            let mut line =
                catch_up.line(vault, reached, sync.owner_revision, display.is_terminal());
            if let Some(err) = &sync.last_error {
                line.push_str(&format!("  (retrying: {err})"));
            }
            let caught_up = sync.last_pull_ms_ago.is_some() && reached >= sync.owner_revision;
            if caught_up {
                show(&line);
                if !json {
                    display.finish();
                    eprintln!(
                        "caught up with the owner at revision {}",
                        sync.owner_revision
                    );
                }
                return;
            }
            if display.is_terminal() || catch_up.plain_due(now) {
                show(&line);
            }
            if now.duration_since(last_move.0) >= CATCH_UP_STALL {
                if !json {
                    display.finish();
                    eprintln!(
                        "no progress for {} s{}; the replica keeps syncing in the background (`ferry vault list` shows it)",
                        CATCH_UP_STALL.as_secs(),
                        sync.last_error.map(|err| format!(" ({err})")).unwrap_or_default()
                    );
                }
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}
