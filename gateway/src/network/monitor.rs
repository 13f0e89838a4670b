//! The route prober: sends each route's heartbeat when it is due, applies the silence rule,
//! and records what it learns in the route table (SPEC 8). The decisions (when, how often,
//! when a route is down) are `ferry_peer::health`'s; this only does the IO.

use std::sync::Arc;
use std::time::Duration;

use ferry_core::health::VERDICT_GRAIN;
use ferry_core::liveness::SIDE_PROBE_WAIT;
use ferry_peer::health::Failure;
use ferry_peer::routes::Route;
use ferry_ticket::NodeId;
use tokio::task::JoinSet;
use tracing::debug;

use crate::lifecycle::Lifecycle;

use super::Network;

/// The longest the prober sleeps. It wakes at the instant the route table names (the next
/// heartbeat due, the end of a silence allowance) or when the table rings because a heartbeat
/// became due sooner (`RouteTable::on_sooner`); this is only a safety net, as long as the grid
/// quiet heartbeats go out on (`QUIET_GRID`): a gateway at rest wakes for its peers when they
/// are due, not every second.
const TICK: Duration = ferry_core::health::QUIET_GRID;
/// The most heartbeats in flight at once.
const MAX_IN_FLIGHT: usize = 64;
/// The least time a heartbeat waits for its answer. A heartbeat that times out only triggers
/// the side probe; silence over six intervals, not one late answer, takes a route down.
const HEARTBEAT_TIMEOUT_FLOOR: Duration = Duration::from_millis(300);
/// The most: past this the side probe runs even on a quiet route.
const HEARTBEAT_TIMEOUT_CAP: Duration = Duration::from_secs(1);

/// Runs until the gateway stops.
pub async fn watch_routes(network: Arc<Network>, lifecycle: Arc<Lifecycle>) {
    let mut stopping = lifecycle.stopping();
    let mut beats = JoinSet::new();
    // The instant the last pass asked to be woken at, whichever arm then woke it.
    let mut asked: Option<std::time::Instant> = None;
    let bell = Arc::new(tokio::sync::Notify::new());
    network.routes.on_sooner({
        let bell = bell.clone();
        move || bell.notify_one()
    });
    loop {
        let now = network.clock.now();
        // Whichever arm woke this pass (a finished heartbeat or the bell can come first after
        // a stall), a pass far later than asked restarts every route's silence count, so the
        // heartbeats sent now have their six intervals to come back: the look after this one
        // comes a grain later, too soon for any answer, and would otherwise take routes down
        // for our own stall.
        if let Some(asked) = asked.take() {
            network.routes.excuse_stall(asked, now);
        }
        // Never a wake at `now`: a deadline the table cannot act on yet (every heartbeat slot
        // taken, say) would have the prober spin at one instant, burning a core in real time
        // and stopping the clock in simulated time.
        let wake = network
            .routes
            .next_wake()
            .map_or(now + TICK, |due| due.clamp(now + VERDICT_GRAIN, now + TICK));
        asked = Some(wake);
        tokio::select! {
            // Biased: a stop first, and a replayable order under simulation.
            biased;
            _ = stopping.wait_for(|stopping| *stopping) => break,
            // Finished beats are reaped before new ones start (they count toward the bound).
            Some(_) = beats.join_next(), if !beats.is_empty() => {}
            // A heartbeat became due sooner: look at the table's next instant again.
            () = bell.notified() => {}
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {
                let now = network.clock.now();
                // Woken far later than asked, or behind reading the peer socket (the answers
                // may be in it, unread): the silence so far is ours and counts afresh, but
                // only within 10 s of each route's last word (`STALL_EXCUSED_AT_MOST`), so the
                // verdict is still drawn and a gateway behind for good gives a dead peer up.
                asked = None;
                network.routes.excuse_stall(wake, now);
                network
                    .routes
                    .excuse_own_silence(network.caller.endpoint_behind(), now);
                for (node, route) in network.routes.check_silence(now) {
                    debug!(peer = %node.short(), %route, "route silent: down");
                }
                for (node, route) in network.routes.forget_unheard(now) {
                    debug!(peer = %node.short(), %route, "discovered route unheard: forgotten");
                }
                for (node, route, interval) in network.routes.due_probes(now) {
                    if beats.len() >= MAX_IN_FLIGHT {
                        break;
                    }
                    beats.spawn(beat(network.clone(), node, route, interval));
                }
            }
        }
    }
    beats.abort_all();
}

async fn beat(network: Arc<Network>, node: NodeId, route: Route, interval: Duration) {
    let timeout = interval.clamp(HEARTBEAT_TIMEOUT_FLOOR, HEARTBEAT_TIMEOUT_CAP);
    let result = network
        .caller
        .heartbeat(node, &route, interval, timeout)
        .await;
    let now = network.clock.now();
    network.routes.probe_finished(node, route.addr);
    match result {
        Ok(rtt) => network.routes.heard(node, route.addr, now, Some(rtt)),
        Err(Some(failure)) => {
            debug!(peer = %node.short(), %route, %failure, "route down");
            let port_closed = failure == Failure::PortClosed;
            network.routes.failed(node, route.addr, now, failure);
            if port_closed {
                // The other routes very likely lead to the same dead process: a side probe of
                // each now, not a heartbeat each (which would wait for its answer first).
                for other in network.routes.other_routes(node, route.addr) {
                    if network.caller.port_refuses(&other, SIDE_PROBE_WAIT).await {
                        let now = network.clock.now();
                        network
                            .routes
                            .failed(node, other.addr, now, Failure::PortClosed);
                    }
                }
                network.routes.probe_all_now(node, network.clock.now());
            }
        }
        // No answer this time is no verdict (a loaded machine can miss one): silence over six
        // intervals decides for a route that was up; one never heard stays `probing`.
        Err(None) => {}
    }
}
