//! The calls this process is carrying out now (the write path registers each before it is
//! sent; settling waits on them rather than asking their owner). Its own module because both
//! the call log (which releases a call's hold when its outcome is recorded) and settlement use
//! it.

use std::collections::HashMap;
use std::sync::Arc;

use ferry_peer::outcome::WriteOutcome;
use ferry_peer::wire::RequestId;
use tokio::sync::watch;

/// The calls this process is carrying out now, by request id: what a settle query waits on
/// instead of asking the owner (which would fence a write still on its way).
#[derive(Debug, Default)]
pub struct InFlight {
    calls: std::sync::Mutex<Calls>,
}

/// The calls by request id. foldhash: keyed per process, faster than SipHash on a request id
/// (see `ferry_core::capacity::send_gate`).
type Calls = HashMap<RequestId, InFlightCall, foldhash::fast::RandomState>;

/// One call in flight, as a settle query sees it.
#[derive(Debug, Clone)]
pub(crate) struct InFlightCall {
    pub(crate) since_ms: u64,
    pub(crate) owner_label: String,
    pub(crate) outcome: watch::Receiver<Option<WriteOutcome>>,
}

/// Held by the task carrying out one write; publishes its outcome, and takes the call off the
/// registry when dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    registry: Arc<InFlight>,
    request_id: RequestId,
    outcome: watch::Sender<Option<WriteOutcome>>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a call on its way to `owner_label`.
    pub fn register(
        self: &Arc<Self>,
        request_id: RequestId,
        owner_label: &str,
        since_ms: u64,
    ) -> InFlightGuard {
        let (outcome, receiver) = watch::channel(None);
        self.lock().insert(
            request_id,
            InFlightCall {
                since_ms,
                owner_label: owner_label.to_string(),
                outcome: receiver,
            },
        );
        InFlightGuard {
            registry: self.clone(),
            request_id,
            outcome,
        }
    }

    pub(crate) fn get(&self, request_id: RequestId) -> Option<InFlightCall> {
        self.lock().get(&request_id).cloned()
    }
}

impl InFlightGuard {
    /// The call's outcome, for settle queries waiting on it.
    pub fn publish(&self, outcome: &WriteOutcome) {
        self.outcome.send_replace(Some(outcome.clone()));
    }
}

impl Drop for InFlightGuard {
    /// Takes its own call off the registry; not a later call under the same id (an app may
    /// send one id twice at once), which registered over it and has a guard of its own.
    fn drop(&mut self) {
        let mut calls = self.registry.lock();
        let mine = calls
            .get(&self.request_id)
            .is_some_and(|call| call.outcome.same_channel(&self.outcome.subscribe()));
        if mine {
            calls.remove(&self.request_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_leaving_does_not_take_a_later_one_under_the_same_id_with_it() {
        let registry = Arc::new(InFlight::default());
        let id = RequestId::generate();
        let first = registry.register(id, "a", 1);
        let second = registry.register(id, "a", 2);
        drop(first);
        assert_eq!(registry.get(id).map(|call| call.since_ms), Some(2));
        drop(second);
        assert!(registry.get(id).is_none());
    }
}
