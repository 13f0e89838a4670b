//! What each command does, one module per thing it works on: the gateway itself (`gateway`:
//! serve, stop, status, id, doctor, ui), `peers` (trust and routes), `vaults`, `records`
//! (writes, reads, listings, the change feed), `calls` (unknown outcomes and settling them)
//! and `tickets`. This module runs the one asked for and turns a failed call into a message
//! and an exit code.
//!
//! Commands that talk to a gateway use the [`Kit`](ferry_kit::Kit) and read its answers as the kit's types;
//! `trust`, `untrust`, `vault create` and `id` also work with no gateway running, on the state
//! directory directly (the gateway reads it when it starts). With `--json` every command
//! prints one typed value (see `output`).

mod calls;
mod gateway;
mod peers;
mod records;
mod tickets;
mod vaults;

use ferry_kit::{Kit, KitError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::output;
use super::{Cli, Command, Exit, TicketsCommand, VaultCommand};
use crate::home::Home;

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
        Command::Serve(args) => gateway::serve(home, args).await,
        Command::Stop => gateway::stop(&kit, json).await,
        Command::Status => gateway::status(&kit, json).await,
        Command::Id => gateway::id(&home, &kit, json).await,
        Command::Doctor => gateway::doctor(&kit, json).await,
        Command::Ui { print, read_only } => gateway::ui(&kit, json, print, read_only).await,
        Command::Trust {
            node_id,
            label,
            addrs,
        } => peers::trust(&home, &kit, json, node_id, label, addrs).await,
        Command::Untrust { label } => peers::untrust(&home, &kit, json, label).await,
        Command::Peers => peers::list(&kit, json).await,
        Command::Routes => peers::routes(&kit, json).await,
        Command::Vault(VaultCommand::Create { name }) => {
            vaults::create(&home, &kit, json, name).await
        }
        Command::Vault(VaultCommand::List) => vaults::list(&kit, json).await,
        Command::Vault(VaultCommand::Follow {
            name,
            owner,
            detach,
        }) => vaults::follow(&kit, json, name, owner, detach).await,
        Command::Vault(VaultCommand::Unfollow { name }) => vaults::unfollow(&kit, json, name).await,
        Command::Put {
            vault,
            key,
            value,
            file,
            write,
        } => records::put(&kit, json, &vault, &key, value, file, write).await,
        Command::Delete { vault, key, write } => {
            records::delete(&kit, json, &vault, &key, write).await
        }
        Command::Get { vault, key } => records::get(&kit, json, &vault, &key).await,
        Command::List {
            vault,
            prefix,
            limit,
        } => records::list(&kit, json, &vault, &prefix, limit).await,
        Command::Watch {
            vault,
            after,
            count,
        } => records::watch(&kit, json, &vault, after, count).await,
        Command::Calls { state } => calls::list(&kit, json, state).await,
        Command::Settle {
            request_id,
            wait,
            vault,
        } => calls::settle(&kit, json, &request_id, wait, vault).await,
        Command::Tickets {
            action: None | Some(TicketsCommand::List),
        } => tickets::list(&kit, json).await,
        Command::Tickets {
            action: Some(TicketsCommand::Rotate),
        } => tickets::rotate(&kit, json).await,
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

/// Reads the answer of `GET path` as `T` and prints it: as JSON with `--json`, else as
/// `for_people` has it.
async fn show<T: DeserializeOwned + Serialize>(
    kit: &Kit,
    json: bool,
    path: &str,
    for_people: impl FnOnce(T),
) -> Exit {
    print_answer(kit.get_typed(path).await, json, for_people)
}

/// Sends `body` to `POST path`, reads the answer as `T` and prints it, as [`show`] does.
async fn show_post<B: Serialize, T: DeserializeOwned + Serialize>(
    kit: &Kit,
    json: bool,
    path: &str,
    body: &B,
    for_people: impl FnOnce(T),
) -> Exit {
    print_answer(kit.post_typed(path, body).await, json, for_people)
}

/// Like [`show_post`], but with no gateway running `offline` does the same to the state
/// directory instead (and has said why when it cannot).
async fn show_post_or_offline<B: Serialize, T: DeserializeOwned + Serialize>(
    kit: &Kit,
    json: bool,
    path: &str,
    body: &B,
    offline: impl FnOnce(&B) -> Result<T, Exit>,
    for_people: impl FnOnce(T),
) -> Exit {
    let answer = match kit.post_typed(path, body).await {
        Err(KitError::LocalGatewayDown { .. }) => match offline(body) {
            Ok(answer) => Ok(answer),
            Err(exit) => return exit,
        },
        answer => answer,
    };
    print_answer(answer, json, for_people)
}

fn print_answer<T: Serialize>(
    answer: Result<T, KitError>,
    json: bool,
    for_people: impl FnOnce(T),
) -> Exit {
    match answer {
        Ok(answer) if json => output::json(&answer),
        Ok(answer) => for_people(answer),
        Err(err) => return kit_failure(err, json),
    }
    Exit::Done
}

/// `--json`'s answer when a call other than a write failed.
#[derive(Debug, Serialize)]
struct CliError<'a> {
    error: &'a str,
    detail: &'a str,
}

/// Maps a failed non-write call to a message and an exit code; with `--json`, the error is
/// also a JSON object on standard output (`error`, `detail`), so scripts parse one shape.
fn kit_failure(err: KitError, json: bool) -> Exit {
    let (exit, error, detail) = match &err {
        KitError::LocalGatewayDown { detail } => {
            (Exit::NothingWritten, "local_gateway_down", detail)
        }
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
            (exit, code.as_str(), detail)
        }
        KitError::Broken { detail } => (Exit::Unknown, "broken", detail),
        KitError::Protocol { detail } => (Exit::Unknown, "protocol", detail),
        KitError::Invalid { detail } => (Exit::Usage, "bad_request", detail),
    };
    if json {
        output::json(&CliError { error, detail });
    }
    fail(exit, &format!("{error}: {detail}"))
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
