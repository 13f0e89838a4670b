//! The vault commands: `vault create`, `vault follow` (and showing its catch-up), `vault
//! unfollow`, `vault list`.

use std::time::Duration;

use ferry_kit::admin::{CreateVault, FollowVault, UnfollowVault, Unfollowed, Vault, VaultHeld};
use ferry_kit::Kit;

use super::{fail, kit_failure, lock_for_offline_write, output, show, show_post_or_offline};
use crate::cli::progress::{CatchUp, Display};
use crate::cli::Exit;
use crate::config::Config;
use crate::home::Home;
use crate::names::{Label, VaultName};
use crate::store::{self, vaults};

pub(super) async fn create(home: &Home, kit: &Kit, json: bool, name: VaultName) -> Exit {
    let body = CreateVault {
        name: name.to_string(),
    };
    let offline = |_: &CreateVault| create_offline(home, &name);
    show_post_or_offline(
        kit,
        json,
        "/v1/admin/vaults",
        &body,
        offline,
        |held: VaultHeld| {
            println!("created vault {} (owned here)", held.name);
        },
    )
    .await
}

/// No gateway running: writes the vault into the store directly (the name was checked as the
/// argument was parsed).
fn create_offline(home: &Home, name: &VaultName) -> Result<VaultHeld, Exit> {
    let _lock = lock_for_offline_write(home)?;
    let owner = home
        .node_key()
        .map_err(|err| fail(Exit::Usage, &err.to_string()))?
        .node_id();
    let row = store::open(&home.db_path())
        .and_then(|conn| vaults::create_owned(&conn, name, owner, store::unix_ms()))
        .map_err(|err| fail(Exit::Usage, &err.to_string()))?;
    Ok(VaultHeld {
        name: row.name,
        owner: Config::load(&home.config_path())
            .unwrap_or_default()
            .label_or_hostname(),
        role: "owner".into(),
        revision: row.revision,
    })
}

pub(super) async fn list(kit: &Kit, json: bool) -> Exit {
    show(kit, json, "/v1/vaults", print_vaults).await
}

fn print_vaults(vaults: Vec<Vault>) {
    let rows: Vec<Vec<String>> = vaults
        .iter()
        .map(|v| {
            vec![
                v.name.to_string(),
                v.owner.clone(),
                v.role.clone(),
                output::cell(v.revision),
                output::cell(v.lag_revisions),
                output::float(v.lag_s),
            ]
        })
        .collect();
    output::table(
        &["name", "owner", "role", "revision", "lag revs", "lag s"],
        &rows,
    );
    // Vault names two machines own are two vaults: each collision is said, with what a call
    // by the name reaches here.
    for v in &vaults {
        if let Some(collision) = &v.collision {
            println!("collision: {} (owner {}): {collision}", v.name, v.owner);
        }
    }
}

pub(super) async fn follow(
    kit: &Kit,
    json: bool,
    name: VaultName,
    owner: Label,
    detach: bool,
) -> Exit {
    let body = FollowVault {
        name: name.into_string(),
        owner: owner.into_string(),
    };
    let held: VaultHeld = match kit.post_typed("/v1/admin/vaults/follow", &body).await {
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
        output::json(&held);
    }
    Exit::Done
}

pub(super) async fn unfollow(kit: &Kit, json: bool, name: VaultName) -> Exit {
    let body = UnfollowVault {
        name: name.into_string(),
    };
    match kit
        .post_typed::<_, Unfollowed>("/v1/admin/vaults/unfollow", &body)
        .await
    {
        Ok(gone) if json => {
            output::json(&gone);
            Exit::Done
        }
        Ok(gone) => {
            println!(
                "no longer following vault {} from {} (the replica, at revision {}, is removed; reads go to the owner)",
                gone.name, gone.owner, gone.revision
            );
            Exit::Done
        }
        Err(err) => kit_failure(err, json),
    }
}

/// How long the catch-up may go without any progress before the CLI stops waiting for it.
const CATCH_UP_STALL: Duration = Duration::from_secs(30);

/// Shows the replica's catch-up (a bar on a terminal, plain lines elsewhere, nothing with
/// `--json`) until it has caught up with its owner, or has made no progress for
/// [`CATCH_UP_STALL`]: the replica syncs on in the background either way, so this never fails.
async fn wait_for_catch_up(kit: &Kit, json: bool, vault: &str) {
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
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
