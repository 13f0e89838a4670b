//! The commands about other gateways: `trust`, `untrust`, `peers`, `routes`.

use ferry_kit::admin::{Peer, RouteHealth, TrustRequest, UntrustRequest, Untrusted};
use ferry_kit::Kit;

use super::{fail, lock_for_offline_write, output, show, show_post_or_offline};
use crate::cli::Exit;
use crate::home::Home;
use crate::names::Label;
use crate::store::{self, trust};

pub(super) async fn trust(
    home: &Home,
    kit: &Kit,
    json: bool,
    node_id: String,
    label: Label,
    addrs: Vec<String>,
) -> Exit {
    let body = TrustRequest {
        node_id,
        label: label.into_string(),
        routes: addrs,
    };
    let offline = |body: &TrustRequest| trust_offline(home, body);
    show_post_or_offline(
        kit,
        json,
        "/v1/admin/trust",
        &body,
        offline,
        |peer: Peer| {
            println!("trusted {} as {}", peer.node_id, peer.label);
        },
    )
    .await
}

/// No gateway running: checks the request the way the gateway would and writes the trust
/// store directly.
fn trust_offline(home: &Home, body: &TrustRequest) -> Result<Peer, Exit> {
    let (label, node, routes) =
        crate::api::parse_trust_request(body).map_err(|err| fail(Exit::Usage, &err.body.detail))?;
    let _lock = lock_for_offline_write(home)?;
    store::open(&home.db_path())
        .and_then(|conn| trust::add(&conn, &label, node, &routes, store::unix_ms()))
        .map(|peer| crate::api::trusted_peer(&peer))
        .map_err(|err| fail(Exit::Usage, &err.to_string()))
}

pub(super) async fn untrust(home: &Home, kit: &Kit, json: bool, label: Label) -> Exit {
    let body = UntrustRequest {
        label: label.to_string(),
    };
    let offline = |_: &UntrustRequest| untrust_offline(home, &label);
    show_post_or_offline(
        kit,
        json,
        "/v1/admin/untrust",
        &body,
        offline,
        |gone: Untrusted| {
            println!("no longer trusting {}", gone.label);
        },
    )
    .await
}

/// No gateway running: removes the peer from the trust store directly.
fn untrust_offline(home: &Home, label: &Label) -> Result<Untrusted, Exit> {
    let _lock = lock_for_offline_write(home)?;
    // The sent mark on disk bounds what this home ever sent (a torn one bounds nothing, so
    // every id may have gone to the peer).
    let sent = match crate::call_log::sent_mark::read_at(&home.root().join("calls.sent")) {
        Ok(mark) => mark.unwrap_or(0),
        Err(_) => u64::MAX,
    };
    let sent_up_to_ms = crate::settlement::untrust_cover(sent, store::unix_ms());
    match store::open(&home.db_path()).and_then(|conn| trust::remove(&conn, label, sent_up_to_ms)) {
        Ok(Some(node)) => Ok(Untrusted {
            label: label.clone(),
            node_id: node.to_string(),
        }),
        Ok(None) => Err(fail(
            Exit::Usage,
            &format!("no peer is trusted under the label {label:?}; `ferry peers` lists them"),
        )),
        Err(err) => Err(fail(Exit::Usage, &err.to_string())),
    }
}

pub(super) async fn list(kit: &Kit, json: bool) -> Exit {
    show(kit, json, "/v1/peers", print_peers).await
}

fn print_peers(peers: Vec<Peer>) {
    let rows: Vec<Vec<String>> = peers
        .into_iter()
        .map(|p| {
            let trusted = if p.trusted { "trusted" } else { "untrusted" };
            // A release before protocol 2 names none in its hello: its protocol says that much.
            let release = match (p.release, p.protocol) {
                (Some(release), _) => release,
                (None, Some(1)) => "before 0.2.0".into(),
                (None, _) => "-".into(),
            };
            vec![
                p.label,
                p.node_id,
                trusted.into(),
                p.routes.len().to_string(),
                release,
                output::cell(p.protocol),
                output::cell(p.last_error),
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
}

pub(super) async fn routes(kit: &Kit, json: bool) -> Exit {
    show(kit, json, "/v1/routes", print_routes).await
}

fn print_routes(routes: Vec<RouteHealth>) {
    let rows: Vec<Vec<String>> = routes
        .into_iter()
        .map(|r| {
            vec![
                r.peer,
                r.kind,
                r.address,
                r.state,
                output::float(r.rtt_ms),
                output::cell(r.last_heard_ms_ago),
                output::cell(r.last_error),
            ]
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
}
