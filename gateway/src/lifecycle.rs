//! A gateway's life: the stop signal every part watches, and the long-running jobs started
//! after start-up (replica syncs), which a stop aborts. Components get a handle instead of
//! reaching into the gateway.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::JoinSet;

/// The stop signal and the background jobs.
#[derive(Debug)]
pub struct Lifecycle {
    stopping: watch::Sender<bool>,
    background: Mutex<JoinSet<()>>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self {
            stopping: watch::Sender::new(false),
            background: Mutex::new(JoinSet::new()),
        }
    }
}

impl Lifecycle {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Announces the stop to everything watching: the API, the peer server, the jobs.
    pub fn begin_stop(&self) {
        self.stopping.send_replace(true);
    }

    pub fn stopping(&self) -> watch::Receiver<bool> {
        self.stopping.subscribe()
    }

    /// Runs `job` until it ends or the gateway stops.
    pub fn spawn(&self, job: impl std::future::Future<Output = ()> + Send + 'static) {
        let mut jobs = self.background.lock().unwrap_or_else(|p| p.into_inner());
        while jobs.try_join_next().is_some() {}
        jobs.spawn(job);
    }

    /// Stops every background job.
    pub fn stop_background(&self) {
        self.background
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }
}
