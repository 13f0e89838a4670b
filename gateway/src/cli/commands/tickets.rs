//! The ticket commands: `tickets` lists the tickets this gateway holds, `tickets rotate`
//! refuses every ticket its owner issued so far.

use ferry_kit::admin::{HeldTicket, NoArguments, Rotated};
use ferry_kit::Kit;

use super::{kit_failure, output};
use crate::cli::Exit;

pub(super) async fn list(kit: &Kit, json: bool) -> Exit {
    let tickets: Vec<HeldTicket> = match kit.get_typed("/v1/tickets").await {
        Ok(tickets) => tickets,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&tickets);
        return Exit::Done;
    }
    let rows: Vec<Vec<String>> = tickets
        .into_iter()
        .map(|t| {
            vec![
                t.owner,
                t.app,
                t.vault,
                t.verbs,
                t.epoch.to_string(),
                t.expires_in_s.to_string(),
            ]
        })
        .collect();
    output::table(
        &["owner", "app", "vault", "verbs", "epoch", "expires in s"],
        &rows,
    );
    Exit::Done
}

pub(super) async fn rotate(kit: &Kit, json: bool) -> Exit {
    let answer: Rotated = match kit
        .post_typed("/v1/admin/tickets/rotate", &NoArguments {})
        .await
    {
        Ok(answer) => answer,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!(
            "ticket epoch is now {}; every ticket issued before is refused at the door",
            answer.epoch
        );
    }
    Exit::Done
}
