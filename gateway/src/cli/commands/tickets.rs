//! The ticket commands: `tickets` lists the tickets this gateway holds, `tickets rotate`
//! refuses every ticket its owner issued so far.

use ferry_kit::admin::{HeldTicket, NoArguments, Rotated};
use ferry_kit::Kit;

use super::{output, show, show_post};
use crate::cli::Exit;

pub(super) async fn list(kit: &Kit, json: bool) -> Exit {
    show(kit, json, "/v1/tickets", print_tickets).await
}

fn print_tickets(tickets: Vec<HeldTicket>) {
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
}

pub(super) async fn rotate(kit: &Kit, json: bool) -> Exit {
    let path = "/v1/admin/tickets/rotate";
    show_post(kit, json, path, &NoArguments {}, |rotated: Rotated| {
        println!(
            "ticket epoch is now {}; every ticket issued before is refused at the door",
            rotated.epoch
        );
    })
    .await
}
