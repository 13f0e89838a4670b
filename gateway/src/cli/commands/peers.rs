//! The commands about other gateways: `trust`, `untrust`, `peers`, `routes`.

use ferry_kit::admin::{Peer, RouteHealth, TrustRequest, UntrustRequest, Untrusted};
use ferry_kit::{Kit, KitError};

use super::{fail, kit_failure, lock_for_offline_write, output};
use crate::cli::Exit;
use crate::home::Home;
use crate::store::{self, trust};

pub(super) async fn trust(
    home: &Home,
    kit: &Kit,
    json: bool,
    node_id: String,
    label: String,
    addrs: Vec<String>,
) -> Exit {
    let body = TrustRequest {
        node_id,
        label,
        routes: addrs,
    };
    let answer: Peer = match kit.post_typed("/v1/admin/trust", &body).await {
        Ok(answer) => answer,
        Err(KitError::LocalGatewayDown { .. }) => match trust_offline(home, &body) {
            Ok(answer) => answer,
            Err(exit) => return exit,
        },
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!("trusted {} as {}", answer.node_id, answer.label);
    }
    Exit::Done
}

/// No gateway running: checks the request the way the gateway would and writes the trust
/// store directly.
fn trust_offline(home: &Home, body: &TrustRequest) -> Result<Peer, Exit> {
    let (node, routes) =
        crate::api::parse_trust_request(body).map_err(|err| fail(Exit::Usage, &err.body.detail))?;
    let _lock = lock_for_offline_write(home)?;
    store::open(&home.db_path())
        .and_then(|conn| trust::add(&conn, &body.label, node, &routes, store::unix_ms()))
        .map(|peer| crate::api::trusted_peer(&peer))
        .map_err(|err| fail(Exit::Usage, &err.to_string()))
}

pub(super) async fn untrust(home: &Home, kit: &Kit, json: bool, label: String) -> Exit {
    let body = UntrustRequest { label };
    let answer: Untrusted = match kit.post_typed("/v1/admin/untrust", &body).await {
        Ok(answer) => answer,
        Err(KitError::LocalGatewayDown { .. }) => match untrust_offline(home, body.label) {
            Ok(answer) => answer,
            Err(exit) => return exit,
        },
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&answer);
    } else {
        println!("no longer trusting {}", answer.label);
    }
    Exit::Done
}

/// No gateway running: removes the peer from the trust store directly.
fn untrust_offline(home: &Home, label: String) -> Result<Untrusted, Exit> {
    let _lock = lock_for_offline_write(home)?;
    // The sent mark on disk bounds what this home ever sent (a torn one bounds nothing, so
    // every id may have gone to the peer).
    let sent = match crate::call_log::sent_mark::read_at(&home.root().join("calls.sent")) {
        Ok(mark) => mark.unwrap_or(0),
        Err(_) => u64::MAX,
    };
    let sent_up_to_ms = crate::settlement::untrust_cover(sent, store::unix_ms());
    match store::open(&home.db_path()).and_then(|conn| trust::remove(&conn, &label, sent_up_to_ms))
    {
        Ok(Some(node)) => Ok(Untrusted {
            label,
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
    let peers: Vec<Peer> = match kit.get_typed("/v1/peers").await {
        Ok(peers) => peers,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&peers);
        return Exit::Done;
    }
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
    Exit::Done
}

pub(super) async fn routes(kit: &Kit, json: bool) -> Exit {
    let routes: Vec<RouteHealth> = match kit.get_typed("/v1/routes").await {
        Ok(routes) => routes,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&routes);
        return Exit::Done;
    }
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
    Exit::Done
}
