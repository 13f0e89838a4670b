//! The relay's owner: the QUIC server, and what answers a request.
//!
//! For writes, one writer thread owning the only SQLite connection, with group commit; for
//! reads, a map in memory: the least an owner can do.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{params, Connection};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::frames::{self, ReadAnswer, WriteAnswer};

/// Ferry's owner queue depth and batch size (`gateway/src/owner/executor.rs`).
pub const QUEUE_DEPTH: usize = 4096;
const MAX_BATCH: usize = 256;
/// The largest value the relay takes; the benchmark sends 64 bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
const MAX_FRAME_BYTES: usize = 2 + u16::MAX as usize + MAX_VALUE_BYTES;

/// Records held in memory, for reads: key to value.
pub type Records = Arc<HashMap<String, Bytes>>;

/// What answers the owner's streams.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Writes, queued for the writer thread.
    Writer(mpsc::Sender<Job>),
    /// Reads, answered from memory.
    Memory(Records),
}

/// One write waiting for the writer thread; the answer is the new row's id.
#[derive(Debug)]
pub struct Job {
    key: String,
    value: Bytes,
    reply: oneshot::Sender<Option<i64>>,
}

/// Group commit: up to [`MAX_BATCH`] queued writes per transaction, answers after the commit.
pub fn write_loop(mut db: Connection, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let revisions = commit_batch(&mut db, &batch).unwrap_or_else(|_| vec![None; batch.len()]);
        for (job, revision) in batch.drain(..).zip(revisions) {
            let _ = job.reply.send(revision);
        }
    }
}

fn commit_batch(db: &mut Connection, batch: &[Job]) -> rusqlite::Result<Vec<Option<i64>>> {
    let tx = db.transaction()?;
    let mut revisions = Vec::with_capacity(batch.len());
    {
        let mut insert = tx.prepare_cached("INSERT INTO records (key, value) VALUES (?1, ?2)")?;
        for job in batch {
            // A failed insert undoes only itself; the rest of the batch goes on.
            revisions.push(match insert.execute(params![job.key, &job.value[..]]) {
                Ok(_) => Some(tx.last_insert_rowid()),
                Err(_) => None,
            });
        }
    }
    tx.commit()?;
    Ok(revisions)
}

pub async fn serve_quic(endpoint: quinn::Endpoint, backend: Backend) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                connections.spawn(serve_connection(incoming, backend.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    while connections.join_next().await.is_some() {}
}

async fn serve_connection(incoming: quinn::Incoming, backend: Backend) {
    let Ok(conn) = incoming.await else { return };
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            accepted = conn.accept_bi() => {
                let Ok((send, recv)) = accepted else { break };
                streams.spawn(serve_stream(send, recv, backend.clone()));
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => {}
        }
    }
    while streams.join_next().await.is_some() {}
}

async fn serve_stream(send: quinn::SendStream, mut recv: quinn::RecvStream, backend: Backend) {
    let Ok(frame) = recv.read_to_end(MAX_FRAME_BYTES).await else {
        return;
    };
    let request = frames::decode_request(&frame);
    match backend {
        Backend::Writer(jobs) => {
            let answer = match request {
                None => WriteAnswer::Malformed,
                Some((key, value)) => {
                    submit(&jobs, key.to_string(), Bytes::copy_from_slice(value)).await
                }
            };
            reply(send, &frames::encode_write_answer(answer)).await;
        }
        Backend::Memory(records) => {
            let answer = match request {
                Some((key, [])) => records
                    .get(key)
                    .map_or(ReadAnswer::NotFound, |value| ReadAnswer::Found(value)),
                _ => ReadAnswer::Malformed,
            };
            reply(send, &frames::encode_read_answer(&answer)).await;
        }
    }
}

async fn reply(mut send: quinn::SendStream, answer: &[u8]) {
    if send.write_all(answer).await.is_ok() {
        let _ = send.finish();
    }
}

async fn submit(jobs: &mpsc::Sender<Job>, key: String, value: Bytes) -> WriteAnswer {
    let (reply, answered) = oneshot::channel();
    if jobs.try_send(Job { key, value, reply }).is_err() {
        return WriteAnswer::Busy;
    }
    match answered.await {
        Ok(Some(revision)) => WriteAnswer::Written(revision),
        _ => WriteAnswer::Failed,
    }
}
