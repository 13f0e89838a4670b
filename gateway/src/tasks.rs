//! Tasks that must outlive the request that started them, counted so a stop can wait for them.
//!
//! An app's write is carried out on a task of its own: if the app's HTTP client gives up (or
//! its connection drops), the handler's future is dropped, but the write goes on to its
//! outcome, which the call log records for settling. Nothing is spawned and forgotten: a stop
//! waits, within its drain bound, until the count is zero.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A count of running tasks, and a way to wait until there are none.
#[derive(Debug, Default, Clone)]
pub struct TaskCounter {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one task while alive.
#[derive(Debug)]
struct Running(Arc<Inner>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl TaskCounter {
    /// Runs `task` to its end even if the returned handle is dropped.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.inner.clone());
        tokio::spawn(async move {
            let _running = running;
            task.await
        })
    }

    /// How many are running.
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Returns once no task is running.
    pub async fn wait_idle(&self) {
        loop {
            let idle = self.inner.idle.notified();
            if self.running() == 0 {
                return;
            }
            idle.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_whose_handle_is_dropped_still_runs_and_is_waited_for() {
        let counter = TaskCounter::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        drop(counter.spawn(async move {
            let _ = rx.await;
            let _ = done_tx.send(());
        }));
        assert_eq!(counter.running(), 1);
        let _ = tx.send(());
        counter.wait_idle().await;
        assert_eq!(counter.running(), 0);
        done_rx.await.unwrap();
    }
}
